public import Foundation

/// Reads a file (or any file handle, standard input included) line by line in bounded memory: one
/// 64 KiB chunk plus the longest line. A `\r` before `\n` is dropped; empty lines are skipped but
/// counted, so ``Element/lineNumber`` matches an editor's. It is its own iterator: iterate it once.
///
/// ```swift
/// let reader = try LineReader(path: "/data/titanium-jira-sample.ndjson")
/// for (lineNumber, bytes) in reader { _ = try JiraIssueDecoder().decode(bytes, line: lineNumber) }
/// if let error = reader.error { throw error }   // a read failed midway
/// ```
public final class LineReader: Sequence, IteratorProtocol {
    /// One non-empty line: its 1-based number in the input and its bytes, without terminator.
    public typealias Element = (lineNumber: Int, bytes: Data)

    /// How many bytes each read asks for.
    public static let chunkSize = 64 * 1024

    private static let newline = UInt8(ascii: "\n")
    private static let carriageReturn = UInt8(ascii: "\r")

    private let handle: FileHandle
    private let closesHandle: Bool
    /// Read bytes; `buffer[start...]` is not consumed yet.
    private var buffer: [UInt8] = []
    private var start = 0
    /// Where to resume looking for a newline (everything before it in `buffer[start...]` has none).
    private var scanned = 0
    private var lineNumber = 0
    private var reachedEnd = false

    /// The error that ended the iteration early, if a read failed; `nil` after a complete read.
    public private(set) var error: ImportError?

    /// Opens a file for reading.
    ///
    /// - Throws: ``ImportError`` with ``ImportError/Code/io`` when the file cannot be opened.
    public convenience init(path: String) throws {
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        } catch {
            throw ImportError(
                .io, "Cannot open '\(path)' for reading.", advice: "Check that the file exists and is readable.",
                cause: error)
        }
        self.init(fileHandle: handle, closesHandle: true)
    }

    /// Reads from an open handle, such as `FileHandle.standardInput`.
    ///
    /// - Parameter closesHandle: whether to close the handle when the reader is released.
    public init(fileHandle: FileHandle, closesHandle: Bool = false) {
        self.handle = fileHandle
        self.closesHandle = closesHandle
    }

    deinit {
        if closesHandle { try? handle.close() }
    }

    /// The next non-empty line, or `nil` at the end of the input (or after a failed read, see
    /// ``error``).
    public func next() -> Element? {
        while true {
            if let newline = firstNewline() {
                lineNumber += 1
                let line = start..<newline
                start = newline + 1
                scanned = start
                if let bytes = lineBytes(line) { return (lineNumber, bytes) }
                continue
            }
            scanned = buffer.count
            if reachedEnd {
                guard start < buffer.count else { return nil }
                lineNumber += 1
                let line = start..<buffer.count
                start = buffer.count
                scanned = start
                return lineBytes(line).map { (lineNumber, $0) }
            }
            readChunk()
        }
    }

    /// The bytes of a line without its `\r`, or `nil` for an empty line.
    private func lineBytes(_ range: Range<Int>) -> Data? {
        var end = range.upperBound
        if end > range.lowerBound, buffer[end - 1] == Self.carriageReturn { end -= 1 }
        guard end > range.lowerBound else { return nil }
        return buffer.withUnsafeBufferPointer {
            Data(buffer: UnsafeBufferPointer(rebasing: $0[range.lowerBound..<end]))
        }
    }

    private func firstNewline() -> Int? {
        buffer.withUnsafeBufferPointer { bytes in
            var index = scanned
            while index < bytes.count {
                if bytes[index] == Self.newline { return index }
                index += 1
            }
            return nil
        }
    }

    /// Drops the consumed bytes and appends the next chunk; sets `reachedEnd` at the end of the
    /// input or on a read error.
    private func readChunk() {
        if start > 0 {
            buffer.removeSubrange(0..<start)
            scanned -= start
            start = 0
        }
        do {
            guard let chunk = try handle.read(upToCount: Self.chunkSize), !chunk.isEmpty else {
                reachedEnd = true
                return
            }
            buffer.append(contentsOf: chunk)
        } catch {
            self.error = ImportError(
                .io,
                "Reading the input failed after line \(lineNumber).",
                advice: "Check the file or the pipe feeding it, then import again.",
                cause: error, inputLine: lineNumber)
            buffer.removeAll()  // a partial last line must not pass for a complete one
            scanned = 0
            reachedEnd = true
        }
    }
}
