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
        var written: Int64 = 0
        // The copy's bytes follow the reply as they are, on the upgraded connection.
        let head = try withClient(endpoint) { client in
            try client.upgrade("io.bugsquasher.Import.Backup", Empty()) { connection in
                let head = try connection.reply.parameters(BackupReply.self)
                var piece = [UInt8](repeating: 0, count: 1 << 20)
                while written < head.bytes {
                    let count = try piece.withUnsafeMutableBytes { try connection.receiveBytes(into: $0) }
                    guard count > 0 else { break }
                    try output.write(contentsOf: piece[..<count])
                    written += Int64(count)
                }
                return head
            }
        }
        try output.close()
        guard written == head.bytes else {
            printError(
                "squasherctl: the backup arrived short (\(written) of \(head.bytes) bytes); nothing was written to \(file)."
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
