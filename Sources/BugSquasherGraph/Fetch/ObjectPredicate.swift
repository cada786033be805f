/// A filter on an entity's objects, with one meaning whether the store evaluates it (SQL for
/// SQLiteStore) or memory does (InMemoryStore, unsaved objects, live queries). Key paths name an
/// attribute (`"status"`) or follow to-one relationships to one (`"project.key"`). Build it with ``Key``:
///
/// ```swift
/// let open: ObjectPredicate = Key("status") == "Open" && Key("project.key").in(["TIMOB", "ALOY"])
/// let recent = Key("created") > .date(cutoff) && !Key("title").contains("flaky", caseInsensitive: true)
/// ```
public indirect enum ObjectPredicate: Sendable, Hashable, Codable {
    /// Always true.
    case all
    /// Compares the value at a key path with a constant.
    case compare(keyPath: String, ComparisonOperator, Value)
    /// True when the value at a key path is one of the constants.
    case isIn(keyPath: String, [Value])
    /// True when a to-one relationship (at the end of the key path) points to this object, or
    /// to nothing when `nil`.
    case relationship(keyPath: String, ObjectID?)
    /// True when every sub-predicate is.
    case and([ObjectPredicate])
    /// True when any sub-predicate is.
    case or([ObjectPredicate])
    /// True when the sub-predicate is not.
    case not(ObjectPredicate)

    /// The key paths the predicate reads.
    public var keyPaths: Set<String> {
        switch self {
        case .all: []
        case .compare(let keyPath, _, _), .isIn(let keyPath, _), .relationship(let keyPath, _): [keyPath]
        case .and(let items), .or(let items): items.reduce(into: []) { $0.formUnion($1.keyPaths) }
        case .not(let item): item.keyPaths
        }
    }
}

/// How ``ObjectPredicate/compare(keyPath:_:_:)`` compares.
public enum ComparisonOperator: String, Sendable, Hashable, Codable {
    /// Equal (`== nil` means "is null").
    case equal
    /// Not equal (`!= nil` means "is not null").
    case notEqual
    /// Less than.
    case less
    /// Less than or equal.
    case lessOrEqual
    /// Greater than.
    case greater
    /// Greater than or equal.
    case greaterOrEqual
    /// The string contains the constant (case-sensitive).
    case contains
    /// The string contains the constant, ignoring the case of ASCII letters.
    case containsCaseInsensitive
    /// The string starts with the constant (case-sensitive).
    case beginsWith
}

/// A key path in a predicate or sort, with operators that build ``ObjectPredicate`` values.
public struct Key: Sendable, Hashable {
    /// The dotted key path.
    public let path: String

    /// Names an attribute, or a to-one chain ending in one (`"project.key"`).
    public init(_ path: String) { self.path = path }

    /// Equality.
    public static func == (lhs: Key, rhs: Value) -> ObjectPredicate { .compare(keyPath: lhs.path, .equal, rhs) }
    /// Inequality.
    public static func != (lhs: Key, rhs: Value) -> ObjectPredicate { .compare(keyPath: lhs.path, .notEqual, rhs) }
    /// Less than.
    public static func < (lhs: Key, rhs: Value) -> ObjectPredicate { .compare(keyPath: lhs.path, .less, rhs) }
    /// Less than or equal.
    public static func <= (lhs: Key, rhs: Value) -> ObjectPredicate { .compare(keyPath: lhs.path, .lessOrEqual, rhs) }
    /// Greater than.
    public static func > (lhs: Key, rhs: Value) -> ObjectPredicate { .compare(keyPath: lhs.path, .greater, rhs) }
    /// Greater than or equal.
    public static func >= (lhs: Key, rhs: Value) -> ObjectPredicate {
        .compare(keyPath: lhs.path, .greaterOrEqual, rhs)
    }
    /// A to-one relationship points to this object (or to nothing, for `nil`).
    public static func == (lhs: Key, rhs: ObjectID?) -> ObjectPredicate { .relationship(keyPath: lhs.path, rhs) }

    /// The value is one of these.
    public func `in`(_ values: [Value]) -> ObjectPredicate { .isIn(keyPath: path, values) }
    /// The string value contains this text.
    public func contains(_ text: String, caseInsensitive: Bool = false) -> ObjectPredicate {
        .compare(keyPath: path, caseInsensitive ? .containsCaseInsensitive : .contains, .string(text))
    }
    /// The string value starts with this text.
    public func beginsWith(_ text: String) -> ObjectPredicate { .compare(keyPath: path, .beginsWith, .string(text)) }
    /// Ascending sort on this key path.
    public var ascending: SortKey { SortKey(path, ascending: true) }
    /// Descending sort on this key path.
    public var descending: SortKey { SortKey(path, ascending: false) }
}

/// Both predicates.
public func && (lhs: ObjectPredicate, rhs: ObjectPredicate) -> ObjectPredicate { .and([lhs, rhs]) }
/// Either predicate.
public func || (lhs: ObjectPredicate, rhs: ObjectPredicate) -> ObjectPredicate { .or([lhs, rhs]) }
/// The opposite predicate.
public prefix func ! (operand: ObjectPredicate) -> ObjectPredicate { .not(operand) }

/// One sort criterion: a key path and a direction.
public struct SortKey: Sendable, Hashable, Codable {
    /// The dotted key path to sort on.
    public var keyPath: String
    /// Whether smaller values come first.
    public var ascending: Bool

    /// Creates a sort criterion.
    public init(_ keyPath: String, ascending: Bool = true) {
        self.keyPath = keyPath
        self.ascending = ascending
    }
}
