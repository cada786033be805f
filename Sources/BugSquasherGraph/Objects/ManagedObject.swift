import OrderedCollections

/// An object of the graph — Core Data's `NSManagedObject` — that lives in one ``ObjectContext`` and
/// never leaves it (pass its ``objectID``). A fetched object is a *fault* until a property is read;
/// setting a property to the value it has changes nothing. Subclass it per entity for typed properties:
///
/// ```swift
/// final class Bug: ManagedObject {
///     var title: String { get { get("title") ?? "" } set { set("title", newValue) } }
/// }
/// ```
open class ManagedObject: Hashable, CustomStringConvertible {
    /// The entity name a ``FetchRequest`` of this class uses; the class name unless overridden.
    open class var entityName: String { String(describing: self) }

    /// The object's entity.
    public let entity: EntityDescription
    /// The object's ID: temporary until the first save, permanent after.
    public internal(set) var objectID: ObjectID
    /// Whether the values have not been loaded yet.
    public internal(set) var isFault: Bool
    /// Whether the object was inserted and not saved yet.
    public internal(set) var isInserted = false
    /// Whether the object was deleted (in this context, or by a merged did-save).
    public internal(set) var isDeleted = false
    /// Set when a fault could not be fulfilled (the row is gone, or the store failed); the
    /// object's values read as defaults then.
    public internal(set) var faultError: GraphError?

    /// The context's state; `nil` once the context was reset or released.
    weak var core: ContextCore?
    var values: [Value] = []
    var toOne: [ManagedObject?] = []
    var toMany: [ToManyState] = []
    /// The values as last loaded or saved; `nil` for an inserted object.
    var snapshot: RowSnapshot?
    /// The batch of faults this object was fetched with, fulfilled together.
    var faultBatch: FaultBatch?

    /// Creates an object; contexts call this, programs call ``ObjectContext/insert(_:)``.
    public required init(entity: EntityDescription, objectID: ObjectID) {
        self.entity = entity
        self.objectID = objectID
        self.isFault = true
    }

    public static func == (lhs: ManagedObject, rhs: ManagedObject) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    public var description: String {
        "<\(entity.name) \(objectID.uriString)\(isFault ? " fault" : "")\(isDeleted ? " deleted" : "")>"
    }

    // MARK: Attributes

    /// Reads an attribute, fulfilling the fault first if needed.
    public func value(for key: String) -> Value {
        guard let index = entity.attributeIndex[key] else {
            preconditionFailure("Entity '\(entity.name)' has no attribute '\(key)'.")
        }
        return value(at: index)
    }

    /// Writes an attribute; writing the value it already has does nothing.
    public func setValue(_ value: Value, for key: String) {
        guard let index = entity.attributeIndex[key] else {
            preconditionFailure("Entity '\(entity.name)' has no attribute '\(key)'.")
        }
        setValue(value, at: index)
    }

    /// An attribute, as a ``Value``.
    public subscript(key: String) -> Value {
        get { value(for: key) }
        set { setValue(newValue, for: key) }
    }

    /// An attribute, typed; `nil` when it is null (or holds another type).
    ///
    /// Inlinable, like ``set(_:_:)`` and ``related(_:as:)``, so that an entity's typed
    /// properties are specialized where they are declared instead of looking up generic
    /// metadata on every access.
    @inlinable
    public func get<T: AttributeConvertible>(_ key: String, as type: T.Type = T.self) -> T? {
        T(attributeValue: value(for: key))
    }

    /// Writes an attribute from a Swift value; `nil` writes null.
    @inlinable
    public func set<T: AttributeConvertible>(_ key: String, _ value: T?) {
        setValue(value?.attributeValue ?? .null, for: key)
    }

    func value(at index: Int) -> Value {
        if isFault { core?.fulfillFault(self) }
        return index < values.count ? values[index] : entity.attributes[index].defaultValue
    }

    func setValue(_ value: Value, at index: Int) {
        if isFault { core?.fulfillFault(self) }
        guard index < values.count, values[index] != value else { return }
        values[index] = value
        if !isInserted { core?.didChange(self) }
    }

    // MARK: Relationships

    /// The destination of a to-one relationship.
    @inlinable
    public func related<T: ManagedObject>(_ name: String, as type: T.Type = T.self) -> T? {
        relatedObject(name) as? T
    }

    /// The destination of a to-one relationship, untyped.
    public func relatedObject(_ name: String) -> ManagedObject? {
        let slot = toOneSlot(name)
        if isFault { core?.fulfillFault(self) }
        return slot < toOne.count ? toOne[slot] : nil
    }

    /// Points a to-one relationship at `object` (or at nothing), keeping the inverse in step.
    public func setRelated(_ object: ManagedObject?, for name: String) {
        guard let core else { return }
        core.setToOne(self, slot: toOneSlot(name), to: object)
    }

    /// The destinations of a to-many relationship (loaded from the store on first use).
    @inlinable
    public func relatedObjects<T: ManagedObject>(_ name: String, as type: T.Type = T.self) -> [T] {
        members(ofRelationship: name).compactMap { $0 as? T }
    }

    /// The destinations of a to-many relationship, untyped; what ``relatedObjects(_:as:)`` casts.
    @usableFromInline
    func members(ofRelationship name: String) -> [ManagedObject] {
        guard let core else { return [] }
        return Array(core.members(of: self, slot: toManySlot(name)))
    }

    /// Adds `object` to a to-many relationship, keeping the inverse in step.
    public func add(_ object: ManagedObject, to name: String) {
        core?.link(self, slot: toManySlot(name), object)
    }

    /// Removes `object` from a to-many relationship, keeping the inverse in step.
    public func remove(_ object: ManagedObject, from name: String) {
        core?.unlink(self, slot: toManySlot(name), object)
    }

    private func toOneSlot(_ name: String) -> Int {
        guard let slot = entity.toOneIndex[name] else {
            preconditionFailure("Entity '\(entity.name)' has no to-one relationship '\(name)'.")
        }
        return slot
    }

    private func toManySlot(_ name: String) -> Int {
        guard let slot = entity.toManyIndex[name] else {
            preconditionFailure("Entity '\(entity.name)' has no to-many relationship '\(name)'.")
        }
        return slot
    }

    // MARK: Changes

    /// Whether the object has unsaved changes (inserted, deleted, or a property differs from
    /// what was last loaded or saved).
    public var hasChanges: Bool { isInserted || isDeleted || !changedKeys.isEmpty }

    /// The row version the object's values come from (0 for an unsaved or unloaded object).
    public var snapshotVersion: Int64 { snapshot?.version ?? 0 }

    /// Whether the object has changed properties and is neither inserted nor deleted.
    public var isUpdated: Bool { !isInserted && !isDeleted && !changedKeys.isEmpty }

    /// The attributes whose values differ from the last loaded or saved ones, with their new
    /// values.
    public var changedValues: [String: Value] {
        var result: [String: Value] = [:]
        for (index, attribute) in entity.attributes.enumerated() where index < values.count {
            if isInserted || snapshot.map({ $0.attributes[index] != values[index] }) ?? true {
                result[attribute.name] = values[index]
            }
        }
        return result
    }

    /// Names of the attributes and relationships changed since the last load or save.
    var changedKeys: [String] {
        if isFault { return [] }
        guard let snapshot, !isInserted else { return entity.attributes.map(\.name) + entity.relationships.map(\.name) }
        var keys: [String] = []
        for index in values.indices where values[index] != snapshot.attributes[index] {
            keys.append(entity.attributes[index].name)
        }
        for index in toOne.indices where toOne[index]?.objectID != snapshot.toOne[index] {
            keys.append(entity.toOneRelationships[index].name)
        }
        for index in toMany.indices where toMany[index].hasChanges {
            keys.append(entity.toManyRelationships[index].name)
        }
        return keys
    }

    /// The current values as a row (attributes and to-one IDs), for saves and child contexts.
    func currentRow(version: Int64) -> RowSnapshot {
        RowSnapshot(version: version, attributes: values, toOne: toOne.map { $0?.objectID })
    }

    /// Forgets the to-many links added and removed since the last save (they were saved or
    /// pushed to a parent).
    func clearPendingLinks() {
        for slot in toMany.indices where toMany[slot].hasChanges {
            toMany[slot].added.removeAll()
            toMany[slot].removed.removeAll()
            toMany[slot].addedRows = 0
        }
    }

    /// Drops values and relationships, turning the object back into a fault.
    func clearStorage() {
        values = []
        toOne = []
        toMany = []
        snapshot = nil
        isFault = true
        faultBatch = nil
    }
}

/// The state of one to-many relationship of one object: the members once loaded, and the links
/// added and removed since the last save (kept even while the members are not loaded, so that
/// maintaining an inverse never has to load a large relationship).
struct ToManyState {
    var members: OrderedSet<ManagedObject>?
    var added: OrderedSet<ManagedObject> = []
    var removed: OrderedSet<ManagedObject> = []
    /// Rows inserted without objects (``ObjectContext/insertRow(_:values:)``) that joined the
    /// relationship: they are not members here, but the relationship changed.
    var addedRows = 0

    var hasChanges: Bool { !added.isEmpty || !removed.isEmpty || addedRows > 0 }

    mutating func insert(_ object: ManagedObject) {
        if members?.contains(object) == true { return }
        if removed.remove(object) == nil { added.append(object) }
        members?.append(object)
    }

    mutating func remove(_ object: ManagedObject) {
        if members != nil, members?.contains(object) != true, !added.contains(object) { return }
        if added.remove(object) == nil { removed.append(object) }
        members?.remove(object)
    }
}

/// Faults fetched together with a batch size: the first one touched fulfils all of them.
final class FaultBatch {
    let objectIDs: [ObjectID]
    init(_ objectIDs: [ObjectID]) { self.objectIDs = objectIDs }
}
