public import Foundation
import Synchronization

/// An incremental store that keeps everything in memory: for tests, previews and caches.
///
/// It implements the whole ``IncrementalStore`` contract with the same semantics as SQLiteStore
/// (optimistic locking, unique keys, history), so the same test suite runs against both.
///
/// ```swift
/// let coordinator = try StoreCoordinator(model: model, store: InMemoryStore())
/// ```
public final class InMemoryStore: IncrementalStore, CommitObservable {
    public var storeType: String { "InMemory" }

    private struct State {
        var metadata: StoreMetadata?
        var model: ManagedObjectModel?
        var tables: [String: [Int64: RowSnapshot]] = [:]
        var links: Set<LinkKey> = []
        var nextKey: [String: Int64] = [:]
        var history: [DidSave] = []
        var registrations: [ObjectID: Int] = [:]
    }

    private struct LinkKey: Hashable {
        var entity: String
        var relationship: String
        var source: Int64
        var destination: Int64
    }

    private let state = Mutex(State())
    private let identifier: String
    private let commitHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])

    public func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void) {
        commitHandlers.withLock { $0.append(handler) }
    }

    /// Creates an empty store with a new identifier.
    public init(identifier: String = UUID().uuidString) {
        self.identifier = identifier
    }

    public func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata {
        try state.withLock { state in
            if let metadata = state.metadata, let existing = state.model {
                let migration = try ModelMigration.plan(from: existing.schema, to: model)
                for (entity, attributes) in migration.addedAttributes {
                    guard let newEntity = model.entity(named: entity) else { continue }
                    state.tables[entity] = state.tables[entity]?.mapValues { row in
                        var row = row
                        var values: [Value] = []
                        var old = Dictionary(
                            uniqueKeysWithValues: zip(
                                existing.entity(named: entity)!.attributes.map(\.name), row.attributes))
                        for attribute in attributes { old[attribute.name] = attribute.defaultValue }
                        for attribute in newEntity.attributes {
                            values.append(old[attribute.name] ?? attribute.defaultValue)
                        }
                        row.attributes = values
                        return row
                    }
                }
                state.model = model
                state.metadata?.modelVersionHash = model.versionHash
                return state.metadata ?? metadata
            }
            let metadata = StoreMetadata(
                storeIdentifier: identifier, storeType: storeType, modelVersionHash: model.versionHash)
            state.metadata = metadata
            state.model = model
            return metadata
        }
    }

    public func execute(_ request: any StoreRequest) throws -> StoreResult {
        switch request {
        case let fetch as FetchDescription: return .fetched(try self.fetch(fetch))
        case let save as SaveChanges: return .saved(try self.save(save))
        default: throw unsupported(request)
        }
    }

    private func fetch(_ request: FetchDescription) throws -> StoreFetchResult {
        try state.withLock { state in
            guard let model = state.model, let metadata = state.metadata else { throw notLoaded() }
            let entity = try model.requireEntity(request.entityName)
            for path in (request.predicate?.keyPaths ?? []).union(request.sort.map(\.keyPath)) {
                try Self.checkKeyPath(path, from: entity, model: model)
            }
            let predicate = request.predicate ?? .all
            var matches: [(Int64, Reader)] = []
            for (key, row) in state.tables[entity.name, default: [:]] {
                let reader = Reader(entity: entity, row: row, state: state, model: model)
                if predicate.evaluate(on: reader) { matches.append((key, reader)) }
            }
            matches.sort { lhs, rhs in
                if request.sort.orders(lhs.1, before: rhs.1) { return true }
                if request.sort.orders(rhs.1, before: lhs.1) { return false }
                return lhs.0 < rhs.0
            }
            let start = min(request.offset, matches.count)
            let end = request.limit.map { min(matches.count, start + $0) } ?? matches.count
            let page = matches[start..<end]
            let id = { (key: Int64) in ObjectID(store: metadata.storeIdentifier, entity: entity.name, primaryKey: key) }
            switch request.resultType {
            case .count: return .count(page.count)
            case .objectIDs: return .objectIDs(page.map { id($0.0) })
            case .rows: return .rows(page.map { StoreRow(objectID: id($0.0), snapshot: $0.1.row) })
            }
        }
    }

    private func save(_ changes: SaveChanges) throws -> DidSave {
        let handlers = commitHandlers.withLock { $0 }
        return try state.withLock { state in
            guard let model = state.model, let metadata = state.metadata else { throw notLoaded() }
            let conflicts = Self.conflicts(of: changes, in: state)
            guard conflicts.isEmpty else {
                throw GraphError.staleObjects(conflicts)
            }
            var next = state
            var didSave = DidSave(
                token: HistoryToken(rawValue: Int64(state.history.count + 1)), storeIdentifier: metadata.storeIdentifier
            )
            try Self.apply(changes, to: &next, recording: &didSave, model: model)
            Self.applyLinks(of: changes, to: &next)
            try Self.checkUniqueKeys(in: next, changes: changes, model: model)
            next.history.append(didSave.withoutValues)
            state = next
            // Still under the store's lock: observers see saves in token order.
            for handler in handlers { handler(didSave) }
            return didSave
        }
    }

    /// The rows a save updates or deletes that changed in `state` since the context loaded them.
    private static func conflicts(of changes: SaveChanges, in state: State) -> [MergeConflict] {
        var conflicts: [MergeConflict] = []
        for row in changes.updated {
            let current = state.tables[row.objectID.entityName]?[row.objectID.key]
            if current?.version != row.expectedVersion {
                conflicts.append(
                    MergeConflict(objectID: row.objectID, cachedVersion: row.expectedVersion, persisted: current))
            }
        }
        for deletion in changes.deleted {
            let current = state.tables[deletion.objectID.entityName]?[deletion.objectID.key]
            if let current, current.version != deletion.expectedVersion {
                conflicts.append(
                    MergeConflict(
                        objectID: deletion.objectID, cachedVersion: deletion.expectedVersion, persisted: current))
            }
        }
        return conflicts
    }

    /// Writes the rows a save inserts, updates and deletes (with their links) into `next`, and
    /// records them in `didSave`.
    private static func apply(
        _ changes: SaveChanges, to next: inout State, recording didSave: inout DidSave, model: ManagedObjectModel
    ) throws {
        for row in changes.inserted {
            let entity = try model.requireEntity(row.objectID.entityName)
            let snapshot = RowSnapshot(version: 1, attributes: row.attributes, toOne: row.toOne)
            next.tables[entity.name, default: [:]][row.objectID.key] = snapshot
            didSave.inserted.append(
                ObjectChange(objectID: row.objectID, version: 1, changedKeys: [], values: snapshot))
        }
        for row in changes.updated {
            let version = row.expectedVersion + 1
            let snapshot = RowSnapshot(version: version, attributes: row.attributes, toOne: row.toOne)
            next.tables[row.objectID.entityName, default: [:]][row.objectID.key] = snapshot
            didSave.updated.append(
                ObjectChange(
                    objectID: row.objectID, version: version, changedKeys: row.changedKeys, values: snapshot))
        }
        for deletion in changes.deleted {
            let removed = next.tables[deletion.objectID.entityName]?.removeValue(forKey: deletion.objectID.key)
            next.links = next.links.filter {
                !(($0.entity == deletion.objectID.entityName && $0.source == deletion.objectID.key)
                    || (model.entity(named: $0.entity)?.relationship(named: $0.relationship)?.destination
                        == deletion.objectID.entityName && $0.destination == deletion.objectID.key))
            }
            didSave.deleted.append(
                ObjectChange(
                    objectID: deletion.objectID, version: removed?.version ?? deletion.expectedVersion,
                    changedKeys: []))
        }
    }

    /// Removes and adds the links a save changes in `next`.
    private static func applyLinks(of changes: SaveChanges, to next: inout State) {
        for link in changes.linksRemoved {
            next.links.remove(
                LinkKey(
                    entity: link.source.entityName, relationship: link.relationship, source: link.source.key,
                    destination: link.destination.key))
        }
        for link in changes.linksAdded {
            next.links.insert(
                LinkKey(
                    entity: link.source.entityName, relationship: link.relationship, source: link.source.key,
                    destination: link.destination.key))
        }
    }

    private static func checkUniqueKeys(in state: State, changes: SaveChanges, model: ManagedObjectModel) throws {
        let touched = Set((changes.inserted + changes.updated).map(\.objectID.entityName))
        for name in touched {
            guard let entity = model.entity(named: name), let key = entity.uniqueKey,
                let index = entity.attributeIndex[key]
            else { continue }
            var seen: Set<Value> = []
            for row in state.tables[name, default: [:]].values where !seen.insert(row.attributes[index]).inserted {
                throw GraphError(
                    .constraintViolation,
                    "Another \(entity.name) already has \(key) = \(row.attributes[index]); \(entity.name).\(key) is unique.",
                    advice: "Fetch and update the existing object instead of inserting a second one."
                )
            }
        }
    }

    public func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        state.withLock { state in
            var result: [ObjectID: RowSnapshot] = [:]
            for id in objectIDs {
                if let row = state.tables[id.entityName]?[id.key], !id.isTemporary { result[id] = row }
            }
            return result
        }
    }

    public func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        try state.withLock { state in
            guard let model = state.model, let metadata = state.metadata else { throw notLoaded() }
            let (relationship, destination, inverse) = try model.toManyRelationship(name, of: objectID.entityName)
            let entity = try model.requireEntity(objectID.entityName)
            let id = { (key: Int64) in
                ObjectID(store: metadata.storeIdentifier, entity: destination.name, primaryKey: key)
            }
            if !inverse.isToMany {
                let slot = destination.toOneIndex[inverse.name]!
                return state.tables[destination.name, default: [:]].filter { $0.value.toOne[slot] == objectID }.keys
                    .sorted().map(id)
            }
            if relationship.ownsManyToManyLinks(in: entity.name) {
                return state.links.filter {
                    $0.entity == entity.name && $0.relationship == name && $0.source == objectID.key
                }.map(\.destination).sorted().map(id)
            }
            return state.links.filter {
                $0.entity == destination.name && $0.relationship == inverse.name && $0.destination == objectID.key
            }.map(\.source).sorted().map(id)
        }
    }

    public func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        try state.withLock { state in
            guard let metadata = state.metadata else { throw notLoaded() }
            return objectIDs.map { id in
                let key = state.nextKey[id.entityName, default: 1]
                state.nextKey[id.entityName] = key + 1
                return ObjectID(store: metadata.storeIdentifier, entity: id.entityName, primaryKey: key)
            }
        }
    }

    public func didRegister(_ objectIDs: [ObjectID]) {
        state.withLock { state in for id in objectIDs { state.registrations[id, default: 0] += 1 } }
    }

    public func didUnregister(_ objectIDs: [ObjectID]) {
        state.withLock { state in
            for id in objectIDs {
                let count = state.registrations[id, default: 0] - 1
                state.registrations[id] = count > 0 ? count : nil
            }
        }
    }

    /// How many registrations the store holds for an object (0 when none).
    public func registrationCount(for objectID: ObjectID) -> Int {
        state.withLock { $0.registrations[objectID, default: 0] }
    }

    /// The IDs some context has registered.
    public var registeredObjectIDs: Set<ObjectID> { state.withLock { Set($0.registrations.keys) } }

    public func changes(after token: HistoryToken, limit: Int) throws -> [DidSave] {
        state.withLock { state in
            Array(state.history.drop { $0.token <= token }.prefix(limit))
        }
    }

    public func currentHistoryToken() throws -> HistoryToken {
        state.withLock { $0.history.last?.token ?? .zero }
    }

    private func notLoaded() -> GraphError {
        GraphError(
            .invalidStore, "InMemory store used before loadMetadata(for:).",
            advice: "Open it through a StoreCoordinator.")
    }

    static func checkKeyPath(_ path: String, from entity: EntityDescription, model: ManagedObjectModel) throws {
        var current = entity
        let parts = path.split(separator: ".").map(String.init)
        for (index, part) in parts.enumerated() {
            let isLast = index == parts.count - 1
            if isLast, current.attribute(named: part) != nil || current.toOneIndex[part] != nil { return }
            guard let relationship = current.relationship(named: part), !relationship.isToMany,
                let next = model.entity(named: relationship.destination)
            else { break }
            current = next
        }
        throw GraphError(
            .invalidArgument,
            "'\(path)' is not a key path of \(entity.name).",
            advice: "Use an attribute name, or to-one relationships leading to one (like 'project.key')."
        )
    }

    private struct Reader: RowKeyPathReading {
        let entity: EntityDescription
        let row: RowSnapshot
        let state: State
        let model: ManagedObjectModel

        func follow(_ id: ObjectID) -> Reader? {
            guard let next = model.entity(named: id.entityName), let nextRow = state.tables[next.name]?[id.key] else {
                return nil
            }
            return Reader(entity: next, row: nextRow, state: state, model: model)
        }
    }
}

extension ObjectPredicate {
    /// Checks that every key path of the predicate exists in `entity`.
    package func validate(for entity: EntityDescription, in model: ManagedObjectModel) throws {
        for path in keyPaths { try InMemoryStore.checkKeyPath(path, from: entity, model: model) }
    }
}
