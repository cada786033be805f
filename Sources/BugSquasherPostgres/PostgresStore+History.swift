public import BugSquasherGraph
public import Foundation
import PostgresNIO
import Synchronization

// History retention: the oldest saves deleted in steps, by whichever daemon prunes first.
extension PostgresStore: HistoryPruning {
    public func pruneHistory(before date: Date?, keepingNewest count: Int?) throws -> Int {
        _ = try requireLoaded()
        guard date != nil || count != nil else { return 0 }
        return try withConnection("prune the history") { connection in
            // The newest token to delete: the history stays a run of consecutive tokens.
            let newest =
                try run("SELECT token FROM bs_counter WHERE id = 1", [], on: connection).first?.decode(
                    Int64.self) ?? 0
            let through = try run(
                "SELECT max(token) FROM bs_history WHERE token < $1 AND (committed_at < $2 OR token <= $3)",
                [
                    .int64(newest), .double(date?.timeIntervalSince1970 ?? -Double.greatestFiniteMagnitude),
                    .int64(count.map { newest - Int64($0) } ?? -1),
                ], on: connection
            ).first?.decode(Int64?.self)
            guard let through else { return 0 }
            var deleted = 0
            while true {
                let step = try changeCount(
                    "DELETE FROM bs_history WHERE token IN (SELECT token FROM bs_history WHERE token <= $1 ORDER BY token LIMIT 5000)",
                    [.int64(through)], on: connection)
                deleted += step
                if step < 5_000 { return deleted }
            }
        }
    }

    public func historyHorizon() throws -> HistoryToken {
        try withConnection("read the history", onceMoreIfEnded: true) { connection in
            let oldest = try run("SELECT min(token) FROM bs_history", [], on: connection).first?.decode(Int64?.self)
            if let oldest { return HistoryToken(rawValue: oldest - 1) }
            // No save left, or none made yet: the counter's token is the newest gone.
            return HistoryToken(
                rawValue: try run("SELECT token FROM bs_counter WHERE id = 1", [], on: connection).first?.decode(
                    Int64.self) ?? 0)
        }
    }

    public func observeHistoryGaps(_ handler: @escaping @Sendable (HistoryToken) -> Void) {
        gapHandlers.withLock { $0.append(handler) }
    }

    /// Tells the gap observers that the saves after `last` up to `missed` were pruned before
    /// this process read them.
    func reportGap(after last: Int64, through missed: Int64) {
        logger.warning(
            "saves of other daemons were pruned from the history before this daemon read them; its subscribers refetch what they hold",
            metadata: ["history.last_read": "\(last)", "history.pruned_through": "\(missed)"])
        for handler in gapHandlers.withLock({ $0 }) { handler(HistoryToken(rawValue: missed)) }
    }
}
