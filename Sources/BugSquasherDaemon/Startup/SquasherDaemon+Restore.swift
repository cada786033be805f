import BugSquasherGraph
import BugSquasherSQLite
import Foundation
import Logging

extension SquasherDaemon {
    /// Puts the backup at `backup` (`squasherctl backup FILE`) in place of the store, with the
    /// daemon stopped (`squasherd --restore FILE`); returns what was done, for the operator.
    ///
    /// The backup is checked first (`integrity_check`, a BugSquasher store). The store it
    /// replaces is kept beside it (`bugs.sqlite.replaced-TIME`). Tokens go on after the newest
    /// this directory ever issued, so that no token means two saves: every subscriber that
    /// resumes is told to refetch what it holds (docs/OPERATIONS.md, "Backup and restore").
    ///
    /// - Throws: ``DaemonError`` when squasherd runs on this directory, the store is not an
    ///   SQLite file, or the backup cannot be used, saying why.
    public func restore(from backup: String) async throws -> String {
        guard configuration.postgres == nil else {
            throw DaemonError(
                "squasherd --restore restores the SQLite store; this configuration names a PostgreSQL store (\(configuration.storeDescription)).",
                advice: "Restore the database with its own tools (pg_restore).")
        }
        try prepareDirectories()
        // Refused while a daemon runs on this directory: it would write over the restored file.
        let lock = try await StateDirectoryLock(directory: configuration.stateDirectory, patience: .zero)
        defer { withExtendedLifetime(lock) {} }
        let snapshot: StoreSnapshot
        do {
            snapshot = try SQLiteStore.checkedSnapshot(at: backup)
        } catch let error as GraphError {
            throw DaemonError("Cannot restore \(backup): \(error.statement)", advice: error.advice)
        }
        let store = configuration.storePath
        let watermark = try SaveWatermark(directory: configuration.stateDirectory)
        let issued = max(watermark.recorded()?.token ?? 0, SQLiteStore.issuedToken(at: store))
        let staged = store + ".restoring"
        try? FileManager.default.removeItem(atPath: staged)
        try FileManager.default.copyItem(atPath: backup, toPath: staged)
        let token = try SQLiteStore.prepareRestored(at: staged, issued: issued)
        let stamp = ISO8601Date.format(Date(), fractionalSeconds: false).replacingOccurrences(of: ":", with: "")
        var kept: String?
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: store + suffix) {
            let aside = "\(store).replaced-\(stamp)\(suffix)"
            try FileManager.default.moveItem(atPath: store + suffix, toPath: aside)
            if suffix.isEmpty { kept = aside }
        }
        try FileManager.default.moveItem(atPath: staged, toPath: store)
        watermark.record(storeIdentifier: snapshot.storeIdentifier, token: token)
        logger.notice(
            "store restored",
            metadata: [
                "backup": "\(backup)", "backup.token": "\(snapshot.token.rawValue)", "store.token": "\(token.rawValue)",
            ])
        return
            "Restored \(backup) (store \(snapshot.storeIdentifier), saves up to token \(snapshot.token.rawValue)) to \(store); its tokens go on from \(token.rawValue), after every token issued here, and subscribers that resume are told to refetch what they hold."
            + (kept.map { " The store it replaced is kept as \($0)." } ?? "")
    }
}
