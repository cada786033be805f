import Logging
import OrderedCollections

/// The state and logic of one ``ObjectContext``, confined to that context's actor.
///
/// It is a separate class so that objects can reach it synchronously (to fulfil a fault or to
/// record a change) while the compiler keeps both confined to the actor: neither is `Sendable`,
/// and the only way in is through the actor.
final class ContextCore {
    let coordinator: StoreCoordinator
    let model: ManagedObjectModel
    var mergePolicy: MergePolicy
    /// Whether a save fails when an object it changes was deleted in the store meanwhile,
    /// instead of letting the deletion win (see ``ObjectContext/failsOverStoreDeletions``).
    var failsOverStoreDeletions = false
    let logger: Logger
    /// The parent's unsaved changes as of this child's creation (child contexts only).
    let parentOverlay: ParentOverlay?

    var registered: [ObjectID: ManagedObject] = [:]
    var inserted: OrderedSet<ManagedObject> = []
    var updated: OrderedSet<ManagedObject> = []
    var deleted: OrderedSet<ManagedObject> = []
    /// Rows inserted without objects, in order, and the position of each by its ID (see
    /// ``ObjectContext/insertRow(_:values:)``).
    var rows: [InsertedRow] = []
    var rowIndex: [ObjectID: Int] = [:]
    var liveQueries: [WeakLiveQuery] = []
    /// Newly registered permanent IDs not yet reported to the coordinator.
    private var pendingRegistrations: [ObjectID] = []
    /// Set by a save that retired the context (``saveToStore(retiring:)``): the objects it
    /// inserted were never registered with the coordinator, so a reset must not unregister them.
    var isRetired = false

    /// Whether this context's saves are bulk work (``SaveChanges/isBulk``).
    let savesAreBulk: Bool

    init(
        coordinator: StoreCoordinator, mergePolicy: MergePolicy, parentOverlay: ParentOverlay?, logger: Logger,
        savesAreBulk: Bool = false
    ) {
        self.savesAreBulk = savesAreBulk
        self.coordinator = coordinator
        self.model = coordinator.model
        self.mergePolicy = mergePolicy
        self.parentOverlay = parentOverlay
        self.logger = logger
    }

    deinit { reset() }

    // MARK: Registration

    /// The registered object for an ID, or a new fault for it.
    func object(for id: ObjectID) -> ManagedObject {
        if let object = registered[id] { return object }
        let entity = model.entity(named: id.entityName) ?? model.entities[0]
        let object = entity.objectType.init(entity: entity, objectID: id)
        object.core = self
        registered[id] = object
        if !id.isTemporary { pendingRegistrations.append(id) }
        return object
    }

    /// Reports new registrations to the coordinator in one call.
    func flushRegistrations(rows: [ObjectID: RowSnapshot] = [:]) {
        guard !pendingRegistrations.isEmpty else { return }
        coordinator.register(pendingRegistrations, rows: rows)
        pendingRegistrations.removeAll(keepingCapacity: true)
    }

    /// Forgets an object: it leaves the registry and the change sets and becomes a detached fault.
    func forget(_ object: ManagedObject) {
        registered[object.objectID] = nil
        inserted.remove(object)
        updated.remove(object)
        deleted.remove(object)
        if !object.objectID.isTemporary {
            if let index = pendingRegistrations.lastIndex(of: object.objectID) {
                pendingRegistrations.remove(at: index)
            } else {
                coordinator.unregister([object.objectID])
            }
        }
        object.core = nil
    }

    /// Inserts a new object (with a temporary ID, or the ID a child context already obtained).
    func insert(entity: EntityDescription, objectID: ObjectID? = nil) -> ManagedObject {
        let object = entity.objectType.init(entity: entity, objectID: objectID ?? .temporary(entity: entity.name))
        object.core = self
        object.isFault = false
        object.isInserted = true
        object.values = entity.defaultValues
        object.toOne = Array(repeating: nil, count: entity.toOneRelationships.count)
        object.toMany = Array(repeating: ToManyState(members: []), count: entity.toManyRelationships.count)
        registered[object.objectID] = object
        inserted.append(object)
        return object
    }

    func didChange(_ object: ManagedObject) {
        if !object.isInserted && !object.isDeleted { updated.append(object) }
    }

    // MARK: Faults

    /// Loads an object's values (and those of the rest of its fault batch) in one request.
    func fulfillFault(_ object: ManagedObject) {
        guard object.isFault else { return }
        var ids = [object.objectID]
        if let batch = object.faultBatch {
            ids = batch.objectIDs.filter { registered[$0]?.isFault == true }
        }
        do {
            var rows: [ObjectID: RowSnapshot] = [:]
            var fromStore = ids
            if let overlay = parentOverlay {
                fromStore = []
                for id in ids {
                    if let pending = overlay.rows[id] { rows[id] = pending.row } else { fromStore.append(id) }
                }
            }
            if !fromStore.isEmpty {
                rows.merge(try coordinator.rows(for: fromStore)) { a, _ in a }
            }
            for id in ids {
                guard let target = registered[id], target.isFault else { continue }
                if let row = rows[id] {
                    apply(row, to: target)
                } else {
                    fail(
                        target,
                        GraphError(
                            .objectNotFound,
                            "\(id) has no row in the store: it was deleted, or never saved.",
                            advice: "Drop the object, or fetch again."
                        ))
                }
            }
            flushRegistrations()
        } catch {
            fail(
                object, error as? GraphError ?? GraphError(.storeIO, "Could not load \(object.objectID).", cause: error)
            )
        }
    }

    private func fail(_ object: ManagedObject, _ error: GraphError) {
        logger.debug(
            "fault could not be fulfilled", metadata: ["object.id": "\(object.objectID)", "error": "\(error)"])
        object.faultError = error
        object.isFault = false
        object.values = object.entity.defaultValues
        object.toOne = Array(repeating: nil, count: object.entity.toOneRelationships.count)
        object.toMany = Array(repeating: ToManyState(members: []), count: object.entity.toManyRelationships.count)
        object.snapshot = RowSnapshot(version: 0, attributes: object.values, toOne: object.toOne.map { _ in nil })
    }

    /// Makes `row` the object's committed and current values.
    func apply(_ row: RowSnapshot, to object: ManagedObject) {
        object.values = row.attributes
        object.toOne = row.toOne.map { $0.map(self.object(for:)) }
        object.toMany = Array(repeating: ToManyState(), count: object.entity.toManyRelationships.count)
        object.snapshot = row
        object.isFault = false
        object.faultError = nil
        object.faultBatch = nil
    }

    /// Turns an object back into a fault, discarding its changes.
    func turnIntoFault(_ object: ManagedObject) {
        updated.remove(object)
        object.clearStorage()
    }

    // MARK: Relationships

    func members(of object: ManagedObject, slot: Int) -> OrderedSet<ManagedObject> {
        if object.isFault { fulfillFault(object) }
        guard slot < object.toMany.count else { return [] }
        if let members = object.toMany[slot].members { return members }
        let relationship = object.entity.toManyRelationships[slot]
        var members: OrderedSet<ManagedObject> = []
        if !object.objectID.isTemporary {
            do {
                let ids = try coordinator.destinations(ofRelationship: relationship.name, of: object.objectID)
                members = OrderedSet(ids.map(self.object(for:)))
                if let pending = parentOverlay?.rows[object.objectID] {
                    members.subtract(pending.removed[relationship.name, default: []].map(self.object(for:)))
                    members.append(contentsOf: pending.added[relationship.name, default: []].map(self.object(for:)))
                }
                flushRegistrations()
            } catch {
                logger.warning(
                    "to-many relationship could not be loaded",
                    metadata: [
                        "object.id": "\(object.objectID)", "relationship": "\(relationship.name)", "error": "\(error)",
                    ])
            }
        }
        // Deleted objects leave relationships; unsaved links are applied on top.
        members.subtract(object.toMany[slot].removed)
        members.append(contentsOf: object.toMany[slot].added)
        members.removeAll { $0.isDeleted }
        object.toMany[slot].members = members
        return members
    }

    func setToOne(_ object: ManagedObject, slot: Int, to target: ManagedObject?) {
        if object.isFault { fulfillFault(object) }
        guard slot < object.toOne.count else { return }
        let old = object.toOne[slot]
        if old === target { return }
        let relationship = object.entity.toOneRelationships[slot]
        precondition(
            target == nil || target!.entity.name == relationship.destination,
            "'\(object.entity.name).\(relationship.name)' takes \(relationship.destination) objects, not \(target!.entity.name)."
        )
        object.toOne[slot] = target
        didChange(object)
        guard let inverse = model.inverse(ofToOne: slot, in: object.entity) else { return }
        let inverseSlot = inverse.slot
        if inverse.relationship.isToMany {
            if let old { changeMembers(of: old, slot: inverseSlot) { $0.remove(object) } }
            if let target { changeMembers(of: target, slot: inverseSlot) { $0.insert(object) } }
        } else {
            if let old { rawSetToOne(old, slot: inverseSlot, nil) }
            if let target, target.entity === inverse.entity {
                if target.isFault { fulfillFault(target) }
                if inverseSlot < target.toOne.count, let previous = target.toOne[inverseSlot], previous !== object {
                    rawSetToOne(previous, slot: slot, nil)
                }
                rawSetToOne(target, slot: inverseSlot, object)
            }
        }
    }

    private func rawSetToOne(_ object: ManagedObject, slot: Int, _ target: ManagedObject?) {
        if object.isFault { fulfillFault(object) }
        guard slot < object.toOne.count, object.toOne[slot] !== target else { return }
        object.toOne[slot] = target
        didChange(object)
    }

    /// Changes a to-many relationship's state without loading it, and marks the object changed.
    func changeMembers(of object: ManagedObject, slot: Int, _ change: (inout ToManyState) -> Void) {
        if object.isFault { fulfillFault(object) }
        guard slot < object.toMany.count else { return }
        change(&object.toMany[slot])
        didChange(object)
    }

    func link(_ object: ManagedObject, slot: Int, _ target: ManagedObject) {
        if object.isFault { fulfillFault(object) }
        guard let inverse = model.inverse(ofToMany: slot, in: object.entity) else { return }
        if inverse.relationship.isToMany {
            changeMembers(of: object, slot: slot) { $0.insert(target) }
            changeMembers(of: target, slot: inverse.slot) { $0.insert(object) }
        } else {
            setToOne(target, slot: inverse.slot, to: object)
        }
    }

    func unlink(_ object: ManagedObject, slot: Int, _ target: ManagedObject) {
        if object.isFault { fulfillFault(object) }
        guard let inverse = model.inverse(ofToMany: slot, in: object.entity) else { return }
        if inverse.relationship.isToMany {
            changeMembers(of: object, slot: slot) { $0.remove(target) }
            changeMembers(of: target, slot: inverse.slot) { $0.remove(object) }
        } else if target.relatedObject(inverse.relationship.name) === object {
            setToOne(target, slot: inverse.slot, to: nil)
        }
    }

    // MARK: Delete

    /// Deletes an object and applies its relationships' delete rules (deny is checked on save).
    func delete(_ object: ManagedObject) {
        guard !object.isDeleted, object.core === self else { return }
        if object.isFault { fulfillFault(object) }
        object.isDeleted = true
        updated.remove(object)
        if object.isInserted {
            inserted.remove(object)
        } else {
            deleted.append(object)
        }
        for relationship in object.entity.relationships where relationship.deleteRule != .deny {
            let targets: [ManagedObject]
            if relationship.isToMany {
                targets = Array(members(of: object, slot: object.entity.toManyIndex[relationship.name]!))
            } else {
                targets = object.toOne[object.entity.toOneIndex[relationship.name]!].map { [$0] } ?? []
            }
            for target in targets where !target.isDeleted {
                if relationship.deleteRule == .cascade {
                    delete(target)
                } else if let inverseEntity = model.entity(named: relationship.destination),
                    let inverse = inverseEntity.relationship(named: relationship.inverse)
                {
                    if inverse.isToMany {
                        changeMembers(of: target, slot: inverseEntity.toManyIndex[inverse.name]!) { $0.remove(object) }
                    } else {
                        rawSetToOne(target, slot: inverseEntity.toOneIndex[inverse.name]!, nil)
                    }
                }
            }
        }
        if object.isInserted {
            object.isInserted = false
            registered[object.objectID] = nil
        }
    }

    // MARK: Change sets

    var hasChanges: Bool {
        !inserted.isEmpty || !rows.isEmpty || !deleted.isEmpty || updated.contains { !$0.changedKeys.isEmpty }
    }

    /// Inserted, updated (with real differences) and deleted objects.
    func pendingChanges() -> (inserted: [ManagedObject], updated: [ManagedObject], deleted: [ManagedObject]) {
        (Array(inserted), updated.filter { !$0.isDeleted && !$0.changedKeys.isEmpty }, Array(deleted))
    }

    /// See ``ObjectContext/reserveCapacity(_:rows:)``.
    func reserveCapacity(_ count: Int, rows rowCount: Int) {
        registered.reserveCapacity(registered.count + count)
        inserted.reserveCapacity(inserted.count + count)
        guard rowCount > 0 else { return }
        rows.reserveCapacity(rows.count + rowCount)
        rowIndex.reserveCapacity(rowIndex.count + rowCount)
    }

    /// Forgets every object: registrations end, objects become detached faults.
    func reset() {
        // Read before the objects are cleared below.
        let ids = registered.values
            .filter { !$0.objectID.isTemporary && !(isRetired && $0.isInserted) }
            .map(\.objectID)
        for object in registered.values {
            object.clearStorage()
            object.core = nil
        }
        registered.removeAll()
        inserted.removeAll()
        updated.removeAll()
        deleted.removeAll()
        dropRows()
        let reported = Set(pendingRegistrations)
        pendingRegistrations.removeAll()
        coordinator.unregister(ids.filter { !reported.contains($0) })
    }

    /// Discards every unsaved change.
    func rollback() {
        for object in inserted {
            registered[object.objectID] = nil
            object.clearStorage()
            object.core = nil
            object.isInserted = false
        }
        for object in deleted { object.isDeleted = false }
        for object in OrderedSet(updated).union(deleted) { object.clearStorage() }
        inserted.removeAll()
        updated.removeAll()
        deleted.removeAll()
        dropRows()
    }
}

/// A weak reference to a live query, so that a context does not keep dropped queries alive.
struct WeakLiveQuery {
    weak var query: (any LiveQueryUpdating)?
}
