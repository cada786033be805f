import Synchronization

/// Routes a context's requests to its store and keeps the row cache — Core Data's
/// `NSPersistentStoreCoordinator`. The cache holds the values and version of each object its
/// contexts registered, so a second context faulting it does not go back to the store; entries
/// are counted by registrations (forwarded to ``IncrementalStore/didRegister(_:)``), so memory
/// follows what contexts hold.
///
/// ```swift
/// let context = ObjectContext(coordinator: try StoreCoordinator(model: model, store: InMemoryStore()))
/// ```
public final class StoreCoordinator: Sendable {
    /// The model the store was opened with.
    public let model: ManagedObjectModel
    /// The store.
    public let store: any IncrementalStore
    /// The store's metadata, read when the coordinator was created.
    public let metadata: StoreMetadata

    private struct CacheEntry {
        var snapshot: RowSnapshot?
        var references: Int
    }

    /// The row cache, serialized by its mutex.
    private let cache = Mutex<[ObjectID: CacheEntry]>([:])

    /// The token of the last save through this coordinator: its did-save is already absorbed.
    private let lastSavedToken = Atomic<Int64>(0)

    /// Merge conflicts that contexts of this coordinator resolved with their merge policy.
    private let resolvedConflicts = Atomic<Int>(0)

    /// Opens `store` for `model`.
    ///
    /// - Throws: what ``IncrementalStore/loadMetadata(for:)`` throws (incompatible model, damaged
    ///   store).
    public init(model: ManagedObjectModel, store: any IncrementalStore) throws {
        self.model = model
        self.store = store
        self.metadata = try store.loadMetadata(for: model)
    }

    /// The store's identifier, part of every permanent object ID.
    public var storeIdentifier: String { metadata.storeIdentifier }

    /// The permanent object ID a URI names in this coordinator's store, like Core Data's
    /// `managedObjectID(forURIRepresentation:)`: `nil` when the URI is not an object ID, names a
    /// temporary one, another store (a store that was recreated has a new identifier), or an
    /// entity the model does not have.
    public func managedObjectID(forURIRepresentation uri: String) -> ObjectID? {
        guard let id = ObjectID(uri: uri), !id.isTemporary, id.storeIdentifier == storeIdentifier,
            model.entity(named: id.entityName) != nil
        else { return nil }
        return id
    }

    // MARK: Requests

    /// Executes a fetch.
    public func fetch(_ request: FetchDescription) throws -> StoreFetchResult {
        guard case .fetched(let result) = try store.execute(request) else {
            throw GraphError(.storeIO, "\(store.storeType) store answered a fetch with a save result.")
        }
        return result
    }

    /// Executes a save, then brings the row cache up to date with it.
    public func save(_ changes: SaveChanges) throws -> DidSave {
        guard case .saved(let didSave) = try store.execute(changes) else {
            throw GraphError(.storeIO, "\(store.storeType) store answered a save with a fetch result.")
        }
        absorb(didSave)
        lastSavedToken.store(didSave.token.rawValue, ordering: .relaxed)
        return didSave
    }

    /// Executes any request (for stores that support more than fetch and save).
    public func execute(_ request: any StoreRequest) throws -> StoreResult {
        try store.execute(request)
    }

    /// Values for these objects: from the cache where it has them, the rest from the store in one
    /// request. IDs without a row are absent.
    public func rows(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        var result: [ObjectID: RowSnapshot] = [:]
        var missing: [ObjectID] = []
        cache.withLock { cache in
            for id in objectIDs {
                if let snapshot = cache[id]?.snapshot { result[id] = snapshot } else { missing.append(id) }
            }
        }
        guard !missing.isEmpty else { return result }
        let loaded = try store.newValues(for: missing)
        cache.withLock { cache in
            for (id, snapshot) in loaded {
                result[id] = snapshot
                cache[id]?.snapshot = snapshot
            }
        }
        return result
    }

    /// The destinations of a to-many relationship.
    public func destinations(ofRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        try store.newValue(forRelationship: name, of: objectID)
    }

    /// Permanent IDs for temporary ones, in order.
    public func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        guard !objectIDs.isEmpty else { return [] }
        let ids = try store.obtainPermanentIDs(for: objectIDs)
        guard ids.count == objectIDs.count else {
            throw GraphError(
                .storeIO, "\(store.storeType) store returned \(ids.count) permanent IDs for \(objectIDs.count) objects."
            )
        }
        return ids
    }

    /// The did-saves committed after `token`.
    public func changes(after token: HistoryToken, limit: Int = 1_000) throws -> [DidSave] {
        try store.changes(after: token, limit: limit)
    }

    // MARK: Registration and cache

    /// A context registered these objects; `rows` primes the cache with values it already has.
    public func register(_ objectIDs: [ObjectID], rows: [ObjectID: RowSnapshot] = [:]) {
        let permanent = objectIDs.filter { !$0.isTemporary }
        guard !permanent.isEmpty else { return }
        cache.withLock { cache in
            for id in permanent {
                cache[id, default: CacheEntry(snapshot: nil, references: 0)].references += 1
                if let row = rows[id] { cache[id]?.snapshot = row }
            }
        }
        store.didRegister(permanent)
    }

    /// A context let go of these objects.
    public func unregister(_ objectIDs: [ObjectID]) {
        let permanent = objectIDs.filter { !$0.isTemporary }
        guard !permanent.isEmpty else { return }
        cache.withLock { cache in
            for id in permanent {
                guard var entry = cache[id] else { continue }
                entry.references -= 1
                cache[id] = entry.references > 0 ? entry : nil
            }
        }
        store.didUnregister(permanent)
    }

    /// Stores a row's values for registered objects (after a context read them elsewhere).
    func prime(_ rows: [ObjectID: RowSnapshot]) {
        cache.withLock { cache in
            for (id, row) in rows where cache[id] != nil {
                if (cache[id]?.snapshot?.version ?? 0) <= row.version { cache[id]?.snapshot = row }
            }
        }
    }

    /// Brings cached rows up to date with a did-save from any coordinator: newer versions replace
    /// the cached values when the did-save carries them and evict them otherwise; deletions evict.
    public func absorb(_ didSave: DidSave) {
        // A context merging a save of its own coordinator (an importer merging the previous
        // chunk's did-save) finds it absorbed already.
        if didSave.token != .zero, didSave.token.rawValue == lastSavedToken.load(ordering: .relaxed) { return }
        cache.withLock { cache in
            guard !cache.isEmpty else { return }
            for changes in [didSave.inserted, didSave.updated] {
                for change in changes {
                    guard let entry = cache[change.objectID] else { continue }
                    if (entry.snapshot?.version ?? 0) < change.version {
                        cache[change.objectID]?.snapshot = change.values
                    }
                }
            }
            for change in didSave.deleted where cache[change.objectID] != nil {
                cache[change.objectID]?.snapshot = nil
            }
        }
    }

    /// How many objects the cache holds references for (for tests and memory reports).
    public var cachedObjectCount: Int { cache.withLock { $0.count } }

    /// How many save conflicts (an object changed in the store since a context loaded it)
    /// contexts of this coordinator have resolved with their merge policy so far.
    public var resolvedConflictCount: Int { resolvedConflicts.load(ordering: .relaxed) }

    /// Counts conflicts a context resolved with its merge policy.
    func noteResolvedConflicts(_ count: Int) {
        resolvedConflicts.add(count, ordering: .relaxed)
    }
}
