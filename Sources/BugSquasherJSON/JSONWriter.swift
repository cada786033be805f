/// Writes one JSON document in UTF-8, value by value, without `Codable`: the counterpart of
/// ``JSONReader`` for messages written many times a second (change-feed saves, replies). Keys are
/// written in the order given; strings are escaped as JSON requires, the rest written as UTF-8.
///
/// ```swift
/// var writer = JSONWriter()
/// writer.object { writer in writer.key("token"); writer.integer(42) }
/// let bytes = writer.bytes   // {"token":42}
/// ```
package struct JSONWriter: Sendable {
    /// The document so far.
    package private(set) var bytes: [UInt8] = []
    /// Whether the next value or key needs a comma before it.
    private var needsComma = false

    /// An empty document; `capacity` bytes reserved.
    package init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// Writes an object; `body` writes its fields with ``key(_:)`` and a value each.
    package mutating func object(_ body: (inout JSONWriter) throws -> Void) rethrows {
        try container(UInt8(ascii: "{"), UInt8(ascii: "}"), body)
    }

    /// Writes an array; `body` writes its elements.
    package mutating func array(_ body: (inout JSONWriter) throws -> Void) rethrows {
        try container(UInt8(ascii: "["), UInt8(ascii: "]"), body)
    }

    private mutating func container(_ open: UInt8, _ close: UInt8, _ body: (inout JSONWriter) throws -> Void) rethrows {
        separate()
        bytes.append(open)
        needsComma = false
        try body(&self)
        bytes.append(close)
        needsComma = true
    }

    /// Writes an object key; a value must follow.
    package mutating func key(_ name: String) {
        string(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    /// Writes a string.
    package mutating func string(_ text: String) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var clean = 0
            for (offset, byte) in utf8.enumerated()
            where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean..<offset]))
                escape(byte)
                clean = offset + 1
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean...]))
        }
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    /// Writes an integer, its digits straight into the bytes (no `String` made: the history
    /// and the feed write one or two for every object saved).
    package mutating func integer(_ value: Int64) {
        separate()
        DecimalDigits.append(value, to: &bytes)
        needsComma = true
    }

    /// Writes a number; `null` for infinity and NaN, which JSON cannot express.
    package mutating func double(_ value: Double) {
        guard value.isFinite else { return null() }
        separate()
        bytes.append(contentsOf: value.description.utf8)
        needsComma = true
    }

    /// Writes `true` or `false`.
    package mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: value ? "true".utf8 : "false".utf8)
        needsComma = true
    }

    /// Writes `null`.
    package mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
        needsComma = true
    }

    /// Writes bytes that already are one JSON value (a value encoded earlier).
    package mutating func raw(_ json: [UInt8]) {
        separate()
        bytes.append(contentsOf: json)
        needsComma = true
    }

    /// The document as one line of JSON Lines: its bytes and a newline, appended in place
    /// (the writer is used up, so its buffer is not copied).
    package consuming func line() -> [UInt8] {
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }

    private mutating func escape(_ byte: UInt8) {
        bytes.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
        case 0x0A: bytes.append(UInt8(ascii: "n"))
        case 0x0D: bytes.append(UInt8(ascii: "r"))
        case 0x09: bytes.append(UInt8(ascii: "t"))
        case 0x08: bytes.append(UInt8(ascii: "b"))
        case 0x0C: bytes.append(UInt8(ascii: "f"))
        default:
            let hex = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [
                UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)],
            ])
        }
    }
}
