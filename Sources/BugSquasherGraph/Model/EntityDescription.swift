/// One entity of a model: its attributes, relationships, unique key and the class of its objects.
///
/// ```swift
/// let project = EntityDescription(
///     name: "Project", objectType: Project.self, uniqueKey: "key",
///     attributes: [.attribute("key", .string), .attribute("name", .string)],
///     relationships: [.toMany("bugs", "Bug", inverse: "project")]
/// )
/// ```
public final class EntityDescription: Sendable {
    /// The entity's name, unique within its model; also the store's table name.
    public let name: String
    /// The attributes, in declaration order.
    public let attributes: [AttributeDescription]
    /// The relationships, in declaration order.
    public let relationships: [RelationshipDescription]
    /// The attribute whose value is unique among the entity's objects, if any.
    public let uniqueKey: String?
    /// The class instantiated for this entity's objects.
    public let objectType: ManagedObject.Type

    /// The position of each attribute in ``attributes`` (and in a ``RowSnapshot``'s attributes).
    public let attributeIndex: NameIndex
    /// The position of each relationship in ``relationships``.
    public let relationshipIndex: NameIndex
    /// The to-one relationships, in declaration order; a ``RowSnapshot`` holds one object ID for
    /// each, in this order.
    public let toOneRelationships: [RelationshipDescription]
    /// The position of each to-one relationship in ``toOneRelationships``.
    public let toOneIndex: NameIndex
    /// The to-many relationships, in declaration order.
    public let toManyRelationships: [RelationshipDescription]
    /// The position of each to-many relationship in ``toManyRelationships``.
    public let toManyIndex: NameIndex

    /// Creates an entity.
    public init(
        name: String,
        objectType: ManagedObject.Type = ManagedObject.self,
        uniqueKey: String? = nil,
        attributes: [AttributeDescription],
        relationships: [RelationshipDescription] = []
    ) {
        self.name = name
        self.objectType = objectType
        self.uniqueKey = uniqueKey
        self.attributes = attributes
        self.relationships = relationships
        attributeIndex = NameIndex(attributes.map(\.name))
        relationshipIndex = NameIndex(relationships.map(\.name))
        toOneRelationships = relationships.filter { !$0.isToMany }
        toOneIndex = NameIndex(toOneRelationships.map(\.name))
        toManyRelationships = relationships.filter(\.isToMany)
        toManyIndex = NameIndex(toManyRelationships.map(\.name))
        defaultValues = attributes.map(\.defaultValue)
    }

    /// Whether a unique key's text has whitespace at either end or a control character: an
    /// object stored under " TIMOB-1" is found by no lookup of TIMOB-1, so such keys are refused
    /// wherever they come in (an import, an edit).
    public static func hasStrayCharacters(inKey key: String) -> Bool {
        // An ASCII key (nearly every one) is answered from its bytes, without decoding scalars.
        let ascii: Bool?? = key.utf8.withContiguousStorageIfAvailable { bytes in
            guard let first = bytes.first, let last = bytes.last else { return false }
            if first == 0x20 || (0x09...0x0D).contains(first) || last == 0x20 || (0x09...0x0D).contains(last) {
                return true
            }
            for byte in bytes {
                if byte >= 0x80 { return nil }
                if byte < 0x20 || byte == 0x7F { return true }
            }
            return false
        }
        if let ascii, let ascii { return ascii }
        guard let first = key.unicodeScalars.first, let last = key.unicodeScalars.last else { return false }
        return isWhitespace(first) || isWhitespace(last)
            || key.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
    }

    /// Unicode's whitespace property, answered without its tables for ASCII (nearly every key).
    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII ? scalar == " " || (0x09...0x0D).contains(scalar.value) : scalar.properties.isWhitespace
    }

    /// The attribute with this name, if any.
    public func attribute(named name: String) -> AttributeDescription? {
        attributeIndex[name].map { attributes[$0] }
    }

    /// The relationship with this name, if any.
    public func relationship(named name: String) -> RelationshipDescription? {
        relationshipIndex[name].map { relationships[$0] }
    }

    /// The values a newly inserted object starts with, in the order of ``attributes``: where
    /// a row inserted with `ObjectContext.insertRow(_:values:)` starts.
    public let defaultValues: [Value]

    /// The entity's shape without its class: what the store keeps in its metadata.
    var schema: EntitySchema {
        EntitySchema(name: name, uniqueKey: uniqueKey, attributes: attributes, relationships: relationships)
    }
}

/// The Codable shape of an entity, stored in a store's metadata to compare models.
public struct EntitySchema: Sendable, Hashable, Codable {
    /// The entity's name.
    public var name: String
    /// The unique key attribute, if any.
    public var uniqueKey: String?
    /// The attributes, in declaration order.
    public var attributes: [AttributeDescription]
    /// The relationships, in declaration order.
    public var relationships: [RelationshipDescription]
}
