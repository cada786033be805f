public import BugSquasherGraph
import Foundation
public import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// The incremental store on PostgreSQL: the SQLite store's layout and meaning in a database
/// that several daemons on several hosts share. History tokens come from one counter row that
/// every save updates last, just before it commits, so they are gapless and in commit order
/// whichever process commits.
/// Why it is built this way: docs/DESIGN-NOTES.md, "PostgreSQL tokens come from one counter row".
///
/// ```swift
/// let store = PostgresStore(configuration: try PostgresStoreConfiguration(url: "postgresql://squasherd@db/bugs"))
/// let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
/// ```
public final class PostgresStore: IncrementalStore, CommitObservable, SharedStore, Sendable {
    public var storeType: String { "PostgreSQL" }

    /// Where the database is.
    public let configuration: PostgresStoreConfiguration
    /// The channel of the store's commit hints: `NOTIFY` after each save, with its token.
    let hintChannel: String
    let logger: Logger

    struct Loaded: Sendable {
        let model: ManagedObjectModel
        let metadata: StoreMetadata
    }

    let loaded = Mutex<Loaded?>(nil)
    /// The connection of saves and everything else that writes or follows the history, and the
    /// connection of fetches, so that an importer fetches its next chunk's rows while the chunk
    /// before saves. Each is opened on first use and again after it broke; its lock serializes
    /// its statements and transactions in this process.
    private let writing = ConnectionSlot(id: 1)
    private let reading = ConnectionSlot(id: 2)
    /// The names of the statements this process prepares on its connections.
    let preparedNames = PreparedNames()
    /// The history's page statements this process prepared on its connections.
    let preparedPages = PreparedPages()
    /// The statements of one-object edits, by what they change (`writeSingleUpdate`).
    let singleUpdateTexts = Mutex<[SingleUpdateShape: String]>([:])
    private let registrations = RegistrationCounts()
    let commitHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])
    /// The observers of the other processes' saves only (``SharedStore``).
    let otherHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])
    /// Which of other processes' inserts this process's observers look for (``SharedStore``).
    let insertInterest = Mutex<(@Sendable (String) -> InsertInterest)?>(nil)
    /// The observers of saves pruned before this process read them (``SharedStore``).
    let gapHandlers = Mutex<[@Sendable (HistoryToken) -> Void]>([])
    /// The newest token handed to the commit observers; read and written with the connection
    /// held, so that deliveries are serialized in token order.
    let delivered = Mutex<Int64?>(nil)
    /// The newest token of this process's own saves, set as each commits, before it and the
    /// saves before it are delivered (with the writing connection held): a hint up to here
    /// needs no read of the history.
    let committedHere = Mutex<Int64>(0)
    /// The rows of objects recent saves updated, as those saves left them, kept in token order
    /// with the deliveries (see ``remember(_:)``): an edit starts from one without reading it.
    let recentRows = Mutex<[ObjectID: RowSnapshot]>([:])
    /// Primary keys taken from `bs_sequence` ahead of the saves that will use them; emptied
    /// whenever the writing connection is opened again.
    let keyReserve = Mutex(KeyReserve())
    /// Whether the last delivery of other processes' saves failed: the failures after the
    /// first, once a second while the server is away, are not logged again.
    let deliveryFailing = Atomic<Bool>(false)
    /// Whether a heartbeat found the newest token issued below the last one delivered (see
    /// ``moveCounterPastDelivered(on:)``).
    let counterBehind = Atomic<Bool>(false)
    /// Follows the other processes' commits once someone observes commits.
    private let follower = Mutex<HistoryFollower?>(nil)
    /// How many threads hold or wait for the writing connection.
    private let writingHolders = Atomic<Int>(0)
    /// What an interactive save opens, here or in another process (see ``init(configuration:logger:editsFirst:)``).
    let editsFirst: EditsFirst?
    /// The history row the interactive save holding the writing connection sent, if any: what
    /// finds it again when its answer is lost (``settle(_:)``).
    let sentHistoryRow = Mutex<SentHistoryRow?>(nil)
    /// This process's row among the daemons attached, and whether the server answers.
    let health = Mutex(Health())
    /// The observers of the server answering again (``observeReachableAgain(_:)``).
    let reachableHandlers = Mutex<[@Sendable () -> Void]>([])

    /// A store in the database `configuration` names; nothing connects before the coordinator
    /// loads it.
    /// With `editsFirst`, bulk work of this process gives way to interactive saves, this
    /// process's and the other processes' alike (``EditsFirst``; the hint of another process's
    /// save says whether it was bulk).
    public init(
        configuration: PostgresStoreConfiguration, logger: Logger = Logger(label: "bugsquasher.postgres"),
        editsFirst: EditsFirst? = nil
    ) {
        self.configuration = configuration
        self.logger = logger
        self.editsFirst = editsFirst
        hintChannel = Self.hintChannel(schema: configuration.schema)
    }

    deinit {
        follower.withLock { $0?.stop() }
        for slot in [writing, reading] {
            guard let open = slot.connection.withLock({ $0 }) else { continue }
            // The last reference can go on the connections' event loop (a task of the store's
            // that ran there ends), which must not wait for itself: there the close goes on alone.
            if open.eventLoop.inEventLoop {
                let _: EventLoopFuture<Void> = open.close()
            } else {
                try? open.close().blockingValue()
            }
        }
    }

    /// Calls `handler` after each commit to the store, this process's and every other's
    /// (other daemons on other hosts), serially and in token order, from the next one on. The
    /// other processes' saves come without values.
    public func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void) {
        commitHandlers.withLock { $0.append(handler) }
        startFollowing()
    }

    public func observeCommitsOfOthers(_ handler: @escaping @Sendable (DidSave) -> Void) {
        otherHandlers.withLock { $0.append(handler) }
        startFollowing()
    }

    public func screenInsertsOfOthers(by interest: @escaping @Sendable (_ entity: String) -> InsertInterest) {
        insertInterest.withLock { $0 = interest }
    }

    /// Starts the follower of the other processes' saves, from the store's newest token.
    func startFollowing() {
        if delivered.withLock({ $0 }) == nil, let token = try? currentHistoryToken() {
            delivered.withLock { $0 = $0 ?? token.rawValue }
        }
        follower.withLock { follower in
            guard follower == nil else { return }
            follower = HistoryFollower(store: self)
        }
    }

    // MARK: The connection

    /// Runs `body` on the store's writing connection, holding it: statements of other threads
    /// wait. A connection that broke is dropped, so that the next call opens a new one; the error
    /// becomes a ``GraphError/Code/storeIO`` that says which server and what happened. The
    /// follower delivering other processes' saves holds it without counting as writing
    /// (``isWriting``). With `onceMoreIfEnded`, `body` runs once more on a new connection when
    /// the session of a connection kept from before had ended, as a read does: only for work
    /// that may run twice.
    func withConnection<T>(
        _ action: String, countsAsWriting: Bool = true, onceMoreIfEnded: Bool = false,
        _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        guard countsAsWriting else { return try with(writing, action, onceMoreIfEnded: onceMoreIfEnded, body) }
        writingHolders.add(1, ordering: .sequentiallyConsistent)
        defer {
            writingHolders.subtract(1, ordering: .sequentiallyConsistent)
            follower.withLock { $0 }?.lookAfterRelease()
        }
        return try with(writing, action, onceMoreIfEnded: onceMoreIfEnded, body)
    }

    /// Runs `body` holding the writing connection's lock, as
    /// ``withConnection(_:countsAsWriting:onceMoreIfEnded:_:)`` does without counting as writing,
    /// but only when no one holds it, and without the connection: for work that must not
    /// interleave with a save or a delivery, on a thread that may not wait (an event loop). Does
    /// nothing when someone holds it.
    func ifConnectionFree(_ body: () -> Void) {
        writing.connection.withLockIfAvailable { _ in body() }
    }

    /// Whether a thread holds or waits for the writing connection (other than the follower
    /// delivering other processes' saves): it looks at the hints that came meanwhile when it
    /// lets go (see ``HistoryFollower``).
    var isWriting: Bool { writingHolders.load(ordering: .sequentiallyConsistent) > 0 }

    /// Runs `body` on the store's reading connection, as
    /// ``withConnection(_:countsAsWriting:onceMoreIfEnded:_:)`` on the writing one: for statements
    /// that only read rows, which see every commit that has returned. A read on a connection kept
    /// from before whose session had ended (an administrator's `pg_terminate_backend`, a server
    /// restarted meanwhile) runs once more on a new one.
    func withReadingConnection<T>(_ action: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        try with(reading, action, onceMoreIfEnded: true, body)
    }

    private func with<T>(
        _ slot: ConnectionSlot, _ action: String, onceMoreIfEnded: Bool = false,
        _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        try slot.connection.withLock { current in
            if slot === writing { sentHistoryRow.withLock { $0 = nil } }
            var again = onceMoreIfEnded
            while true {
                do {
                    return try run(body, in: slot, action, current: &current)
                } catch let ended as EndedSession {
                    guard again else { throw ended.failure }
                    again = false
                    logger.info(
                        "the session of a kept connection had ended; running the statements once more on a new one",
                        metadata: ["action": "\(action)", "reason": "\(ended.reason)"])
                }
            }
        }
    }

    /// The work of ``with(_:_:onceMoreIfEnded:_:)`` with the slot's lock held: `current` is its
    /// connection, opened when there is none.
    private func run<T>(
        _ body: (PostgresConnection) throws -> T, in slot: ConnectionSlot, _ action: String,
        current: inout PostgresConnection?
    ) throws -> sending T {
        var kept = false
        do {
            let open: PostgresConnection
            // One being closed (the server found silent) is left to close.
            if let current, !ClosingConnections.isClosing(current) {
                open = current
                kept = true
            } else {
                try refuseWhileUnreachable(action)
                open = try connect(id: slot.id)
                if slot === writing {
                    // The server may have come back from a backup: keys reserved from it
                    // before may be given out again.
                    keyReserve.withLock { $0.removeAll() }
                    slot.session.withLock { $0 = serverSession(of: open) }
                }
                // A probe got through (see `refuseWhileUnreachable`): the server answers.
                if case .unreachable = reachability { markReachable() }
                current = open
                slot.live.withLock { $0 = open }
            }
            return try body(open)
        } catch let error as GraphError {
            throw error
        } catch let error as PostgresStoreError {
            throw GraphError(.storeIO, error.statement, advice: error.advice)
        } catch {
            if let open = current, open.isClosed { current = nil }
            let failure = storeError(action, error)
            guard Self.endsSession(error) else { throw failure }
            // The connection is no good, whatever it says of itself yet. `close` keeps it until it
            // has closed: postgres-nio asserts that a connection it frees is closed.
            if let dead = current, !dead.isClosed { ClosingConnections.close(dead) }
            current = nil
            // An interactive save that may have committed: its caller finds out (`settle`).
            if slot === writing, let sent = sentHistoryRow.withLock({ $0 }) {
                throw AnswerLost(
                    sent: sent, session: slot.session.withLock { $0 }, failure: failure,
                    reason: Self.describe(error))
            }
            throw kept ? EndedSession(failure: failure, reason: Self.describe(error)) : failure
        }
    }

    /// A statement on a connection kept from before failed because its session had ended:
    /// ``with(_:_:onceMoreIfEnded:_:)`` may run it once more on a new connection.
    private struct EndedSession: Error {
        let failure: GraphError
        /// What ended it, in words (``describe(_:)``).
        let reason: String
    }

    /// Refuses at once to connect while the follower's heartbeat finds the server silent: each
    /// attempt would wait out the connect timeout, holding the connection's lock, so that edits
    /// queued behind one another would wait five seconds each. A server that refuses (one
    /// restarting) is tried as before: that fails at once. The follower reconnects on its own
    /// and marks the server reachable again; every ``silentProbeInterval`` one statement tries
    /// all the same, so that the store finds the server even if the follower could not tell
    /// (docs/DESIGN-NOTES.md, "A heartbeat tells a dead network from a quiet one").
    private func refuseWhileUnreachable(_ action: String) throws {
        let state = health.withLock { health -> StoreReachability in
            guard let probed = health.silentProbedAt else { return .reachable }
            if ContinuousClock.now - probed >= Self.silentProbeInterval {
                health.silentProbedAt = .now
                return .reachable
            }
            return health.reachability
        }
        guard case .unreachable(let since, let reason) = state else { return }
        let seconds = Int(Date().timeIntervalSince(since).rounded())
        throw GraphError(
            .storeIO,
            "Could not \(action): PostgreSQL at \(configuration.address) has not answered for \(seconds) s (\(reason)).",
            advice: "squasherd reconnects by itself as soon as it answers; try again then.")
    }

    /// How often a statement tries to connect all the same while the server is silent.
    static let silentProbeInterval = Duration.seconds(15)

    /// Closes the store's connections from any thread: a statement waiting on one fails, and the
    /// next one connects again.
    func closeOpenConnection() {
        for slot in [writing, reading] {
            slot.live.withLock { open in
                if let open, !open.isClosed { ClosingConnections.close(open) }
                open = nil
            }
        }
    }

    /// How postgres-nio connects to the server: the password read, the TLS context made, the
    /// store's schema on the search path, a session left idle in a transaction ended by the
    /// server (``idleTransactionTimeout``), the server's TCP told to give up on this host when it
    /// stops answering (``serverTCPSettings``), and a server that does not answer given up on
    /// after five seconds.
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let password = try configuration.resolvedPassword()
        var connection: PostgresConnection.Configuration
        if let directory = configuration.socketDirectory {
            connection = .init(
                unixSocketPath: "\(directory)/.s.PGSQL.\(configuration.port)", username: configuration.user,
                password: password, database: configuration.database)
        } else {
            connection = .init(
                host: configuration.host ?? "localhost", port: configuration.port, username: configuration.user,
                password: password, database: configuration.database, tls: try tlsContext())
        }
        connection.options.connectTimeout = .seconds(5)
        // In the startup message, so that connecting is one step that the timeout bounds (a
        // `SET` after it would wait for ever on a server that went silent in between). A
        // `statement_timeout` or `lock_timeout` a database administrator set for every client
        // would cancel an import's chunk (a COPY of thousands of rows) or a save waiting its
        // turn for the token, again at every try: squasherd bounds its own waits (heartbeats,
        // the idle-transaction timeout), so its sessions have neither. An `idle_session_timeout`
        // would end the sessions it keeps between saves, each end an outage in its log and
        // metrics: its sessions have none either (PostgreSQL 14 and later know the setting).
        connection.options.additionalStartupParameters =
            [
                ("search_path", PostgresSchema.quote(configuration.schema)),
                ("application_name", configuration.applicationName),
                ("idle_in_transaction_session_timeout", "\(Self.idleTransactionTimeout.components.seconds * 1000)"),
                ("statement_timeout", "0"), ("lock_timeout", "0"), ("idle_session_timeout", "0"),
            ] + Self.serverTCPSettings
        return connection
    }

    /// How the server's end of each TCP connection finds this host gone: keepalive probes after
    /// 15 s of silence, 5 s apart, three unanswered; and data unacknowledged for 30 s. A daemon
    /// gives up on a silent connection within seconds and opens another, but its closing
    /// handshake is lost when the network between them is down; without these the server keeps
    /// the old session, its memory and a slot of `max_connections`, until the kernel's default
    /// keepalive gives up after more than two hours. Unix sockets ignore them.
    /// Why: docs/OPERATIONS.md, "Running on PostgreSQL" (the failure table).
    static let serverTCPSettings = [
        ("tcp_keepalives_idle", "15"), ("tcp_keepalives_interval", "5"), ("tcp_keepalives_count", "3"),
        ("tcp_user_timeout", "30000"),
    ]

    /// How long the server lets a session of this store sit idle inside a transaction before it
    /// ends it. squasherd never waits between a transaction's statements; a session that does
    /// belongs to a process frozen or cut off without a word between taking its token and
    /// committing, whose lock on the counter row would hold every other daemon's saves until
    /// TCP gave up, for hours (docs/DESIGN-NOTES.md, "PostgreSQL tokens come from one counter
    /// row"). The transaction rolls back, as if the process had died.
    static let idleTransactionTimeout = Duration.seconds(10)

    private func tlsContext() throws -> PostgresConnection.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch configuration.tls {
        case .disable: return .disable
        case .require: tls.certificateVerification = .none
        case .verify(let caFile, let checkName):
            tls.certificateVerification = checkName ? .fullVerification : .noHostnameVerification
            if let caFile { tls.trustRoots = .file(caFile) }
        }
        return .require(try NIOSSLContext(configuration: tls))
    }

    /// The hint channel of the store in `schema`, the same in every process: `bs_` and the
    /// schema's name, cut to the 63 bytes PostgreSQL keeps of a name (at a character's end).
    /// A name holding `"` gets `bs_` and a hash of it instead: postgres-nio writes
    /// `LISTEN "channel"` without escaping, so such a channel could never be listened on.
    static func hintChannel(schema: String) -> String {
        if !schema.contains("\"") {
            var bytes = Array("bs_\(schema)".utf8.prefix(63))
            // A cut inside a character: drop its first bytes too.
            while String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
            return String(decoding: bytes, as: UTF8.self)
        }
        // FNV-1a: stable across processes and builds, unlike `Hasher`.
        let hash = schema.utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        return "bs_h" + String(hash, radix: 16)
    }

    private func connect(id: Int) throws -> PostgresConnection {
        try PostgresConnection.connect(
            on: PostgresEventLoops.group.next(), configuration: try connectionConfiguration(), id: id, logger: logger
        ).blockingValue()
    }

    /// What went wrong with the server, for a person.
    func storeError(_ action: String, _ error: any Error) -> GraphError {
        if let server = Self.serverFields(error), let message = server.message {
            let described = (error as? PSQLError).map(Described.init)
            // `cannot_connect_now`: the server is starting up or shutting down, as good as down.
            let cause: (any Error & Sendable)? =
                server.sqlState == "57P03" ? Unreachable(server: described) : described
            return GraphError(
                .storeIO, "Could not \(action): PostgreSQL at \(configuration.address) said: \(message).",
                advice: advice(sqlState: server.sqlState, hint: server.hint, message: message), cause: cause)
        }
        if let psql = error as? PSQLError, psql.code == .sslUnsupported {
            return GraphError(
                .storeIO,
                "Could not \(action): PostgreSQL at \(configuration.address) answers, but takes no TLS connections, which the store URL's sslmode asks for.",
                advice:
                    "Turn TLS on in the server's postgresql.conf (ssl = on, with a certificate), or connect with sslmode=disable on a network you trust."
            )
        }
        if let psql = error as? PSQLError, psql.code == .authMechanismRequiresPassword {
            return GraphError(
                .storeIO,
                "Could not \(action): PostgreSQL at \(configuration.address) asks for a password for the role \(configuration.user), and the store URL gives none.",
                advice:
                    "Give it in a file only squasherd may read, named by password_file= in the store URL (or a systemd credential, docs/OPERATIONS.md, \"Running on PostgreSQL\"), or let this host log in without one in the server's pg_hba.conf."
            )
        }
        if let psql = error as? PSQLError, Self.protocolFailures.contains(psql.code) {
            return GraphError(
                .storeIO,
                "Could not \(action): the connection to PostgreSQL at \(configuration.address) was lost, \(Self.describe(error)).",
                advice:
                    "The next statement connects again by itself: try again. If it happens every time, check that the store URL names PostgreSQL's own port, not another program's."
            )
        }
        // No connection, or one that broke (under a statement, too); not a TLS handshake that
        // failed (that reached the server, and waiting would not change it), nor anything else
        // that went wrong.
        let unreachable =
            error is ConnectionClosedUnderStatement || Self.isLegacyClosedConnection(error)
            || (error as? PSQLError).map { psql in
                Self.connectionFailures.contains(psql.code) && !(psql.underlying is NIOSSLError)
            } ?? false
        return GraphError(
            .storeIO,
            "Could not \(action): PostgreSQL at \(configuration.address) cannot be reached (\(Self.describe(error))).",
            advice: "Check that the server runs and that this host may connect to it (pg_hba.conf).",
            cause: unreachable ? Unreachable(server: nil) : nil)
    }

    /// What to do about the server's refusal `sqlState`, for the ones a new set-up meets (the
    /// role, its password, its rights, the database, the schema: `message`, the server's, says
    /// which a right is missing on); the server's own hint, or its log, for the rest.
    func advice(sqlState: String?, hint: String?, message: String = "") -> String {
        let (user, database) = (configuration.user, configuration.database)
        let schema = PostgresSchema.quote(configuration.schema)
        switch sqlState {
        case "3F000":  // invalid_schema_name: the schema is there, but the role may not use it
            return
                "The role \(user) may not use the schema \(schema) (another role owns it): give it the owner's rights (GRANT <the schema's owner> TO \(user)) to use the store there, or name a schema of its own in the store URL (schema=)."
        case "42501" where message.contains("for schema"):  // no CREATE on an existing schema
            return
                "Give the role \(user) the right to create tables in the schema \(schema) (as its owner: GRANT USAGE, CREATE ON SCHEMA \(schema) TO \(user)), or name a schema of its own in the store URL (schema=); for a store another role made there, that role's rights (GRANT <the schema's owner> TO \(user))."
        case "28P01", "28000":  // invalid_password, invalid_authorization_specification
            return
                "Check the user (\(user)) and the password (password_file= in the store URL); the server's pg_hba.conf says how this host may log in."
        case "3D000":  // invalid_catalog_name
            return
                "Create the database (as PostgreSQL's superuser: createdb -O \(user) \(database)), or name another one in the store URL."
        case "42501":  // insufficient_privilege
            return
                "Give the role \(user) the rights the store needs: CREATE on the database for a new store's schema (GRANT CREATE ON DATABASE \(database) TO \(user)), or a schema made for it (CREATE SCHEMA \(PostgresSchema.quote(configuration.schema)) AUTHORIZATION \(user)), and for a store another role made, that role's rights (GRANT <the schema's owner> TO \(user))."
        case "25006":  // read_only_sql_transaction
            return
                "The server takes no writes: it is a standby (a replica), or default_transaction_read_only is on for the role \(user) or the database \(database). Point the store URL at the primary, or turn the setting off where it was set (ALTER ROLE \(user) RESET default_transaction_read_only, or ALTER DATABASE \(database) RESET default_transaction_read_only)."
        case "42704":  // undefined_object: at connect, a setting this server does not know
            return
                "When the unknown setting is one squasherd sends as it connects (idle_session_timeout among them), the server is too old: squasherd needs PostgreSQL 14 or later (docs/OPERATIONS.md, \"Running on PostgreSQL\")."
        case "57P01", "57P02":  // admin_shutdown, crash_shutdown: the session was ended under it
            return
                "The server ended this session (pg_terminate_backend by an administrator or a pooler, or the server stopping or restarting): nothing was changed, and the next statement connects again by itself. Try again."
        case "53300":  // too_many_connections
            return
                "The server has no connection left for this role or database: each squasherd holds three. Raise max_connections (or the role's CONNECTION LIMIT), or stop other clients."
        default:
            guard let hint else { return "See the server's log for more." }
            return "The server's hint: \(hint.hasSuffix(".") ? hint : hint + ".")"
        }
    }

    /// The codes of errors that leave no connection to the server.
    static let connectionFailures: [PSQLError.Code] = [
        .connectionError, .serverClosedConnection, .clientClosedConnection,
    ]

    /// The codes of errors after which postgres-nio closes the connection by itself: the server
    /// sent a message the protocol does not allow at that point, or one that could not be read.
    /// The session goes with the connection; the server is not taken for out of reach (a port
    /// that is not PostgreSQL's fails so at once, and waiting would not change it).
    static let protocolFailures: [PSQLError.Code] = [.unexpectedBackendMessage, .messageDecodingFailure]

    /// The cause of an error whose server could not be reached (``GraphError/isServerUnreachable``).
    struct Unreachable: ServerUnreachable, CustomStringConvertible {
        /// The server's refusal, when it answered that it takes no connections now.
        var server: Described?
        var description: String { server?.description ?? "no connection to the server" }
    }

    /// A server's error as the cause of a ``GraphError``, described in words (postgres-nio's
    /// own description of it hides what happened, see ``describe(_:)``).
    struct Described: Error, CustomStringConvertible {
        let error: PSQLError
        init(_ error: PSQLError) { self.error = error }
        var description: String { PostgresStore.describe(error) }
    }

    /// The fields of the server's error that `error` carries, from postgres-nio's `PSQLError` or
    /// from the `PostgresError` of its older API (the history pages' `PreparedQuery`, whose
    /// futures turn the one into the other); `nil` for a failure that is not the server's.
    static func serverFields(_ error: any Error) -> (message: String?, sqlState: String?, hint: String?)? {
        if let info = (error as? PSQLError)?.serverInfo { return (info[.message], info[.sqlState], info[.hint]) }
        guard case .server(let response)? = error as? PostgresError else { return nil }
        return (response.fields[.message], response.fields[.sqlState], response.fields[.hint])
    }

    /// Whether `error` is postgres-nio's older API (the history pages' `PreparedQuery`) saying
    /// that the connection closed.
    static func isLegacyClosedConnection(_ error: any Error) -> Bool {
        if case .connectionClosed? = error as? PostgresError { return true }
        return false
    }

    /// A failure in words: postgres-nio's own description hides what happened (the server's
    /// message, the error's code and the underlying error say it).
    static func describe(_ error: any Error) -> String {
        if let message = serverFields(error)?.message { return "the server said: \(message)" }
        switch error as? PostgresError {
        case .connectionClosed?: return "the connection closed (the server stopped, or ended the session)"
        case .protocol(let message)?: return "postgres-nio closed the connection (\(message))"
        case .server, nil: break
        }
        guard let psql = error as? PSQLError else { return "\(error)" }
        switch psql.code {
        case .clientClosedConnection:
            return "the connection was closed here: the server had stopped answering, or had ended the session"
        case .serverClosedConnection: return "the server closed the connection (it stopped or restarted)"
        case .sslUnsupported: return "the server takes no TLS connections"
        case _ where protocolFailures.contains(psql.code):
            // The message postgres-nio did not expect, for whoever reads the log.
            return
                "postgres-nio closed the connection on a message from the server it did not expect there (\(String(String(reflecting: psql).prefix(400))))"
        default:
            if let reason = psql.underlying.flatMap(socketFailure) { return reason }
            return psql.underlying.map { "\(psql.code): \($0)" } ?? "\(psql.code)"
        }
    }

    /// The system's words for a connection that failed (`Connection refused`, `No route to
    /// host`), from the errors NIO nests them in; `nil` for any other error.
    private static func socketFailure(_ error: any Error) -> String? {
        switch error {
        case let error as IOError where error.errnoCode == ENOENT:
            // Only a Unix socket's path can be missing: the server is down, or restarting.
            return
                "no socket there: the server is not running (or is restarting), or uses another socket directory or port"
        case let error as IOError:
            return String(cString: strerror(error.errnoCode)) + " (errno \(error.errnoCode))"
        case let error as SocketAddressError.UnknownHost:
            return "the host name \(error.host) does not resolve: \(error.errorDescription)"
        case let error as NIOConnectionError:
            if let lookup = [error.dnsAError, error.dnsAAAAError].lazy.compactMap({ $0.flatMap(socketFailure) }).first {
                return lookup
            }
            return error.connectionErrors.lazy.compactMap { socketFailure($0.error) }.first
        default:
            return nil
        }
    }

    // MARK: Registration

    public func didRegister(_ objectIDs: [ObjectID]) { registrations.register(objectIDs) }

    public func didUnregister(_ objectIDs: [ObjectID]) { registrations.unregister(objectIDs) }

    /// How many registrations this process's contexts hold for an object.
    public func registrationCount(for objectID: ObjectID) -> Int { registrations.count(for: objectID) }

    /// The IDs some context of this process has registered.
    public var registeredObjectIDs: Set<ObjectID> { registrations.objectIDs }

    func requireLoaded() throws -> Loaded {
        guard let current = loaded.withLock({ $0 }) else {
            throw GraphError(
                .invalidStore, "The PostgreSQL store at \(configuration.address) was used before loadMetadata(for:).",
                advice: "Open it through a StoreCoordinator.")
        }
        return current
    }
}

/// One of the store's connections: the connection, whose lock serializes its statements, and
/// the same connection reachable while a statement holds that lock, so that a heartbeat that
/// went unanswered can close it (see ``PostgresStore/markUnreachable(_:hung:)``).
final class ConnectionSlot: Sendable {
    let id: Int
    let connection = Mutex<PostgresConnection?>(nil)
    let live = Mutex<PostgresConnection?>(nil)
    /// The open connection's session on the server (the writing connection's only).
    let session = Mutex<ServerSession?>(nil)

    init(id: Int) { self.id = id }
}
