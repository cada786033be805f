public import BugSquasherErrors

/// The framing of an upload over an upgraded connection (`io.bugsquasher.Import.Upload` with
/// `upgrade: true`): chunks of a 4-byte big-endian length and that many bytes of the file, then a
/// zero length. The explicit end tells a complete upload from a client that died halfway.
///
/// ```swift
/// var framing = UploadFraming()
/// let file = try framing.payload(of: received)   // the file's bytes among the headers
/// if framing.ended { /* commit */ }
/// ```
public struct UploadFraming: Sendable {
    /// The longest chunk accepted: a longer length means the client is not speaking this
    /// framing (JSON text read as a length is hundreds of megabytes).
    public static let maximumChunkLength = 16 << 20

    /// The header of a chunk of `count` bytes; `header(0)` ends the upload.
    public static func header(_ count: Int) -> [UInt8] {
        precondition(
            (0...maximumChunkLength).contains(count), "an upload chunk holds at most \(maximumChunkLength) bytes")
        return [
            UInt8(truncatingIfNeeded: count >> 24), UInt8(truncatingIfNeeded: count >> 16),
            UInt8(truncatingIfNeeded: count >> 8), UInt8(truncatingIfNeeded: count),
        ]
    }

    /// Whether the zero length was read: the upload is complete.
    public private(set) var ended = false
    /// Bytes of the file read so far.
    public private(set) var payloadBytes: Int64 = 0
    private var header: [UInt8] = []
    private var remaining = 0

    /// Creates a reader at the start of an upload.
    public init() {}

    /// The file's bytes among `bytes` (the next bytes received, split anywhere), without the
    /// chunk headers.
    ///
    /// - Throws: ``UploadFramingError`` for a chunk longer than ``maximumChunkLength`` or bytes
    ///   after the end.
    public mutating func payload(of bytes: UnsafeRawBufferPointer) throws -> [UInt8] {
        let bytes = bytes.assumingMemoryBound(to: UInt8.self)
        var payload: [UInt8] = []
        payload.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if ended { throw UploadFramingError.bytesAfterEnd }
            if remaining > 0 {
                let end = min(bytes.count, index + remaining)
                payload.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[index..<end]))
                remaining -= end - index
                index = end
                continue
            }
            header.append(bytes[index])
            index += 1
            guard header.count == 4 else { continue }
            let length = header.reduce(0) { $0 << 8 | Int($1) }
            header.removeAll(keepingCapacity: true)
            guard length <= Self.maximumChunkLength else { throw UploadFramingError.chunkTooLong(length) }
            if length == 0 { ended = true }
            remaining = length
        }
        payloadBytes += Int64(payload.count)
        return payload
    }
}

/// Why the bytes of an upgraded upload are not in ``UploadFraming``.
public enum UploadFramingError: ExplainedError, Sendable, Hashable {
    /// A chunk's length is over the limit.
    case chunkTooLong(Int)
    /// Bytes followed the zero length that ends the upload.
    case bytesAfterEnd

    /// What the client sent that is not in the framing.
    public var statement: String {
        switch self {
        case .chunkTooLong(let length):
            "An upload chunk of \(length) bytes is longer than \(UploadFraming.maximumChunkLength)."
        case .bytesAfterEnd:
            "Bytes followed the zero length that ends the upload."
        }
    }

    /// How to frame the upload instead.
    public var advice: String {
        switch self {
        case .chunkTooLong:
            "After the upgrade, send chunks of a 4-byte big-endian length and the bytes, and a zero length to end (docs/PROTOCOL.md)."
        case .bytesAfterEnd:
            "Wait for the reply instead."
        }
    }
}
