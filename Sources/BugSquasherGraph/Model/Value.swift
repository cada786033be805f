public import Foundation

/// One attribute value, as it travels between objects, coordinators, stores and the wire. Strings
/// compare by their UTF-8 bytes, as the store does (see ``StoredText``): another Unicode form of a
/// title is a change, which is saved, and two keys the store holds apart are never one value.
///
/// ```swift
/// bug["title"] = .string("Crash on launch")
/// let predicate: ObjectPredicate = Key("priority") == "High"
/// ```
public enum Value: Sendable, Hashable, Codable {
    /// No value (an optional attribute that is unset).
    case null
    /// A string.
    case string(String)
    /// A 64-bit integer.
    case int64(Int64)
    /// A double.
    case double(Double)
    /// A boolean.
    case bool(Bool)
    /// A point in time.
    case date(Date)
    /// Raw bytes.
    case data(Data)

    /// Whether this is ``null``.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The type of this value, or `nil` for ``null``.
    public var type: AttributeType? {
        switch self {
        case .null: nil
        case .string: .string
        case .int64: .int64
        case .double: .double
        case .bool: .bool
        case .date: .date
        case .data: .data
        }
    }

    /// Orders two values of the same type; `null` sorts first. Values of different types compare
    /// by type name, so that sorting never traps.
    public static func ascending(_ lhs: Value, _ rhs: Value) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return false
        case (.null, _): return true
        case (_, .null): return false
        case (.string(let a), .string(let b)): return StoredText(a) < StoredText(b)
        case (.int64(let a), .int64(let b)): return a < b
        case (.double(let a), .double(let b)): return a < b
        case (.int64(let a), .double(let b)): return Double(a) < b
        case (.double(let a), .int64(let b)): return a < Double(b)
        case (.bool(let a), .bool(let b)): return !a && b
        case (.date(let a), .date(let b)): return a < b
        case (.data(let a), .data(let b)): return a.lexicographicallyPrecedes(b)
        default: return (lhs.type?.rawValue ?? "") < (rhs.type?.rawValue ?? "")
        }
    }
}

extension Value {
    /// Whether the two values are the same; strings are compared byte for byte.
    public static func == (lhs: Value, rhs: Value) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.string(let a), .string(let b)): StoredText.bytesEqual(a, b)
        case (.int64(let a), .int64(let b)): a == b
        case (.double(let a), .double(let b)): a == b
        case (.bool(let a), .bool(let b)): a == b
        case (.date(let a), .date(let b)): a == b
        case (.data(let a), .data(let b)): a == b
        default: false
        }
    }

    /// Hashes the value; a string by its UTF-8 bytes, agreeing with ``==(_:_:)``.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .string(let s):
            hasher.combine(1)
            hasher.combine(StoredText(s))
        case .int64(let i):
            hasher.combine(2)
            hasher.combine(i)
        case .double(let d):
            hasher.combine(3)
            hasher.combine(d)
        case .bool(let b):
            hasher.combine(4)
            hasher.combine(b)
        case .date(let d):
            hasher.combine(5)
            hasher.combine(d)
        case .data(let d):
            hasher.combine(6)
            hasher.combine(d)
        }
    }
}

extension Value: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int64(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
}

extension Value: CustomStringConvertible {
    public var description: String {
        switch self {
        case .null: "nil"
        case .string(let s): "\"\(s)\""
        case .int64(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): String(b)
        case .date(let d): ISO8601Date.format(d)
        case .data(let d): "\(d.count) bytes"
        }
    }
}

/// A Swift type that maps to one ``AttributeType``: used by the typed accessors of
/// ``ManagedObject`` (`object.get("title", as: String.self)`).
public protocol AttributeConvertible: Sendable {
    /// The value as an attribute value.
    var attributeValue: Value { get }
    /// Reads the value back; `nil` when the attribute value has another type or is null.
    init?(attributeValue: Value)
}

extension String: AttributeConvertible {
    public var attributeValue: Value { .string(self) }
    public init?(attributeValue: Value) {
        guard case .string(let s) = attributeValue else { return nil }
        self = s
    }
}

extension Int64: AttributeConvertible {
    public var attributeValue: Value { .int64(self) }
    public init?(attributeValue: Value) {
        guard case .int64(let i) = attributeValue else { return nil }
        self = i
    }
}

extension Int: AttributeConvertible {
    public var attributeValue: Value { .int64(Int64(self)) }
    public init?(attributeValue: Value) {
        guard case .int64(let i) = attributeValue else { return nil }
        self = Int(i)
    }
}

extension Double: AttributeConvertible {
    public var attributeValue: Value { .double(self) }
    public init?(attributeValue: Value) {
        switch attributeValue {
        case .double(let d): self = d
        case .int64(let i): self = Double(i)
        default: return nil
        }
    }
}

extension Bool: AttributeConvertible {
    public var attributeValue: Value { .bool(self) }
    public init?(attributeValue: Value) {
        guard case .bool(let b) = attributeValue else { return nil }
        self = b
    }
}

extension Date: AttributeConvertible {
    public var attributeValue: Value { .date(self) }
    public init?(attributeValue: Value) {
        guard case .date(let d) = attributeValue else { return nil }
        self = d
    }
}

extension Data: AttributeConvertible {
    public var attributeValue: Value { .data(self) }
    public init?(attributeValue: Value) {
        guard case .data(let d) = attributeValue else { return nil }
        self = d
    }
}
