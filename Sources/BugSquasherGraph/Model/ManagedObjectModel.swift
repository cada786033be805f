import Foundation

/// A set of entities: the managed object model.
///
/// The model is validated when created (every relationship names an existing destination and an
/// inverse that points back; unique keys name attributes) and has a ``versionHash`` that stores
/// record. A store written with another hash opens only if the difference is an automatic
/// migration: attributes added that are optional or have a default.
public final class ManagedObjectModel: Sendable {
    /// The entities, in declaration order.
    public let entities: [EntityDescription]
    private let entitiesByName: [String: EntityDescription]
    /// A stable hash of the model's shape (entities, attributes, relationships, unique keys).
    public let versionHash: String
    /// Per entity, the to-many slots of many-to-many relationships whose links that side writes.
    let ownedLinkSlots: [String: [Int]]
    /// Per entity (by identity), the inverse of each relationship, resolved once: contexts keep
    /// both sides in step on every relationship change, and looking the inverse up by names
    /// each time would hash three strings.
    private let inverses: [ObjectIdentifier: EntityInverses]

    /// Creates a model and checks that it is consistent.
    ///
    /// - Throws: ``GraphError/Code/invalidArgument`` naming the first inconsistency found.
    public init(entities: [EntityDescription]) throws {
        self.entities = entities
        var byName: [String: EntityDescription] = [:]
        for entity in entities {
            guard byName.updateValue(entity, forKey: entity.name) == nil else {
                throw GraphError(
                    .invalidArgument, "The model defines entity '\(entity.name)' twice.",
                    advice: "Give each entity a unique name."
                )
            }
        }
        entitiesByName = byName
        versionHash = Self.hash(of: entities.map(\.schema))
        var owned: [String: [Int]] = [:]
        for entity in entities {
            owned[entity.name] = entity.toManyRelationships.indices.filter { slot in
                let relationship = entity.toManyRelationships[slot]
                return byName[relationship.destination]?.relationship(named: relationship.inverse)?.isToMany == true
                    && relationship.ownsManyToManyLinks(in: entity.name)
            }
        }
        ownedLinkSlots = owned
        var inverses: [ObjectIdentifier: EntityInverses] = [:]
        for entity in entities {
            func inverse(of relationship: RelationshipDescription) -> InverseLink? {
                guard let destination = byName[relationship.destination],
                    let inverse = destination.relationship(named: relationship.inverse),
                    let slot = inverse.isToMany
                        ? destination.toManyIndex[inverse.name] : destination.toOneIndex[inverse.name]
                else { return nil }
                return InverseLink(entity: destination, relationship: inverse, slot: slot)
            }
            inverses[ObjectIdentifier(entity)] = EntityInverses(
                toOne: entity.toOneRelationships.map(inverse(of:)), toMany: entity.toManyRelationships.map(inverse(of:))
            )
        }
        self.inverses = inverses
        try validate()
    }

    /// The inverse of `entity`'s to-one relationship at `slot` (of ``EntityDescription/toOneRelationships``).
    func inverse(ofToOne slot: Int, in entity: EntityDescription) -> InverseLink? {
        inverses[ObjectIdentifier(entity)]?.toOne[slot]
    }

    /// The inverse of `entity`'s to-many relationship at `slot` (of ``EntityDescription/toManyRelationships``).
    func inverse(ofToMany slot: Int, in entity: EntityDescription) -> InverseLink? {
        inverses[ObjectIdentifier(entity)]?.toMany[slot]
    }

    /// The entity with this name, if the model has one.
    public func entity(named name: String) -> EntityDescription? { entitiesByName[name] }

    /// The entity with this name, or an error naming the entities that exist.
    public func requireEntity(_ name: String) throws -> EntityDescription {
        guard let entity = entitiesByName[name] else {
            throw GraphError(
                .invalidArgument,
                "The model has no entity '\(name)'; it has \(entities.map(\.name).joined(separator: ", ")).")
        }
        return entity
    }

    /// A to-many relationship of an entity with its destination entity and inverse, for stores
    /// that resolve `newValue(forRelationship:of:)`: a to-one inverse means a foreign key on the
    /// destination, a to-many inverse a join table.
    public func toManyRelationship(_ name: String, of entityName: String) throws -> (
        relationship: RelationshipDescription, destination: EntityDescription, inverse: RelationshipDescription
    ) {
        let entity = try requireEntity(entityName)
        guard let relationship = entity.relationship(named: name), relationship.isToMany,
            let destination = self.entity(named: relationship.destination),
            let inverse = destination.relationship(named: relationship.inverse)
        else {
            throw GraphError(.invalidArgument, "'\(entityName).\(name)' is not a to-many relationship of the model.")
        }
        return (relationship, destination, inverse)
    }

    /// The model's shape, as a store keeps it in its metadata.
    public var schema: [EntitySchema] { entities.map(\.schema) }

    private func validate() throws {
        for entity in entities {
            if let key = entity.uniqueKey, entity.attribute(named: key) == nil {
                throw GraphError(
                    .invalidArgument,
                    "Entity '\(entity.name)' names unique key '\(key)', which is not one of its attributes.")
            }
            for relationship in entity.relationships {
                guard let destination = entitiesByName[relationship.destination] else {
                    throw GraphError(
                        .invalidArgument,
                        "Relationship '\(entity.name).\(relationship.name)' points to unknown entity '\(relationship.destination)'."
                    )
                }
                guard let inverse = destination.relationship(named: relationship.inverse),
                    inverse.destination == entity.name, inverse.inverse == relationship.name
                else {
                    throw GraphError(
                        .invalidArgument,
                        "Relationship '\(entity.name).\(relationship.name)' needs an inverse '\(relationship.destination).\(relationship.inverse)' that points back to it."
                    )
                }
            }
        }
    }

    /// FNV-1a (64 bit) over the canonical JSON of the schema: stable across runs and platforms.
    static func hash(of schema: [EntitySchema]) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes = (try? encoder.encode(schema.sorted { $0.name < $1.name })) ?? Data()
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// What a store must do to open with a model different from the one it was written with.
public struct ModelMigration: Sendable, Hashable {
    /// Attributes to add, per entity name: the only change that migrates automatically.
    public var addedAttributes: [String: [AttributeDescription]]

    /// Whether nothing needs to change.
    public var isEmpty: Bool { addedAttributes.isEmpty }

    /// Compares the schema a store was written with to the current model.
    ///
    /// - Throws: ``GraphError/Code/incompatibleModel`` listing every change that cannot migrate
    ///   automatically, and what to do.
    public static func plan(from stored: [EntitySchema], to model: ManagedObjectModel) throws -> ModelMigration {
        var problems: [String] = []
        var added: [String: [AttributeDescription]] = [:]
        let current = Dictionary(model.schema.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        let old = Dictionary(stored.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        // Entities or attributes the store has and the model lacks: most often a newer version's.
        var storeHasMore = false
        for name in Set(old.keys).subtracting(current.keys).sorted() {
            problems.append("entity '\(name)' was removed")
            storeHasMore = true
        }
        for name in Set(current.keys).subtracting(old.keys).sorted() { problems.append("entity '\(name)' was added") }
        for (name, new) in current.sorted(by: { $0.key < $1.key }) {
            guard let was = old[name] else { continue }
            if was.uniqueKey != new.uniqueKey { problems.append("the unique key of '\(name)' changed") }
            if was.relationships != new.relationships { problems.append("the relationships of '\(name)' changed") }
            let newAttributes = Dictionary(new.attributes.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
            for attribute in was.attributes {
                guard let now = newAttributes[attribute.name] else {
                    problems.append("attribute '\(name).\(attribute.name)' was removed")
                    storeHasMore = true
                    continue
                }
                if now.type != attribute.type {
                    problems.append(
                        "attribute '\(name).\(attribute.name)' changed type from \(attribute.type) to \(now.type)")
                }
                if now.isOptional != attribute.isOptional {
                    problems.append("attribute '\(name).\(attribute.name)' changed optionality")
                }
            }
            let oldNames = Set(was.attributes.map(\.name))
            for attribute in new.attributes where !oldNames.contains(attribute.name) {
                if attribute.isOptional || !attribute.defaultValue.isNull {
                    added[name, default: []].append(attribute)
                } else {
                    problems.append("required attribute '\(name).\(attribute.name)' was added without a default")
                }
            }
        }
        guard problems.isEmpty else {
            let newer =
                storeHasMore
                ? " The store has what this model lacks, so it was most likely written by a newer version of the software, and a store is never migrated back."
                : ""
            throw GraphError(
                .incompatibleModel,
                "The store was written with an incompatible model: \(problems.joined(separator: "; ")).\(newer) Only adding optional attributes (or attributes with a default) migrates automatically.",
                advice: storeHasMore
                    ? "Run that version (or a later one) on it."
                    : "Open the store with the model it was written with, or export and re-import the data."
            )
        }
        return ModelMigration(addedAttributes: added)
    }
}

/// The other side of a relationship: its entity, the inverse relationship, and that
/// relationship's slot (among the destination's to-one or to-many relationships, as it is one
/// or the other).
struct InverseLink: Sendable {
    let entity: EntityDescription
    let relationship: RelationshipDescription
    let slot: Int
}

/// The inverses of one entity's relationships, by slot.
private struct EntityInverses: Sendable {
    let toOne: [InverseLink?]
    let toMany: [InverseLink?]
}
