import Foundation

/// Reads a file's lines from a byte offset, telling for each line the offset just past it: the
/// point a resumed import starts from. Lines longer than `maximumLineBytes` are reported as
/// oversized and their bytes are not kept, so memory stays bounded whatever the input.
///
/// ```swift
/// let reader = try OffsetLineReader(path: spool, offset: job.byteOffset, firstLine: job.lines + 1)
/// while let line = try reader.next() { … line.endOffset … }
/// ```
public final class OffsetLineReader {
    /// One line.
    public struct Line: Sendable {
        /// The 1-based line number.
        public var number: Int
        /// The line's bytes without its terminator; empty when oversized.
        public var bytes: [UInt8]
        /// Whether the line was longer than the limit.
        public var isOversized: Bool
        /// The offset just past the line's terminator.
        public var endOffset: Int64
    }

    private let handle: FileHandle
    private let maximumLineBytes: Int
    private var buffer: [UInt8] = []
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var start = 0
    private var offset: Int64
    private var number: Int
    private var reachedEnd = false

    /// Opens `path` at `offset`; `firstLine` is the number of the line found there.
    ///
    /// - Throws: ``ImportError`` (`io`) when the file cannot be opened or seeked.
    public init(path: String, offset: Int64 = 0, firstLine: Int = 1, maximumLineBytes: Int = 1 << 20) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw ImportError(.io, "Cannot open \(path) for reading.", advice: "Check that it exists and is readable.")
        }
        do { try handle.seek(toOffset: UInt64(offset)) } catch {
            throw ImportError(.io, "Cannot seek to byte \(offset) of \(path).", cause: error)
        }
        self.handle = handle
        self.offset = offset
        self.number = firstLine - 1
        self.maximumLineBytes = maximumLineBytes
    }

    deinit { try? handle.close() }

    /// The next line, or `nil` at the end of the file.
    public func next() throws -> Line? {
        var oversized = false
        var lineStartOffset = offset
        while true {
            if let newline = Self.firstNewline(in: buffer, from: start) {
                var end = newline
                if end > start, buffer[end - 1] == 0x0D { end -= 1 }
                let length = newline + 1 - start
                let bytes = oversized ? [] : Array(buffer[start..<end])
                offset = lineStartOffset + Int64(length)
                start = newline + 1
                number += 1
                if oversized || bytes.count > maximumLineBytes {
                    return Line(number: number, bytes: [], isOversized: true, endOffset: offset)
                }
                return Line(number: number, bytes: bytes, isOversized: false, endOffset: offset)
            }
            if buffer.count - start > maximumLineBytes {
                // Drop what we have of an oversized line; keep counting its bytes.
                oversized = true
                lineStartOffset += Int64(buffer.count - start)
                buffer.removeAll(keepingCapacity: true)
                start = 0
            }
            if reachedEnd {
                guard start < buffer.count || oversized else { return nil }
                let bytes = oversized ? [] : Array(buffer[start...])
                offset = lineStartOffset + Int64(buffer.count - start)
                buffer.removeAll()
                start = 0
                number += 1
                return Line(number: number, bytes: bytes, isOversized: oversized, endOffset: offset)
            }
            if start > 0 {
                buffer.removeSubrange(0..<start)
                start = 0
            }
            let count = try readMore()
            if count == 0 { reachedEnd = true } else { buffer.append(contentsOf: readBuffer[..<count]) }
        }
    }

    /// Reads the next bytes of the file into ``readBuffer``, the same memory each time (a fresh
    /// `Data` for each read was memory to fault in again); returns how many, 0 at the end.
    private func readMore() throws -> Int {
        while true {
            let count = readBuffer.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
            if count >= 0 { return count }
            guard errno == EINTR else {
                let cause = POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                throw ImportError(.io, "Reading the input failed at byte \(offset).", cause: cause)
            }
        }
    }

    /// The index of the first line feed at or after `start`: `memchr`, which scans a word or a
    /// vector at a time (a generic `firstIndex(of:)` went byte by byte, a few percent of an
    /// import's CPU).
    private static func firstNewline(in buffer: [UInt8], from start: Int) -> Int? {
        buffer.withUnsafeBufferPointer { bytes in
            guard start < bytes.count, let base = bytes.baseAddress,
                let found = memchr(base + start, 0x0A, bytes.count - start)
            else { return nil }
            return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
        }
    }
}
