import BugSquasherGraph
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

    /// Writes `rows` of `entity` (columns `pk`, `_version`, then `columns`) with one `COPY`.
    func copy(
        _ rows: ArraySlice<SaveChanges.Row>, into entity: EntityDescription, columns: [String],
        on connection: PostgresConnection
    ) throws {
        let data = PostgresCopyText.encode(rows)
        let logger = logger
        try PostgresEventLoops.run(on: connection.eventLoop) {
            try await connection.copyFrom(table: entity.name, columns: ["pk", "_version"] + columns, logger: logger) {
                writer in
                for part in data { try await writer.write(part) }
            }
        }
    }
}

/// Rows in the text format of `COPY` (tab between columns, a newline after each row, `\N` for
/// NULL, backslash escapes), cut into buffers of about 256 KiB, each sent as one message.
enum PostgresCopyText {
    static let partSize = 256 * 1024

    /// `rows` as `pk`, `1` (the first version), the attributes and the to-one keys.
    static func encode(_ rows: ArraySlice<SaveChanges.Row>) -> [ByteBuffer] {
        var parts: [ByteBuffer] = []
        var buffer = ByteBuffer()
        buffer.reserveCapacity(partSize + partSize / 4)
        for row in rows {
            buffer.writeString(String(row.objectID.key))
            buffer.writeStaticString("\t1")
            for value in row.attributes {
                buffer.writeInteger(UInt8(ascii: "\t"))
                write(value, to: &buffer)
            }
            for key in row.toOne {
                buffer.writeInteger(UInt8(ascii: "\t"))
                if let key { buffer.writeString(String(key.key)) } else { buffer.writeStaticString("\\N") }
            }
            buffer.writeInteger(UInt8(ascii: "\n"))
            if buffer.readableBytes >= partSize {
                parts.append(buffer)
                buffer = ByteBuffer()
                buffer.reserveCapacity(partSize + partSize / 4)
            }
        }
        if buffer.readableBytes > 0 { parts.append(buffer) }
        return parts
    }

    /// One column's text: what the server's input function of the column's type reads.
    static func write(_ value: Value, to buffer: inout ByteBuffer) {
        switch value {
        case .null: buffer.writeStaticString("\\N")
        case .string(let text): writeText(text, to: &buffer)
        case .int64(let number): buffer.writeString(String(number))
        case .double(let number): writeDouble(number, to: &buffer)
        case .date(let date): writeDouble(date.timeIntervalSince1970, to: &buffer)
        case .bool(let flag): buffer.writeInteger(UInt8(ascii: flag ? "t" : "f"))
        case .data(let data):
            // bytea's hex form, `\x…`, its backslash escaped for COPY.
            buffer.writeStaticString("\\\\x")
            let digits = Array("0123456789abcdef".utf8)
            for byte in data {
                buffer.writeInteger(digits[Int(byte >> 4)])
                buffer.writeInteger(digits[Int(byte & 0x0F)])
            }
        }
    }

    /// A double as the shortest text that reads back as the same value.
    private static func writeDouble(_ number: Double, to buffer: inout ByteBuffer) {
        if number.isNaN {
            buffer.writeStaticString("NaN")
        } else if number.isInfinite {
            buffer.writeStaticString(number < 0 ? "-Infinity" : "Infinity")
        } else {
            buffer.writeString(number.description)
        }
    }

    /// `text` as ``PostgresText`` stores it, escaped for COPY; copied whole when it has no byte
    /// either would change (nearly all text), found sixteen bytes at a time.
    private static func writeText(_ text: String, to buffer: inout ByteBuffer) {
        var text = text
        let plain = text.withUTF8 { bytes in
            guard !mayNeedEscaping(UnsafeRawBufferPointer(bytes)) else { return false }
            buffer.writeBytes(UnsafeRawBufferPointer(bytes))
            return true
        }
        if !plain { writeEscaped(PostgresText.encode(text), to: &buffer) }
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
    private static func writeEscaped(_ text: String, to buffer: inout ByteBuffer) {
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            for (index, byte) in bytes.enumerated() {
                let escaped: StaticString
                switch byte {
                case UInt8(ascii: "\\"): escaped = "\\\\"
                case UInt8(ascii: "\t"): escaped = "\\t"
                case UInt8(ascii: "\n"): escaped = "\\n"
                case UInt8(ascii: "\r"): escaped = "\\r"
                default: continue
                }
                buffer.writeBytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[start..<index])))
                buffer.writeStaticString(escaped)
                start = index + 1
            }
            buffer.writeBytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[start...])))
        }
    }
}
