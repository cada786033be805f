import BugSquasherGraph
import Foundation

/// `squasherd.last-save` in the state directory: the store identifier and the history token of
/// the last save squasherd committed there, rewritten in place, without `fsync`, after every
/// commit. At start-up, ``check(storeIdentifier:token:storePath:)`` refuses a store that went back
/// or that is another one, saying why and how to go on.
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "A store that went back is refused".
final class SaveWatermark: Sendable {
    /// The file's name in the state directory.
    static let fileName = "squasherd.last-save"

    /// The file's path.
    let path: String
    private let descriptor: Int32

    /// Opens (creating) the record in `directory`.
    ///
    /// - Throws: ``DaemonError`` when the file cannot be opened.
    init(directory: String) throws {
        path = directory + "/" + Self.fileName
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw DaemonError(
                "Cannot open \(path): \(String(cString: strerror(errno))).",
                advice: "Check the state directory's permissions.")
        }
    }

    deinit {
        close(descriptor)
    }

    /// What the file records: `nil` for a new (empty) file, or one that holds no record (see
    /// ``unreadableContent()``).
    func recorded() -> (storeIdentifier: String, token: Int64)? {
        Self.record(in: content())
    }

    /// The start of the file, when it is neither empty nor a record (damaged, or written by
    /// something else): the check against a store that went back cannot be made then.
    func unreadableContent() -> String? {
        let text = content()
        guard !text.isEmpty, Self.record(in: text) == nil else { return nil }
        return String(text.prefix(40))
    }

    /// The record `text` holds: the store identifier and the token, separated by whitespace.
    private static func record(in text: String) -> (storeIdentifier: String, token: Int64)? {
        let fields = text.split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, let token = Int64(fields[1]), token >= 0 else { return nil }
        return (String(fields[0]), token)
    }

    /// The file's first bytes, as text.
    private func content() -> String {
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
    }

    /// Refuses a store that is not the one squasherd last saved to here, or that lost saves since.
    ///
    /// - Parameters:
    ///   - storeIdentifier: the opened store's identifier.
    ///   - token: the opened store's newest history token.
    ///   - storePath: the store file, for the messages.
    /// - Throws: ``DaemonError`` saying what happened and how to go on.
    func check(storeIdentifier: String, token: Int64, storePath: String) throws {
        guard let (recordedStore, recordedToken) = recorded() else { return }
        let goOn =
            "or, to go on with the store as it is, remove \(path) and start again (subscribers that resume with --since must then subscribe afresh)"
        if recordedStore != storeIdentifier {
            throw DaemonError(
                "Refusing to start: \(storePath) is store \(storeIdentifier), but squasherd last saved to store \(recordedStore) here (up to token \(recordedToken)). The store file was replaced, or its write-ahead log \(storePath)-wal came from another store.",
                advice: "Put the right files back; \(goOn)."
            )
        }
        if token < recordedToken {
            throw DaemonError(
                "Refusing to start: \(storePath) holds saves up to token \(token), but squasherd committed up to token \(recordedToken) here, and opening it would issue the tokens after \(token) again, for other saves. Its write-ahead log \(storePath)-wal was removed or replaced while squasherd was stopped, an older copy of the store was put in its place, or the machine lost power before the last saves reached the disk.",
                advice: "Put the files back (the store with its -wal); \(goOn)."
            )
        }
    }

    /// Records a committed save. Called on the store's writer, after each commit, in token order.
    func record(storeIdentifier: String, token: HistoryToken) {
        // A fixed width (tokens only grow), so that each write replaces the whole record.
        let line = "\(storeIdentifier) \(token.rawValue)"
        let text = line + String(repeating: " ", count: max(0, 79 - line.utf8.count)) + "\n"
        _ = Array(text.utf8).withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
    }
}
