import BugSquasherGraph
import BugSquasherJSON
import Foundation
import NIOCore
import PostgresNIO

// New rows by `COPY … FROM STDIN`: the server parses a stream of rows, where a multi-row
// `INSERT` of 1,000 rows is a statement of 10,000 parameters to parse, plan and bind (three
// times the server's time on an import). Why: docs/DESIGN-NOTES.md, "Imports reach PostgreSQL
// by COPY".
extension PostgresStore {
    /// The fewest rows written by `COPY`; fewer go in one `INSERT`, whose clash with a unique key
    /// names the row.
    static let fewestCopiedRows = 8

    /// Starts a `COPY` of `rows` of `entity` (columns `pk`, `_version`, then `columns`) and
    /// returns once they are encoded, without waiting for the server: the rows are encoded here
    /// part by part, and the server reads each part while the next is encoded. Statements sent
    /// afterwards run after the `COPY`.
    func startCopy(
        _ rows: ArraySlice<SaveChanges.Row>, into entity: EntityDescription, columns: [String],
        on connection: PostgresConnection
    ) -> PendingAnswer<Void> {
        let (parts, feed) = AsyncStream<ByteBuffer>.makeStream()
        let logger = logger
        let copied = PostgresEventLoops.start(on: connection) {
            try await connection.copyFrom(table: entity.name, columns: ["pk", "_version"] + columns, logger: logger) {
                writer in
                // postgres-nio stops the process when its writer is called (a write, and the
                // done or failure that follow this closure) on a connection that is closing but
                // has not finished closing. The task runs on the connection's loop: each look
                // and the call after it are one turn of the loop. See `ClosingConnections`.
                do {
                    for await part in parts {
                        try ClosingConnections.requireOpen(connection)
                        try await writer.write(part)
                    }
                    try ClosingConnections.requireOpen(connection)
                } catch {
                    // Once closed all the way, the writer fails its calls instead.
                    if ClosingConnections.isClosing(connection) { try? await connection.closeFuture.get() }
                    throw error
                }
            }
        }
        // A COPY the server refuses reads no part: the parts are dropped with the stream.
        PostgresCopyText.encode(rows) { feed.yield($0) }
        feed.finish()
        return copied
    }
}

/// Rows in the text format of `COPY` (tab between columns, a newline after each row, `\N` for
/// NULL, backslash escapes), cut into buffers of about 64 KiB, each sent as one message (the
/// server starts on the first while the rest are encoded). Each
/// part is built in a plain byte array and handed over as one `ByteBuffer`: a `ByteBuffer` write
/// per column (its capacity and uniqueness checked each time) cost twice the encoding itself.
enum PostgresCopyText {
    static let partSize = 64 * 1024

    /// `rows` as `pk`, `1` (the first version), the attributes and the to-one keys, handed to
    /// `emit` part by part.
    static func encode(_ rows: ArraySlice<SaveChanges.Row>, emit: (ByteBuffer) -> Void) {
        var part: [UInt8] = []
        part.reserveCapacity(partSize + partSize / 4)
        for row in rows {
            DecimalDigits.append(row.objectID.key, to: &part)
            part.append(UInt8(ascii: "\t"))
            part.append(UInt8(ascii: "1"))
            for value in row.attributes {
                part.append(UInt8(ascii: "\t"))
                write(value, to: &part)
            }
            for key in row.toOne {
                part.append(UInt8(ascii: "\t"))
                if let key { DecimalDigits.append(key.key, to: &part) } else { appendNull(to: &part) }
            }
            part.append(UInt8(ascii: "\n"))
            if part.count >= partSize {
                emit(ByteBuffer(bytes: part))
                part.removeAll(keepingCapacity: true)
            }
        }
        if !part.isEmpty { emit(ByteBuffer(bytes: part)) }
    }

    /// One column's text: what the server's input function of the column's type reads.
    static func write(_ value: Value, to part: inout [UInt8]) {
        switch value {
        case .null: appendNull(to: &part)
        case .string(let text): writeText(text, to: &part)
        case .int64(let number): DecimalDigits.append(number, to: &part)
        case .double(let number): writeDouble(number, to: &part)
        case .date(let date): writeDouble(date.timeIntervalSince1970, to: &part)
        case .bool(let flag): part.append(UInt8(ascii: flag ? "t" : "f"))
        case .data(let data):
            // bytea's hex form, `\x…`, its backslash escaped for COPY.
            part.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\"), UInt8(ascii: "x")])
            let digits = Array("0123456789abcdef".utf8)
            for byte in data {
                part.append(digits[Int(byte >> 4)])
                part.append(digits[Int(byte & 0x0F)])
            }
        }
    }

    /// `\N`, NULL.
    @inline(__always)
    private static func appendNull(to part: inout [UInt8]) {
        part.append(UInt8(ascii: "\\"))
        part.append(UInt8(ascii: "N"))
    }

    /// A double as the shortest text that reads back as the same value.
    private static func writeDouble(_ number: Double, to part: inout [UInt8]) {
        if number.isNaN {
            part.append(contentsOf: "NaN".utf8)
        } else if number.isInfinite {
            part.append(contentsOf: (number < 0 ? "-Infinity" : "Infinity").utf8)
        } else {
            part.append(contentsOf: number.description.utf8)
        }
    }

    /// `text` as ``PostgresText`` stores it, escaped for COPY; copied whole when it has no byte
    /// either would change (nearly all text), found eight bytes at a time.
    private static func writeText(_ text: String, to part: inout [UInt8]) {
        var text = text
        let plain = text.withUTF8 { bytes in
            guard !mayNeedEscaping(UnsafeRawBufferPointer(bytes)) else { return false }
            part.append(contentsOf: bytes)
            return true
        }
        if !plain { writeEscaped(PostgresText.encode(text), to: &part) }
    }

    /// Whether `bytes` has a control character, a backslash, or the lead byte of a code point
    /// from U+100000 on (see ``PostgresText``), eight bytes at a time (the classic tests for a
    /// zero byte, and a byte below a bound, in a word).
    static func mayNeedEscaping(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        var offset = 0
        while offset + 8 <= bytes.count {
            let word = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            let backslash = word ^ (ones &* 0x5C)
            let lead = word ^ (ones &* 0xF4)
            let found =
                ((word &- ones &* 0x20) & ~word) | ((backslash &- ones) & ~backslash) | ((lead &- ones) & ~lead)
            if found & highs != 0 { return true }
            offset += 8
        }
        return bytes[offset...].contains { $0 < 0x20 || $0 == 0x5C || $0 == 0xF4 }
    }

    /// `text` with the backslash, tab, newline and carriage return escaped; runs without them
    /// copied whole.
    private static func writeEscaped(_ text: String, to part: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            for (index, byte) in bytes.enumerated() {
                let escaped: UInt8
                switch byte {
                case UInt8(ascii: "\\"): escaped = UInt8(ascii: "\\")
                case UInt8(ascii: "\t"): escaped = UInt8(ascii: "t")
                case UInt8(ascii: "\n"): escaped = UInt8(ascii: "n")
                case UInt8(ascii: "\r"): escaped = UInt8(ascii: "r")
                default: continue
                }
                part.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
                part.append(UInt8(ascii: "\\"))
                part.append(escaped)
                start = index + 1
            }
            part.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
        }
    }
}
