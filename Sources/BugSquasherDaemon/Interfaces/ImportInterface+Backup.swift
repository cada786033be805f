import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherVarlink
import Foundation
import Logging
import NIOCore

// `Backup`: a snapshot of the store beside the running writer, streamed to the caller.
extension ImportInterface {
    /// Bytes of the file per reply (4 MiB of base64, under the default max_message_bytes).
    static let backupPiece = 3 << 20

    /// The bytes of a download read from the file at once (1 MiB).
    static let downloadPiece = 1 << 20

    func handleBackup(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        guard call.upgrade || call.more else {
            throw VarlinkError(
                "io.bugsquasher.Import.InvalidInput",
                statement: "Backup sends the file after its reply (upgrade) or over several replies (more).",
                advice:
                    "Call it with \"upgrade\": true for the file's bytes as they are (squasherctl backup FILE does), or with \"more\": true for base64 pieces."
            )
        }
        guard let store = stack.store as? any Snapshotting else {
            throw VarlinkError(
                "io.bugsquasher.Import.InvalidInput",
                statement: "squasherd does not back up a \(stack.store.storeType) store; its server does.",
                advice: "Back up the database with its own tools (pg_dump for PostgreSQL).")
        }
        // In the state directory: the daemon may write there, and it is on the store's file system.
        let path = configuration.stateDirectory + "/backup-\(UUID().uuidString.prefix(8)).sqlite"
        var handedOver = false
        defer { if !handedOver { try? FileManager.default.removeItem(atPath: path) } }
        let started = ContinuousClock.now
        let snapshot = try await Self.atLowestPriority { try store.writeSnapshot(to: path) }
        context.logger.notice(
            "backup taken",
            metadata: [
                "backup.token": "\(snapshot.token.rawValue)", "backup.bytes": "\(snapshot.bytes)",
                "backup.duration": "\(ContinuousClock.now - started)",
            ])
        let reply = BackupReply(
            storeIdentifier: snapshot.storeIdentifier, token: snapshot.token.rawValue, bytes: Int64(snapshot.bytes))
        let file = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        if call.upgrade {
            // The file follows the reply as it is: no base64, no JSON, no reply per piece.
            try await replier.reply(reply)
            context.connection.upgrade(toDownload: FileDownload(file: file, path: path, bytes: snapshot.bytes))
            handedOver = true
            return
        }
        defer { try? file.close() }
        try await replier.reply(reply, continues: true)
        var sent = 0
        repeat {
            let (count, encoded) = try await Self.atLowestPriority {
                let piece = try file.read(upToCount: Self.backupPiece) ?? Data()
                return (piece.count, piece.base64EncodedString())
            }
            sent += count
            var next = reply
            next.data = encoded
            try await replier.reply(next, continues: sent < snapshot.bytes && count > 0)
            if count == 0 { break }
        } while sent < snapshot.bytes
    }

    /// Linux's `SCHED_IDLE` policy (`<sched.h>` declares it only under `_GNU_SOURCE`).
    private static let schedIdle: Int32 = 5

    /// Runs `body`, which blocks, on a thread of its own that gets only the CPU nothing else
    /// wants (`SCHED_IDLE`; `nice` 19 where that is refused): a backup's copy, check and encoding
    /// take what imports, edits and subscribers leave, and give way at once when they wake.
    private static func atLowestPriority<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                // On Linux both apply to the calling thread alone.
                var parameters = sched_param(sched_priority: 0)
                if sched_setscheduler(0, Self.schedIdle, &parameters) != 0 {
                    _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
                }
                continuation.resume(with: Result(catching: body))
            }
        }
    }
}

/// A backup file sent after `Backup`'s reply, 1 MiB at a time, then deleted.
private struct FileDownload: VarlinkDownload {
    let file: FileHandle
    let path: String
    let bytes: Int

    func send(through write: @Sendable (ByteBuffer) async throws -> Void) async throws {
        defer {
            try? file.close()
            try? FileManager.default.removeItem(atPath: path)
        }
        var sent = 0
        while sent < bytes {
            // A read of a file just written, from the page cache: short enough for the pool.
            guard let piece = try file.read(upToCount: ImportInterface.downloadPiece), !piece.isEmpty else {
                throw CocoaError(.fileReadUnknown, userInfo: [NSFilePathErrorKey: path])
            }
            sent += piece.count
            try await write(ByteBuffer(bytes: piece))
        }
    }
}
