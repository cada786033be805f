import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// A save whose statement went out but whose answer never came (the server restarted as it
// answered, or the connection was closed under it when the server went silent) may have
// committed. Telling its caller "nothing was saved" then would be false, and a retry would save
// it twice; so the store finds out, once the server answers: it ends the lost session (its
// statement cannot commit after the look), then looks for the save's own history row (its
// payload and commit time, which only this save has). Found, the save counts as committed, with
// its token; not found, it is saved once more on a new connection, and refused only if that
// fails too. Why: docs/DESIGN-NOTES.md, "A save whose answer was lost".
extension PostgresStore {
    /// Runs `save`, an interactive save on the writing connection. When its answer is lost, the
    /// store finds out whether it committed (``settle(_:)``): `found` makes the result of its
    /// did-save. One found not to have committed (its session ended before the statement ran,
    /// by an administrator's `pg_terminate_backend` or a server stopping, or the statement never
    /// reached the server) runs once more on a new connection: nothing of it was written, and the
    /// lost session, ended, cannot commit it any more, so it is saved once. A second loss is
    /// settled and, not committed, refused.
    func savingOnceMore<T>(_ save: () throws -> T, found: (DidSave) -> T) throws -> T {
        do {
            return try save()
        } catch let lost as AnswerLost {
            if case .committed(let didSave) = try settled(lost) { return found(didSave) }
            logger.notice(
                "the answer to a save was lost before it committed; saving it again",
                metadata: ["reason": "\(lost.reason)"])
            do {
                return try save()
            } catch let again as AnswerLost {
                return found(try settle(again))
            }
        }
    }

    /// Finds out whether the save `lost` tells of committed: its did-save, with its token, when
    /// it did; the failure it met when it did not. A server that refuses connections (one
    /// restarting) is asked again every half second for ``settleFor``; one found silent (a
    /// heartbeat unanswered) is not waited for. Throws a ``GraphError/Code/storeIO`` that says
    /// the outcome is unknown when the server cannot be asked.
    func settle(_ lost: AnswerLost) throws -> DidSave {
        switch try settled(lost) {
        case .committed(let didSave): return didSave
        case .notCommitted(let failure): throw failure
        }
    }

    /// What ``settle(_:)`` finds, without throwing the failure of a save that did not commit.
    private func settled(_ lost: AnswerLost) throws -> SettledSave {
        // Without the session, nothing keeps its statement from committing after a look.
        guard let session = lost.session else {
            throw outcomeUnknown(
                lost,
                GraphError(
                    .storeIO,
                    "The lost connection's session on the server is not known, so its statement could commit after a look."
                ))
        }
        let deadline = ContinuousClock.now + Self.settleFor
        while true {
            let found: DidSave?
            do {
                found = try lookFor(lost, session: session)
            } catch let failure as GraphError {
                let silent = health.withLock { $0.silentProbedAt != nil }
                guard silent || ContinuousClock.now >= deadline else {
                    Thread.sleep(forTimeInterval: 0.5)
                    continue
                }
                throw outcomeUnknown(lost, failure)
            }
            guard let found else { return .notCommitted(lost.failure) }
            logger.notice(
                "the answer to a save was lost; the save had committed",
                metadata: ["token": "\(found.token.rawValue)", "reason": "\(lost.reason)"])
            return .committed(found)
        }
    }

    /// The refusal of the save `lost` tells of, whose outcome `failure` kept from being found.
    private func outcomeUnknown(_ lost: AnswerLost, _ failure: GraphError) -> GraphError {
        GraphError(
            .storeIO,
            "The save was sent to PostgreSQL at \(configuration.address), but its answer was lost (\(lost.reason)), and whether the save committed cannot be found out now. \(failure.statement)",
            advice:
                "It may have been saved: look at the object before saving it again (a save that committed reaches subscribers once, from the history; an insert saved again makes a second object).",
            cause: failure.isServerUnreachable ? Unreachable(server: nil) : nil)
    }

    /// How long ``settle(_:)`` asks a server that refuses connections again.
    static let settleFor = Duration.seconds(10)

    /// The save `lost` tells of, with its token, when its history row is there; `nil` when it is
    /// not, and cannot be any more once `session`, the lost one, is ended. Throws a
    /// ``GraphError`` when the server cannot be asked, or the session cannot be ended (its
    /// statement could commit after the look).
    private func lookFor(_ lost: AnswerLost, session: ServerSession) throws -> DidSave? {
        try withConnection("look for the save") { connection in
            let identity: [Value] = [.int64(Int64(session.processID)), .double(session.started)]
            let alive =
                "FROM pg_stat_activity WHERE pid = $1 AND extract(epoch FROM backend_start)::float8 = $2 AND pid <> pg_backend_pid()"
            // The lost session's statement cannot commit once the session is gone. `false`
            // is also the answer for a session that ended between the scan and the signal.
            let ended = try run("SELECT pg_terminate_backend(pid, 5000) \(alive)", identity, on: connection).first?
                .decode(Bool.self)
            if ended == false, try !run("SELECT 1 \(alive)", identity, on: connection).isEmpty {
                throw GraphError(
                    .storeIO,
                    "The lost session, process \(session.processID) on the server, did not end within 5 s when told to: its statement may still commit."
                )
            }
            let token = try run(
                """
                SELECT token FROM bs_history WHERE token > $1 AND committed_at = $2 AND payload = $3
                ORDER BY token DESC LIMIT 1
                """, [.int64(lost.sent.after), .double(lost.sent.committedAt), .data(lost.sent.payload)],
                on: connection
            ).first?.decode(Int64.self)
            guard let token else { return nil }
            var didSave = lost.sent.didSave
            didSave.token = HistoryToken(rawValue: token)
            // Unless the follower has handed it out from the history meanwhile.
            if (delivered.withLock { $0 } ?? 0) < token { deliverOwn(didSave, on: connection) }
            return didSave
        }
    }

    /// Whether `error` ended the session of the statement that failed with it (the server
    /// ended it or went away, this side closed the connection, or postgres-nio closed it on a
    /// message it did not expect), rather than being an error of the statement's own: such a
    /// statement may have committed, and its connection is no good.
    static func endsSession(_ error: any Error) -> Bool {
        if error is ConnectionClosedUnderStatement { return true }
        if let state = serverFields(error)?.sqlState { return endsSession(sqlState: state) }
        switch error {
        case let psql as PSQLError:
            return connectionFailures.contains(psql.code) || protocolFailures.contains(psql.code)
        // postgres-nio's older API (the history pages' `PreparedQuery`): a closed connection, or
        // one it closed on a message it did not expect.
        case let legacy as PostgresError:
            if case .server = legacy { return false }
            return true
        default: return false
        }
    }

    /// Whether a server error of `state` ended the session: class 57 (operator intervention: a
    /// shutdown, a terminated session) and 08 (connection exception) do, perhaps after the
    /// commit; but a cancelled statement (57014) rolled back, and its session goes on.
    private static func endsSession(sqlState state: String) -> Bool {
        (state.hasPrefix("57") && state != "57014") || state.hasPrefix("08")
    }

    /// The session `connection` is on the server, for ``settle(_:)`` to end it.
    func serverSession(of connection: PostgresConnection) -> ServerSession? {
        try? run(
            "SELECT pid, extract(epoch FROM backend_start)::float8 FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            [], on: connection
        ).first.map { row in
            let cells = row.makeRandomAccess()
            return ServerSession(processID: try cells[0].decode(Int32.self), started: try cells[1].decode(Double.self))
        }
    }
}

/// What ``PostgresStore/settle(_:)`` found of a save whose answer was lost.
enum SettledSave {
    /// The save committed: its did-save, with its token.
    case committed(DidSave)
    /// The save did not commit, and cannot any more: the failure it met.
    case notCommitted(GraphError)
}

/// The history row an interactive save sent: what finds it again when the answer to it was
/// lost (its payload holds the save's objects, versions and, for a small save, values; with the
/// commit time this process gave it, no other save's row is the same).
struct SentHistoryRow: Sendable {
    let committedAt: Double
    let payload: Data
    /// The newest token this process knew of when the row went out: the row's is after it,
    /// however far the follower has read since.
    let after: Int64
    /// The save, without its token.
    let didSave: DidSave
}

/// A session on the server: its backend's process ID and start time, which tell it from a
/// later session that has the same process ID.
struct ServerSession: Sendable {
    let processID: Int32
    let started: Double
}

/// An interactive save whose statement went out on a connection lost before its answer came
/// (``PostgresStore/settle(_:)`` finds out whether it committed).
struct AnswerLost: Error {
    let sent: SentHistoryRow
    /// The lost connection's session, when it was read at connect.
    let session: ServerSession?
    /// What the save failed with, told when it did not commit.
    let failure: GraphError
    /// How the answer was lost, in words.
    let reason: String
}
