public import BugSquasherGraph
import Foundation
import GRDB

// Online backup and restore of the store file: a snapshot taken beside the running writer, and
// a restore that never hands out a token twice.
extension SQLiteStore: Snapshotting {
    /// Writes a consistent snapshot of the store to a new file at `path`, then checks it with
    /// `integrity_check` and reads its token. SQLite's online backup copies the pages of one
    /// read transaction on a connection of its own, in one step: it never takes the writer, so
    /// imports and edits go on, and a copy of pages costs about half the CPU of `VACUUM INTO`,
    /// which rebuilds every table and index.
    public func writeSnapshot(to path: String) throws -> StoreSnapshot {
        try wrap("back up the store to \(path)") {
            var configuration = Configuration()
            configuration.readonly = true
            let source = try DatabaseQueue(path: url.path, configuration: configuration)
            let copy = try DatabaseQueue(path: path)
            try source.backup(to: copy)
            try copy.close()
            try source.close()
            return try Self.checkedSnapshot(at: path)
        }
    }

    /// The identity and token of a store file, once `integrity_check` found it sound.
    public static func checkedSnapshot(at path: String) throws -> StoreSnapshot {
        var configuration = Configuration()
        configuration.readonly = true
        let copy = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? copy.close() }
        return try copy.read { db in
            let problems = try String.fetchAll(db, sql: "PRAGMA integrity_check")
            guard problems == ["ok"] else {
                throw GraphError(
                    .invalidStore,
                    "\(path) fails SQLite's integrity check: \(problems.prefix(3).joined(separator: "; ")).",
                    advice: "Take the backup again.")
            }
            guard try db.tableExists("bs_metadata"), try db.tableExists("bs_history"),
                let identifier = try String.fetchOne(
                    db, sql: "SELECT value FROM bs_metadata WHERE key = 'storeIdentifier'")
            else {
                throw GraphError(
                    .invalidStore, "\(path) is an SQLite file but not a BugSquasher store.",
                    advice: "Give a file written by `squasherctl backup`.")
            }
            let token = try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0
            let bytes = ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
            return StoreSnapshot(storeIdentifier: identifier, token: HistoryToken(rawValue: token), bytes: bytes)
        }
    }

    /// The newest token a store file has issued (its history's, or its sequence's when the
    /// newest rows are gone), read without opening it as a store; 0 for a file that is not one.
    public static func issuedToken(at path: String) -> Int64 {
        var configuration = Configuration()
        configuration.readonly = true
        guard let store = try? DatabaseQueue(path: path, configuration: configuration) else { return 0 }
        defer { try? store.close() }
        return
            (try? store.read { db in
                max(
                    try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0,
                    try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'bs_history'") ?? 0)
            }) ?? 0
    }

    /// Makes the snapshot at `path` (a copy, not the original backup) a store to open, whose
    /// tokens go on after `issued`, the newest token ever issued where it is restored: the
    /// history keeps one empty save with token `issued + 2`, so that every reader resuming from
    /// any token issued before is told to refetch (the saves between are gone or were another
    /// history).
    /// Returns the store's token.
    public static func prepareRestored(at path: String, issued: Int64) throws -> HistoryToken {
        let store = try DatabaseQueue(path: path)
        defer { try? store.close() }
        return try store.write { db in
            let newest = try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0
            // One past the next: the horizon (the newest token gone) is then above every token a
            // reader can hold, the last one issued here included, so every reader refetches.
            let next = max(newest, issued) + 2
            try db.execute(
                sql: "INSERT INTO bs_history (token, committed_at, payload) VALUES (?, ?, ?)",
                arguments: [
                    next, Date().timeIntervalSince1970,
                    HistoryCoding.encode(DidSave(token: .zero, storeIdentifier: "")),
                ])
            try db.execute(sql: "DELETE FROM bs_history WHERE token < ?", arguments: [next])
            return HistoryToken(rawValue: next)
        }
    }
}
