import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherVarlink
import Foundation
import Logging

// `Backup`: a snapshot of the store beside the running writer, streamed to the caller.
extension ImportInterface {
    /// Bytes of the file per reply (4 MiB of base64, under the default max_message_bytes).
    static let backupPiece = 3 << 20

    func handleBackup(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        guard call.more else {
            throw VarlinkError(
                "io.bugsquasher.Import.InvalidInput", statement: "Backup streams the file over several replies.",
                advice: "Call it with \"more\": true (squasherctl backup FILE does).")
        }
        guard let store = stack.store as? any Snapshotting else {
            throw VarlinkError(
                "io.bugsquasher.Import.InvalidInput",
                statement: "squasherd does not back up a \(stack.store.storeType) store; its server does.",
                advice: "Back up the database with its own tools (pg_dump for PostgreSQL).")
        }
        // In the state directory: the daemon may write there, and it is on the store's file system.
        let path = configuration.stateDirectory + "/backup-\(UUID().uuidString.prefix(8)).sqlite"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let started = ContinuousClock.now
        let snapshot = try await Self.onOwnThread { try store.writeSnapshot(to: path) }
        context.logger.notice(
            "backup taken",
            metadata: [
                "backup.token": "\(snapshot.token.rawValue)", "backup.bytes": "\(snapshot.bytes)",
                "backup.duration": "\(ContinuousClock.now - started)",
            ])
        let reply = BackupReply(
            storeIdentifier: snapshot.storeIdentifier, token: snapshot.token.rawValue, bytes: Int64(snapshot.bytes))
        try await replier.reply(reply, continues: true)
        let file = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? file.close() }
        var sent = 0
        repeat {
            let piece = try file.read(upToCount: Self.backupPiece) ?? Data()
            sent += piece.count
            var next = reply
            next.data = piece.base64EncodedString()
            try await replier.reply(next, continues: sent < snapshot.bytes && !piece.isEmpty)
            if piece.isEmpty { break }
        } while sent < snapshot.bytes
    }

    /// Runs `body`, which blocks, on a thread of its own rather than the cooperative pool.
    private static func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result(catching: body)) }
        }
    }
}
