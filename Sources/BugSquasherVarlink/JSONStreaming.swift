package import BugSquasherJSON
package import Foundation

/// A type that reads itself with ``JSONReader`` instead of `Decodable`: parameters of calls and
/// replies on hot paths (change-feed saves, edits). ``VarlinkCall/parameters(_:)`` and
/// ``VarlinkReply/parameters(_:)`` use it when the type conforms.
package protocol JSONReadable {
    /// Reads one value; the reader is positioned at it.
    init(reading reader: inout JSONReader) throws
}

/// A type that writes itself with ``JSONWriter`` instead of `Encodable`;
/// ``VarlinkCall/encode(method:parameters:more:oneway:)`` and
/// ``VarlinkReply/encode(_:continues:)`` use it when the type conforms.
package protocol JSONWritable {
    /// Writes one value.
    func write(to writer: inout JSONWriter)
}

extension JSONValue: JSONReadable, JSONWritable {
    package init(reading reader: inout JSONReader) throws {
        switch try reader.peek() {
        case .null:
            try reader.skip()
            self = .null
        case .bool: self = .bool(try reader.bool())
        case .string: self = .string(try reader.string())
        case .number:
            switch try reader.number() {
            case .integer(let integer): self = .int(integer)
            case .double(let double): self = .double(double)
            }
        case .array:
            var elements: [JSONValue] = []
            try reader.array { elements.append(try JSONValue(reading: &$0)) }
            self = .array(elements)
        case .object:
            self = .object(try [String: JSONValue](reading: &reader))
        }
    }

    package func write(to writer: inout JSONWriter) {
        switch self {
        case .null: writer.null()
        case .bool(let bool): writer.bool(bool)
        case .int(let integer): writer.integer(integer)
        case .double(let double): writer.double(double)
        case .string(let string): writer.string(string)
        case .array(let elements): writer.array { writer in for element in elements { element.write(to: &writer) } }
        case .object(let fields): fields.write(to: &writer)
        }
    }
}

extension Dictionary: JSONReadable where Key == String, Value == JSONValue {
    package init(reading reader: inout JSONReader) throws {
        // Gathered first, so that the dictionary is sized once (growing it field by field cost
        // a subscriber 6 % of its instructions per refresh); a repeated name keeps its last value.
        var fields: [(String, JSONValue)] = []
        try reader.object { reader, key in fields.append((key, try JSONValue(reading: &reader))) }
        self.init(fields, uniquingKeysWith: { _, last in last })
    }
}

extension Dictionary: JSONWritable where Key == String, Value == JSONValue {
    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            for (key, value) in self {
                writer.key(key)
                value.write(to: &writer)
            }
        }
    }
}

extension JSONReader {
    /// Reads a whole message with `body`, which reads the top-level value; checks that nothing
    /// follows it.
    package static func read<T>(_ message: Data, _ body: (inout JSONReader) throws -> T) throws -> T {
        try message.withUnsafeBytes { raw in
            var reader = JSONReader(raw.bindMemory(to: UInt8.self))
            let value = try body(&reader)
            try reader.end()
            return value
        }
    }
}
