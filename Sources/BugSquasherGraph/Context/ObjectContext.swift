public import Logging
import Synchronization

/// A scratchpad of objects — Core Data's `NSManagedObjectContext` — and an actor whose objects never
/// leave it (they are not `Sendable`): work with them in ``perform(_:)``, pass ``ObjectID``s between
/// contexts, and ``save()`` to the store or, for a child context, into its parent.
///
/// ```swift
/// try await context.perform { context in context.insert(Bug.self).key = "TIMOB-1" }
/// try await context.save()
/// ```
public actor ObjectContext {
    /// A name for logs and debugging.
    public let name: String
    /// The coordinator this context (or its root parent) saves through.
    public nonisolated let coordinator: StoreCoordinator
    /// The parent context, for a child context.
    public nonisolated let parent: ObjectContext?

    let core: ContextCore
    private let readOnlyReason = Mutex<String?>(nil)
    private let didSaveHandler: (@Sendable (DidSave) async -> Void)?

    /// Creates a context on a coordinator, whose store it reads and saves to.
    ///
    /// - Parameters:
    ///   - coordinator: the coordinator whose store the context reads and saves to.
    ///   - mergePolicy: how a save resolves conflicts with changes saved meanwhile.
    ///   - name: a name for logs and messages.
    ///   - logger: where the context logs (at info and below).
    ///   - savesAreBulk: whether the context's saves are bulk work, such as an import's chunks
    ///     (see ``EditsFirst``).
    ///   - didSave: called after each save that reached the store, with its did-save (a stack
    ///     uses it to merge the save into its main context).
    public init(
        coordinator: StoreCoordinator,
        mergePolicy: MergePolicy = .error,
        name: String = "context",
        logger: Logger = Logger(label: "bugsquasher.graph"),
        savesAreBulk: Bool = false,
        didSave: (@Sendable (DidSave) async -> Void)? = nil
    ) {
        self.name = name
        self.coordinator = coordinator
        self.parent = nil
        self.didSaveHandler = didSave
        var logger = logger
        logger[metadataKey: "context"] = "\(name)"
        self.core = ContextCore(
            coordinator: coordinator, mergePolicy: mergePolicy, parentOverlay: nil, logger: logger,
            savesAreBulk: savesAreBulk)
    }

    private init(parent: ObjectContext, overlay: ParentOverlay, mergePolicy: MergePolicy, name: String, logger: Logger)
    {
        self.name = name
        self.coordinator = parent.coordinator
        self.parent = parent
        self.didSaveHandler = nil
        self.core = ContextCore(
            coordinator: parent.coordinator, mergePolicy: mergePolicy, parentOverlay: overlay, logger: logger)
    }

    /// Runs `body` on this context's executor, with synchronous access to the context and its
    /// objects. Return IDs or values, never objects.
    public func perform<T: Sendable>(_ body: @Sendable (isolated ObjectContext) throws -> T) rethrows -> T {
        try body(self)
    }

    /// Creates a child context whose saves push into this context. The child sees this
    /// context's unsaved changes as they are now, and the store's state for everything else.
    public func newChildContext(mergePolicy: MergePolicy = .mergeByPropertyObjectTrump, name: String = "child")
        -> ObjectContext
    {
        ObjectContext(
            parent: self, overlay: core.overlayForChild(), mergePolicy: mergePolicy, name: name, logger: core.logger)
    }

    // MARK: Settings

    /// How conflicts with newer saved values are resolved.
    public var mergePolicy: MergePolicy {
        get { core.mergePolicy }
        set { core.mergePolicy = newValue }
    }

    /// Sets the merge policy.
    public func setMergePolicy(_ policy: MergePolicy) { core.mergePolicy = policy }

    /// Whether a save fails with ``GraphError/Code/mergeConflict`` when an object it changes
    /// was deleted in the store meanwhile. By default (`false`) the deletion wins under every
    /// merge policy and the object's changes are dropped, as in Core Data; an importer sets it,
    /// since each of its records must end up saved or rejected, and saves the record again.
    public var failsOverStoreDeletions: Bool {
        get { core.failsOverStoreDeletions }
        set { core.failsOverStoreDeletions = newValue }
    }

    /// Refuses every save with ``GraphError/Code/readOnly`` and this reason; `nil` allows saves.
    public nonisolated func refuseSaves(because reason: String?) {
        readOnlyReason.withLock { $0 = reason }
    }

    /// Whether saves are refused.
    public nonisolated var isReadOnly: Bool { readOnlyReason.withLock { $0 != nil } }

    // MARK: Objects

    /// Inserts a new object of an entity's class.
    public func insert<T: ManagedObject>(_ type: T.Type) -> T {
        let entity = core.model.entity(named: T.entityName)
        precondition(entity != nil, "The model has no entity '\(T.entityName)' for \(T.self).")
        return core.insert(entity: entity!) as! T
    }

    /// Makes room for about `count` more registered objects and `rows` more inserted rows (see
    /// ``insertRow(_:values:)``), as a bulk upsert does before it inserts or fetches a chunk's
    /// worth: the context's tables are then not grown (and rehashed) step by step as the objects
    /// arrive.
    public func reserveCapacity(_ count: Int, rows: Int = 0) { core.reserveCapacity(count, rows: rows) }

    /// Inserts a new object of the named entity.
    public func insert(entityNamed name: String) throws -> ManagedObject {
        core.insert(entity: try core.model.requireEntity(name))
    }

    /// Deletes an object, applying its relationships' delete rules.
    public func delete(_ object: ManagedObject) { core.delete(object) }

    /// The object for an ID: the registered one, or a new fault (no I/O).
    public func object(with id: ObjectID) -> ManagedObject {
        let object = core.object(for: id)
        core.flushRegistrations()
        return object
    }

    /// The object for an ID, loaded; throws when the store has no such row.
    public func existingObject(with id: ObjectID) throws -> ManagedObject {
        try core.existingObject(with: id)
    }

    /// The objects registered in this context (faults included).
    public var registeredObjects: [ManagedObject] { Array(core.registered.values) }
    /// The IDs of the registered objects.
    public var registeredObjectIDs: Set<ObjectID> { Set(core.registered.keys) }
    /// The registered object for an ID, if any (never loads or registers anything).
    public func registeredObject(for id: ObjectID) -> ManagedObject? { core.registered[id] }
    /// Objects inserted and not saved.
    public var insertedObjects: [ManagedObject] { Array(core.inserted) }
    /// Objects with unsaved changes to their properties.
    public var updatedObjects: [ManagedObject] { core.pendingChanges().updated }
    /// Objects deleted and not saved.
    public var deletedObjects: [ManagedObject] { Array(core.deleted) }
    /// Whether saving `object` writes more than its version: it is inserted or deleted, or an
    /// attribute, a to-one relationship or a many-to-many relationship it owns changed. A change
    /// to the to-many side of a one-to-many relationship is stored on the other objects' rows, so
    /// alone it only makes the save bump this object's version. Importers that prepare chunks
    /// ahead use it to tell which objects a later chunk must not read before this save commits.
    public func writesStoredValues(of object: ManagedObject) -> Bool { core.writesStoredValues(of: object) }
    /// Whether there is anything to save.
    public var hasChanges: Bool { core.hasChanges }

    // MARK: Rows

    /// Inserts an object of `entity` as a row, without a managed object, and returns its ID:
    /// for bulk imports of new objects the context does not read again, as Core Data's
    /// `NSBatchInsertRequest`. `values` are the entity's attributes in the order of
    /// ``EntityDescription/attributes`` (start from ``EntityDescription/defaultValues``). The
    /// next save inserts the row like an inserted object (validated, a permanent ID, in the
    /// did-save); until then no fetch or relationship of this context shows it, and its ID is
    /// temporary. Root contexts only.
    ///
    /// Why: docs/DESIGN-NOTES.md, "New bugs are inserted as rows".
    public func insertRow(_ entity: EntityDescription, values: [Value]) -> ObjectID {
        core.insertRow(entity: entity, values: values)
    }

    /// Points the to-one `relationship` of the row `row` (from ``insertRow(_:values:)``) at
    /// `object`, an object of this context, or at nothing. The object's to-many inverse does not
    /// list the row, but counts as changed: the save bumps its version and its did-save names
    /// the relationship, as for an inserted object. The relationship's inverse must be to-many.
    public func setToOne(ofRow row: ObjectID, _ relationship: String, to object: ManagedObject?) {
        setToOne(ofRow: row, toOneSlot: toOneSlot(relationship, ofRow: row), to: object)
    }

    /// Points the to-one `relationship` of the row `row` at another row, `target`, both from
    /// ``insertRow(_:values:)`` (a new comment at its new bug).
    public func setToOne(ofRow row: ObjectID, _ relationship: String, toRow target: ObjectID) {
        setToOne(ofRow: row, toOneSlot: toOneSlot(relationship, ofRow: row), toRow: target)
    }

    /// ``setToOne(ofRow:_:to:)`` with the relationship given by its position in the row
    /// entity's ``EntityDescription/toOneRelationships`` (from ``EntityDescription/toOneIndex``):
    /// looked up once for a chunk of rows rather than by name for each.
    public func setToOne(ofRow row: ObjectID, toOneSlot slot: Int, to object: ManagedObject?) {
        precondition(object.map { $0.core === core } ?? true, "\(object!.objectID) is an object of another context.")
        core.setToOne(ofRow: row, slot: slot, to: object.map(RowTarget.object))
    }

    /// ``setToOne(ofRow:_:toRow:)`` with the relationship given by its position, as in
    /// ``setToOne(ofRow:toOneSlot:to:)``.
    public func setToOne(ofRow row: ObjectID, toOneSlot slot: Int, toRow target: ObjectID) {
        core.setToOne(ofRow: row, slot: slot, to: core.rowTarget(target))
    }

    private func toOneSlot(_ relationship: String, ofRow row: ObjectID) -> Int {
        guard let slot = coordinator.model.entity(named: row.entityName)?.toOneIndex[relationship] else {
            preconditionFailure("Entity '\(row.entityName)' has no to-one relationship '\(relationship)'.")
        }
        return slot
    }

    /// Adds `object` to the many-to-many `relationship` of the row `row` (from
    /// ``insertRow(_:values:)``), whose links the row's entity keeps; adding it twice adds it
    /// once. The object counts as changed, as in ``setToOne(ofRow:_:to:)``.
    public func add(_ object: ManagedObject, toRow row: ObjectID, _ relationship: String) {
        guard let slot = coordinator.model.entity(named: row.entityName)?.toManyIndex[relationship] else {
            preconditionFailure("Entity '\(row.entityName)' has no to-many relationship '\(relationship)'.")
        }
        add(object, toRow: row, toManySlot: slot)
    }

    /// ``add(_:toRow:_:)`` with the relationship given by its position in the row entity's
    /// ``EntityDescription/toManyRelationships`` (from ``EntityDescription/toManyIndex``).
    public func add(_ object: ManagedObject, toRow row: ObjectID, toManySlot slot: Int) {
        core.add(object, toRow: row, slot: slot)
    }

    /// Whether `id` names a row inserted with ``insertRow(_:values:)`` and not saved yet.
    public func isInsertedRow(_ id: ObjectID) -> Bool { core.rowIndex[id] != nil }

    /// The rows inserted with ``insertRow(_:values:)`` and not saved yet: each one's entity and
    /// values.
    public var insertedRows: [(entity: EntityDescription, values: [Value])] {
        core.rows.map { ($0.entity, $0.values) }
    }

    // MARK: Fetching

    /// Fetches objects (faults unless the request prefetches).
    public func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] { try core.fetch(request) }
    /// Counts matching objects.
    public func count<T: ManagedObject>(_ request: FetchRequest<T>) throws -> Int { try core.count(request) }
    /// Fetches matching IDs only; registers and loads nothing.
    public func fetchObjectIDs<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ObjectID] {
        try core.fetchIDs(request)
    }

    /// A live query over this context (see ``LiveQuery``).
    public func liveQuery<T: ManagedObject>(_ request: FetchRequest<T>) throws -> LiveQuery<T> {
        let query = LiveQuery(request: request, core: core)
        try query.performFetch()
        core.liveQueries.append(WeakLiveQuery(query: query))
        return query
    }

    // MARK: Saving

    /// Saves: to the store for a root context, into the parent for a child context.
    ///
    /// Conflicts with newer versions in the store are resolved by the ``mergePolicy``; under
    /// `.error` the save throws ``GraphError/Code/mergeConflict`` listing them all. An empty save
    /// does nothing and returns `nil`.
    ///
    /// - Returns: the did-save of a save that reached the store.
    @discardableResult
    public func save() async throws -> DidSave? {
        try await save(retiring: false)
    }

    /// Saves like ``save()`` a root context that is dropped right after, as an importer drops
    /// each chunk's context (Core Data's save-then-`reset()`): the inserted objects are not
    /// given snapshots or registered with the coordinator's row cache, work that dropping them
    /// would undo at once. The context refuses further saves, and its inserted objects must not
    /// be used again; the did-save is reported and merged as usual.
    @discardableResult
    public func saveAndRetire() async throws -> DidSave? {
        guard parent == nil else {
            throw GraphError(
                .invalidArgument,
                "Context '\(name)' is a child context; only a root context can be retired by its save.")
        }
        return try await save(retiring: true)
    }

    private func save(retiring: Bool) async throws -> DidSave? {
        if let reason = readOnlyReason.withLock({ $0 }) {
            throw GraphError(.readOnly, "Context '\(name)' refuses saves: \(reason)")
        }
        if let parent {
            guard let changes = try core.changesForParent() else { return nil }
            await parent.absorb(changes)
            return nil
        }
        let saved = try core.saveToStore(retiring: retiring)
        if retiring, saved != nil { refuseSaves(because: "it was retired by saveAndRetire()") }
        guard let didSave = saved else { return nil }
        core.logger.debug(
            "saved",
            metadata: [
                "token": "\(didSave.token)", "inserted": "\(didSave.inserted.count)",
                "updated": "\(didSave.updated.count)", "deleted": "\(didSave.deleted.count)",
            ])
        if let didSaveHandler { await didSaveHandler(didSave) }
        return didSave
    }

    /// Saves this context and then each parent up to the store.
    @discardableResult
    public func saveToPersistentStore() async throws -> DidSave? {
        let didSave = try await save()
        guard let parent else { return didSave }
        return try await parent.saveToPersistentStore()
    }

    /// Saves to the store synchronously, inside ``perform(_:)``: for root contexts only, and
    /// without calling the `didSave` handler (use ``save()`` to have a stack merge the save).
    @discardableResult
    public func saveToStore() throws -> DidSave? {
        if let reason = readOnlyReason.withLock({ $0 }) {
            throw GraphError(.readOnly, "Context '\(name)' refuses saves: \(reason)")
        }
        guard parent == nil else {
            throw GraphError(
                .invalidArgument,
                "Context '\(name)' is a child context.", advice: "Call save() to push its changes into its parent.")
        }
        return try core.saveToStore()
    }

    func absorb(_ changes: ChildChanges) { core.absorb(changes) }

    /// Discards every unsaved change.
    public func rollback() { core.rollback() }

    /// Forgets every object; held objects become detached faults.
    public func reset() { core.reset() }

    /// Re-reads an object (see Core Data's `refresh(_:mergeChanges:)`).
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
        try core.refresh(object, mergeChanges: mergeChanges)
    }

    /// Merges a did-save from another context or process: refreshes only registered objects
    /// (updated ones per the merge policy, deleted ones become deleted) and loads nothing else.
    /// Inserted objects are offered to live queries.
    @discardableResult
    public func merge(_ didSave: DidSave) -> MergeResult { core.merge(didSave) }
}
