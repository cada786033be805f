import Foundation

/// The type of an attribute.
public enum AttributeType: String, Sendable, Hashable, Codable, CaseIterable {
    /// Text.
    case string
    /// A 64-bit integer.
    case int64
    /// A double.
    case double
    /// A boolean.
    case bool
    /// A point in time.
    case date
    /// Raw bytes.
    case data
}

/// One attribute of an entity: a name, a type, whether it may be null, and a default.
///
/// ```swift
/// .attribute("title", .string)
/// .attribute("priority", .string, optional: true, default: "Medium")
/// ```
public struct AttributeDescription: Sendable, Hashable, Codable {
    /// The attribute's name, unique within its entity.
    public var name: String
    /// The attribute's type.
    public var type: AttributeType
    /// Whether the attribute may be null when saved.
    public var isOptional: Bool
    /// The value a newly inserted object starts with.
    public var defaultValue: Value

    /// Creates an attribute. A required attribute without a default starts as the type's zero
    /// value (empty string, 0, false, the reference date, empty data).
    public init(name: String, type: AttributeType, isOptional: Bool = false, defaultValue: Value? = nil) {
        self.name = name
        self.type = type
        self.isOptional = isOptional
        self.defaultValue = defaultValue ?? (isOptional ? .null : Self.zero(of: type))
    }

    static func zero(of type: AttributeType) -> Value {
        switch type {
        case .string: .string("")
        case .int64: .int64(0)
        case .double: .double(0)
        case .bool: .bool(false)
        case .date: .date(.init(timeIntervalSince1970: 0))
        case .data: .data(.init())
        }
    }
}

extension AttributeDescription {
    /// What is wrong with storing `value` in this attribute of object `id` (of entity `entity`),
    /// if anything: a nil in a required attribute, or a value of another type (an integer in a
    /// double attribute is fine). Saves refuse such values, naming the problem.
    public func problem(storing value: Value, in entity: String, of id: ObjectID) -> String? {
        if accepts(value) { return nil }
        if value.isNull { return "\(entity).\(name) is required but nil on \(id)" }
        return "\(entity).\(name) is \(type) but holds \(value) on \(id)"
    }

    /// Whether `value` may be stored in this attribute: ``problem(storing:in:of:)`` is `nil`.
    public func accepts(_ value: Value) -> Bool {
        guard let stored = value.type else { return isOptional }
        return stored == type || (type == .double && stored == .int64)
    }
}

/// What happens to related objects when an object is deleted.
public enum DeleteRule: String, Sendable, Hashable, Codable {
    /// Remove the deleted object from the inverse relationship of each related object.
    case nullify
    /// Delete every related object too.
    case cascade
    /// Refuse the save while any related object remains.
    case deny
}

/// A to-one or to-many relationship, with its inverse and delete rule.
///
/// Every relationship must name its inverse: the graph keeps both sides consistent, and the
/// store decides where to keep the link (a foreign key on the to-one side, or a join table for
/// many-to-many).
public struct RelationshipDescription: Sendable, Hashable, Codable {
    /// The relationship's name, unique within its entity.
    public var name: String
    /// The entity at the other end.
    public var destination: String
    /// The name of the inverse relationship on ``destination``.
    public var inverse: String
    /// Whether the relationship holds many objects.
    public var isToMany: Bool
    /// What deleting the source does to the destination objects.
    public var deleteRule: DeleteRule

    /// Creates a relationship.
    public init(name: String, destination: String, inverse: String, isToMany: Bool, deleteRule: DeleteRule = .nullify) {
        self.name = name
        self.destination = destination
        self.inverse = inverse
        self.isToMany = isToMany
        self.deleteRule = deleteRule
    }
}

extension AttributeDescription {
    /// Shorthand for an attribute in an entity definition.
    public static func attribute(
        _ name: String, _ type: AttributeType, optional: Bool = false, default defaultValue: Value? = nil
    ) -> Self {
        .init(name: name, type: type, isOptional: optional, defaultValue: defaultValue)
    }
}

extension RelationshipDescription {
    /// Shorthand for a to-one relationship in an entity definition.
    public static func toOne(_ name: String, _ destination: String, inverse: String, deleteRule: DeleteRule = .nullify)
        -> Self
    {
        .init(name: name, destination: destination, inverse: inverse, isToMany: false, deleteRule: deleteRule)
    }

    /// Shorthand for a to-many relationship in an entity definition.
    public static func toMany(_ name: String, _ destination: String, inverse: String, deleteRule: DeleteRule = .nullify)
        -> Self
    {
        .init(name: name, destination: destination, inverse: inverse, isToMany: true, deleteRule: deleteRule)
    }
}
