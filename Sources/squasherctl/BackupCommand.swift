import ArgumentParser
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation

/// `squasherctl backup FILE`: a consistent copy of the store, taken by squasherd while it serves,
/// written where the user runs this.
struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup", abstract: "Copy the store to FILE while squasherd runs (needs the write socket).",
        discussion:
            "squasherd takes a consistent snapshot beside its writer (imports, edits and subscribers go on), checks it with SQLite's integrity_check and streams it here; FILE is written whole or not at all, and the history token it holds is printed. Restore it with squasherd --restore FILE while squasherd is stopped (docs/OPERATIONS.md, Backup and restore). PostgreSQL stores are backed up with the database's own tools."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "Where to write the backup.")
    var file: String

    @Flag(help: "Replace FILE when it exists.")
    var force = false

    func validate() throws {
        if !force, FileManager.default.fileExists(atPath: file) {
            throw ValidationError("\(file) exists; pass --force to replace it, or choose another name.")
        }
    }

    func run() throws {
        let partial = file + ".partial"
        _ = FileManager.default.createFile(atPath: partial, contents: nil)
        guard let output = FileHandle(forWritingAtPath: partial) else {
            printError("squasherctl: cannot write \(partial): check the directory's permissions.")
            throw Exit.outputFailed
        }
        defer { try? FileManager.default.removeItem(atPath: partial) }
        // The snapshot of a large store takes a while before the first reply: no time limit.
        let endpoint = Endpoint(path: sockets.write.path, timeout: nil)
        var head: BackupReply?
        var written: Int64 = 0
        try withClient(endpoint) { client in
            try client.stream("io.bugsquasher.Import.Backup", Empty()) { reply in
                let part = try reply.parameters(BackupReply.self)
                if head == nil { head = part }
                if let data = part.data {
                    guard let bytes = Data(base64Encoded: data) else {
                        throw ValidationError("squasherd sent a part of the backup that is not base64.")
                    }
                    try output.write(contentsOf: bytes)
                    written += Int64(bytes.count)
                }
                return true
            }
        }
        try output.close()
        guard let head, written == head.bytes else {
            printError(
                "squasherctl: the backup arrived short (\(written) of \(head?.bytes ?? 0) bytes); nothing was written to \(file)."
            )
            throw Exit.failed
        }
        if force { try? FileManager.default.removeItem(atPath: file) }
        try FileManager.default.moveItem(atPath: partial, toPath: file)
        print(
            "backed up store \(head.storeIdentifier) at history token \(head.token): \(head.bytes) bytes, integrity ok, to \(file)"
        )
    }
}
