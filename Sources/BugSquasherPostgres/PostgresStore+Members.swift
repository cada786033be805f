public import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// The daemons attached to the store (`bs_daemons`), and whether the server answers: each
// process's follower writes a heartbeat row every couple of seconds on its listening connection.
extension PostgresStore: StoreMembership, IdentityChecking {
    /// What this process tells the others and knows of the server.
    struct Health: Sendable {
        var member: (id: String, host: String)?
        var reachability = StoreReachability.reachable
        /// Set while the server is unreachable because a heartbeat went unanswered (silent, not
        /// refusing: connecting would wait out the timeout): when that was found, or when a
        /// statement last tried to connect since (see ``PostgresStore/silentProbeInterval``).
        var silentProbedAt: ContinuousClock.Instant?
        /// The server's error when it refused the last heartbeat; `nil` when that one worked.
        var heartbeatRefusal: String?
        /// What became of the store this process opened, once a heartbeat found the server
        /// without it (``IdentityChecking``).
        var identityProblem: String?
    }

    public func attach(as member: String, host: String) {
        health.withLock { $0.member = (member, host) }
        // Listed at once; the follower's heartbeats keep the row fresh from then on.
        let token = delivered.withLock { $0 } ?? 0
        do {
            try withConnection("attach to the store") { connection in
                _ = try run(
                    Self.heartbeatSQL(schema: nil), [.string(member), .string(host), .int64(token)],
                    on: connection)
            }
        } catch {
            logger.warning(
                "could not list this daemon among the store's daemons yet",
                metadata: ["error": "\(Self.describe(error))"])
        }
        startFollowing()
    }

    /// The heartbeat: a member's row, made or refreshed, with the token it has read; it answers
    /// the newest token issued. `schema` qualifies the tables (nil: the search path's).
    static func heartbeatSQL(schema: String?) -> String {
        let prefix = schema.map { "\(PostgresSchema.quote($0))." } ?? ""
        return """
            INSERT INTO \(prefix)bs_daemons (id, host, token, started_at, last_seen) VALUES ($1, $2, $3, now(), now())
            ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, token = EXCLUDED.token, last_seen = now()
            RETURNING (SELECT token FROM \(prefix)bs_counter WHERE id = 1),
                (SELECT value FROM \(prefix)bs_metadata WHERE key = 'storeIdentifier')
            """
    }

    public func detach() {
        guard let member = health.withLock({ $0.member }) else { return }
        health.withLock { $0.member = nil }
        _ = try? withConnection("detach from the store") { connection in
            try run("DELETE FROM bs_daemons WHERE id = $1", [.string(member.id)], on: connection)
        }
    }

    public func forget(_ member: String) throws -> Bool {
        try withConnection("forget a daemon") { connection in
            // The silence is checked in the statement itself: a heartbeat that comes first keeps the row.
            try !run(
                "DELETE FROM bs_daemons WHERE id = $1 AND last_seen < now() - make_interval(secs => $2) RETURNING id",
                [.string(member), .double(StoreMember.silentAfter)], on: connection
            ).isEmpty
        }
    }

    /// The daemons attached, this one as it is now (its row is as fresh as its last heartbeat,
    /// which a daemon cut off from the server could not write: it would show it silent and behind
    /// right after the network healed).
    public func members() throws -> [StoreMember] {
        let (me, mine) = (health.withLock { $0.member?.id }, delivered.withLock { $0 })
        return try withConnection("list the daemons attached", onceMoreIfEnded: true) { connection in
            try run(
                """
                SELECT d.id, d.host, d.token, c.token - d.token, extract(epoch FROM now() - d.last_seen)::float8
                FROM bs_daemons d, bs_counter c WHERE c.id = 1 AND d.last_seen > now() - interval '1 day'
                ORDER BY d.host, d.id
                """, [], on: connection
            ).map { row in
                let (id, host, token, behind, silent) = try row.decode((String, String, Int64, Int64, Double).self)
                if id == me, let mine {
                    return StoreMember(
                        id: id, host: host, token: HistoryToken(rawValue: mine), behind: token + behind - mine,
                        silentFor: 0)
                }
                return StoreMember(
                    id: id, host: host, token: HistoryToken(rawValue: token), behind: behind, silentFor: silent)
            }
        }
    }

    public var reachability: StoreReachability { health.withLock { $0.reachability } }

    public func identityProblem() -> String? { health.withLock { $0.identityProblem } }

    /// One heartbeat, on the follower's connection: this process's row, or a plain round trip
    /// while it has not attached. A newest token issued below the last one delivered (read
    /// before the statement, so never newer than it) means the database went back: the
    /// follower deals with it (``moveCounterPastDelivered(on:)``).
    func heartbeat(on connection: PostgresConnection) async throws {
        let member = health.withLock { $0.member }
        let read = delivered.withLock { $0 }
        guard let member else {
            _ = try await connection.query("SELECT 1", logger: logger).get()
            return
        }
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(member.id)
        bindings.append(member.host)
        bindings.append(read ?? 0)
        let rows = try await connection.query(
            PostgresQuery(unsafeSQL: Self.heartbeatSQL(schema: configuration.schema), binds: bindings), logger: logger
        ).get()
        guard let row = rows.first else { return }
        let (issued, identifier) = try row.decode((Int64?, String?).self)
        if let read, let issued, issued < read {
            counterBehind.store(true, ordering: .relaxed)
        }
        if let opened = loaded.withLock({ $0?.metadata.storeIdentifier }), identifier != opened {
            noteIdentityProblem(
                "the \(place) now holds \(identifier.map { "another store (\($0))" } ?? "a store without an identifier") instead of store \(opened), which this process opened"
            )
        }
    }

    /// Records, and logs once, what became of the store this process opened.
    func noteIdentityProblem(_ problem: String) {
        let first = health.withLock { health in
            defer { health.identityProblem = health.identityProblem ?? problem }
            return health.identityProblem == nil
        }
        if first {
            logger.critical(
                "\(problem); what the database holds now must not be served under the object IDs and tokens of the store this process opened"
            )
        }
    }

    public func observeReachableAgain(_ handler: @escaping @Sendable () -> Void) {
        reachableHandlers.withLock { $0.append(handler) }
    }

    /// The server answered: logged, and the observers of ``observeReachableAgain(_:)`` called,
    /// when it had not before.
    func markReachable() {
        let was = health.withLock { health in
            defer { (health.reachability, health.silentProbedAt) = (.reachable, nil) }
            return health.reachability
        }
        if case .unreachable(let since, _) = was {
            for handler in reachableHandlers.withLock({ $0 }) { handler() }
            logger.notice(
                "PostgreSQL answers again; reading the saves missed from the history",
                metadata: [
                    "store.address": "\(configuration.address)",
                    "outage.seconds": "\(Int(Date().timeIntervalSince(since).rounded()))",
                ])
        }
    }

    /// Notes how the last heartbeat went: `refusal`, the server's error when it refused the
    /// statement, or `nil` when it worked. A refusal is logged once until a heartbeat works again:
    /// the server answers, so nothing else changes, but this process's row among the store's
    /// daemons is not kept fresh (the others' `status` shows it silent).
    func noteHeartbeat(refusal: String?) {
        let before = health.withLock { health in
            defer { health.heartbeatRefusal = refusal }
            return health.heartbeatRefusal
        }
        if let refusal, before == nil {
            logger.warning(
                "PostgreSQL refused this daemon's heartbeat; it answers, so saves go on, but this daemon's row among the store's daemons is not kept fresh; check the store's tables and the role's privileges",
                metadata: ["store.address": "\(configuration.address)", "error": "\(refusal)"])
        } else if refusal == nil, before != nil {
            logger.notice("the heartbeat works again", metadata: ["store.address": "\(configuration.address)"])
        }
    }

    /// The server did not answer; with `hung`, a heartbeat went unanswered on an open connection
    /// (a network that drops packets), so the store's own connection is closed too, ending the
    /// statements that wait on it. The outage counts from the unanswered heartbeat, when hung.
    func markUnreachable(_ reason: String, hung: Bool) {
        let first = health.withLock { health in
            if hung { health.silentProbedAt = .now }
            guard case .reachable = health.reachability else { return false }
            let silence = hung ? Double(HistoryFollower.heartbeatDeadline.components.seconds) : 0
            health.reachability = .unreachable(since: Date() - silence, reason: reason)
            return true
        }
        if first {
            // Silence is refused at once (see `refuseWhileUnreachable`); a connection that failed
            // (a restart, a session ended) leaves each statement to try for itself.
            logger.warning(
                hung
                    ? "PostgreSQL does not answer; saves are refused until it does"
                    : "lost the connection to PostgreSQL; reconnecting every second",
                metadata: ["store.address": "\(configuration.address)", "reason": "\(reason)"])
        }
        if hung { closeOpenConnection() }
    }
}
