public import BugSquasherGraph
public import Foundation
import GRDB

// History retention: the oldest saves deleted in steps, so that no step holds the writer long.
extension SQLiteStore: HistoryPruning {
    /// Rows deleted per transaction while pruning.
    static let pruneStep = 5_000

    public func pruneHistory(before date: Date?, keepingNewest count: Int?) throws -> Int {
        _ = try requireLoaded()
        guard date != nil || count != nil else { return 0 }
        // The newest token to delete: the history stays a run of consecutive tokens.
        let through = try wrap("prune the history") {
            try pool.read { db in
                try Int64.fetchOne(
                    db,
                    sql: """
                        SELECT max(token) FROM bs_history
                        WHERE token < (SELECT max(token) FROM bs_history) AND (committed_at < ? OR token <= ?)
                        """,
                    arguments: [date?.timeIntervalSince1970 ?? -Double.infinity, Self.lastDropped(keeping: count, db)])
            }
        }
        guard let through else { return 0 }
        var deleted = 0
        while true {
            let step = try wrap("prune the history") {
                try writeTransaction { db in
                    try db.execute(
                        sql:
                            "DELETE FROM bs_history WHERE token IN (SELECT token FROM bs_history WHERE token <= ? ORDER BY token LIMIT ?)",
                        arguments: [through, Self.pruneStep])
                    return db.changesCount
                }
            }
            deleted += step
            if step < Self.pruneStep { return deleted }
        }
    }

    /// The newest token beyond the newest `count` (`-1` without a count).
    private static func lastDropped(keeping count: Int?, _ db: Database) throws -> Int64 {
        guard let count else { return -1 }
        return (try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0) - Int64(count)
    }

    public func historyHorizon() throws -> HistoryToken {
        try wrap("read history") {
            try pool.read { db in
                HistoryToken(rawValue: (try Int64.fetchOne(db, sql: "SELECT min(token) FROM bs_history") ?? 1) - 1)
            }
        }
    }
}
