package import BugSquasherJSON
public import BugSquasherVarlink

/// An object's values on the wire: its attributes and to-one relationships by name, as one JSON
/// object, its fields in the order they were written.
///
/// ``WireCoding`` writes an entity's attributes in the model's order, then its to-one
/// relationships, and reads a row back field by field in that order, so that a change of the
/// feed is read without hashing a name. Any order is read: a name not at its place is looked up.
/// Each name is held once (a repeated name in JSON keeps its last value). Two values are equal
/// when they hold the same names with the same values, in any order.
/// See docs/DESIGN-NOTES.md, "A subscriber's refresh".
public struct WireValues: Sendable, Hashable, ExpressibleByDictionaryLiteral {
    /// One field: a name and its value.
    public struct Field: Sendable, Hashable {
        /// The attribute's or relationship's name.
        public var name: String
        /// Its value.
        public var value: JSONValue

        /// Creates a field.
        public init(name: String, value: JSONValue) {
            self.name = name
            self.value = value
        }
    }

    /// The fields, in the order they were written; each name once.
    public private(set) var fields: [Field]

    /// No fields, with room for `capacity`.
    public init(capacity: Int = 0) {
        fields = []
        fields.reserveCapacity(capacity)
    }

    /// The fields of a dictionary (in its order).
    public init(_ dictionary: [String: JSONValue]) {
        fields = dictionary.map { Field(name: $0.key, value: $0.value) }
    }

    /// The fields of a literal; a repeated name keeps its last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(capacity: elements.count)
        for (name, value) in elements { self[name] = value }
    }

    /// The number of fields.
    public var count: Int { fields.count }

    /// The fields as a dictionary.
    public var dictionary: [String: JSONValue] {
        Dictionary(fields.lazy.map { ($0.name, $0.value) }, uniquingKeysWith: { _, last in last })
    }

    /// The value named `name`, or `nil`; setting one replaces it in its place or adds it last,
    /// and setting `nil` removes it.
    public subscript(name: String) -> JSONValue? {
        get { index(of: name).map { fields[$0].value } }
        set {
            switch (index(of: name), newValue) {
            case (let index?, let value?): fields[index].value = value
            case (let index?, nil): fields.remove(at: index)
            case (nil, let value?): fields.append(Field(name: name, value: value))
            case (nil, nil): break
            }
        }
    }

    /// Where the field named `name` is, if it is there.
    private func index(of name: String) -> Int? {
        // Lengths first: most names of an object differ in length.
        let length = name.utf8.count
        return fields.firstIndex { $0.name.utf8.count == length && $0.name == name }
    }

    /// The value named `name`, looked for at `position` first (where ``WireCoding`` writes it).
    public func value(named name: String, expectedAt position: Int) -> JSONValue? {
        if position < fields.count, fields[position].name == name { return fields[position].value }
        return self[name]
    }

    /// Adds a field that is known not to be there (a writer's own fields, in order).
    mutating func append(name: String, value: JSONValue) {
        fields.append(Field(name: name, value: value))
    }

    public static func == (lhs: WireValues, rhs: WireValues) -> Bool {
        lhs.count == rhs.count && lhs.fields.allSatisfy { rhs[$0.name] == $0.value }
    }

    public func hash(into hasher: inout Hasher) {
        // Independent of the order, as equality is.
        hasher.combine(dictionary)
    }
}

extension WireValues: Codable {
    public init(from decoder: any Decoder) throws {
        self.init(try [String: JSONValue](from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try dictionary.encode(to: encoder)
    }
}

extension WireValues: JSONReadable, JSONWritable {
    package init(reading reader: inout JSONReader) throws {
        // The attributes of an entity and its to-one relationships: rarely more than 16.
        var values = WireValues(capacity: 16)
        // A name is looked for among those read only when one of the same length and first
        // byte was (a bit of `seen` each): names of an object rarely share both.
        var seen: UInt64 = 0
        try reader.object { reader, name in
            let value = try JSONValue(reading: &reader)
            let bit: UInt64 = 1 << UInt64((name.utf8.count &* 31 &+ Int(name.utf8.first ?? 0)) & 63)
            if seen & bit == 0 {
                seen |= bit
                values.append(name: name, value: value)
            } else {
                values[name] = value
            }
        }
        self = values
    }

    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            for field in fields {
                writer.key(field.name)
                field.value.write(to: &writer)
            }
        }
    }
}
