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
// its token; not found, it is refused as it failed. Why: docs/DESIGN-NOTES.md, "A save whose
// answer was lost".
extension PostgresStore {
    /// Finds out whether the save `lost` tells of committed: its did-save, with its token, when
    /// it did; the failure it met when it did not. Throws a ``GraphError/Code/storeIO`` that
    /// says the outcome is unknown when the server cannot be asked.
    func settle(_ lost: AnswerLost) throws -> DidSave {
        let found: DidSave?
        do {
            found = try withConnection("look for the save") { connection in
                if let session = lost.session {
                    // The lost session's statement cannot commit once the session is gone.
                    let ended = try run(
                        """
                        SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
                        WHERE pid = $1 AND extract(epoch FROM backend_start)::float8 = $2
                        """, [.int64(Int64(session.processID)), .double(session.started)], on: connection
                    ).first?.decode(Bool.self)
                    guard ended != false else {
                        throw GraphError(
                            .storeIO,
                            "The lost session, process \(session.processID) on the server, did not end within 5 s when told to: its statement may still commit."
                        )
                    }
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
        } catch {
            throw GraphError(
                .storeIO,
                "The save was sent to PostgreSQL at \(configuration.address), but its answer was lost (\(lost.reason)), and whether the save committed cannot be found out now. \((error as? GraphError)?.statement ?? Self.describe(error))",
                advice:
                    "It may have been saved: look at the object before saving it again (a save that committed reaches subscribers once, from the history). Saving the same values again saves nothing.",
                cause: Unreachable(server: nil))
        }
        guard let found else { throw lost.failure }
        logger.notice(
            "the answer to a save was lost; the save had committed",
            metadata: ["token": "\(found.token.rawValue)", "reason": "\(lost.reason)"])
        return found
    }

    /// Whether the statement that failed with `error` may have committed: unless the server
    /// answered it with an error of the statement's own (not a session ended under it).
    static func mayHaveCommitted(_ error: any Error) -> Bool {
        guard let psql = error as? PSQLError, let state = psql.serverInfo?[.sqlState] else {
            return error is PSQLError || error is ConnectionClosedUnderStatement
        }
        // Class 57 (operator intervention: a shutdown, a terminated session) and 08 (connection
        // exception) end the session, perhaps after the commit.
        return state.hasPrefix("57") || state.hasPrefix("08")
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
