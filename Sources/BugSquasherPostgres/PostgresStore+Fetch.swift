public import BugSquasherGraph
import BugSquasherSQL
import Foundation
import PostgresNIO
import Synchronization

// Fetches, and the values of faults and to-many relationships.
extension PostgresStore {
    public func execute(_ request: any StoreRequest) throws -> StoreResult {
        switch request {
        case let fetch as FetchDescription: return .fetched(try self.fetch(fetch))
        case let save as SaveChanges: return .saved(try self.save(save))
        default: throw unsupported(request)
        }
    }

    private func fetch(_ request: FetchDescription) throws -> StoreFetchResult {
        let state = try requireLoaded()
        let entity = try state.model.requireEntity(request.entityName)
        let store = state.metadata.storeIdentifier
        var query = PostgresSelect(model: state.model, entity: entity, storeIdentifier: store)
        let sql = try query.select(request)
        return try withReadingConnection("fetch \(entity.name)") { connection in
            let rows = try run(sql, binds: query.bindings, on: connection)
            switch request.resultType {
            case .count:
                return .count(Int(try rows.first?.decode(Int64.self) ?? 0))
            case .objectIDs:
                return .objectIDs(
                    try rows.map { ObjectID(store: store, entity: entity.name, primaryKey: try $0.decode(Int64.self)) })
            case .rows:
                return .rows(try rows.map { try Self.decode($0, entity: entity, store: store) })
            }
        }
    }

    public func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        let state = try requireLoaded()
        return try withReadingConnection("load values") { connection in
            try rows(for: objectIDs, state: state, on: connection)
        }
    }

    /// The current rows of `objectIDs`, one statement per entity, on a connection held already.
    func rows(for objectIDs: [ObjectID], state: Loaded, on connection: PostgresConnection) throws
        -> [ObjectID: RowSnapshot]
    {
        let store = state.metadata.storeIdentifier
        let byEntity = Dictionary(
            grouping: objectIDs.filter { !$0.isTemporary && $0.storeIdentifier == store }, by: \.entityName)
        var result: [ObjectID: RowSnapshot] = [:]
        for (name, ids) in byEntity {
            let entity = try state.model.requireEntity(name)
            let table = PostgresSchema.quote(name)
            var bindings = PostgresBindings()
            bindings.append(KeyArray(ids.map(\.key)))
            let rows = try run(
                "SELECT \(PostgresSchema.columns(of: entity)) FROM \(table) t WHERE t.pk = ANY($1)", binds: bindings,
                on: connection)
            result.merge(try Self.snapshots(rows, entity: entity, store: store)) { $1 }
        }
        return result
    }

    /// Rows of `entity` as selected by ``PostgresSchema/columns(of:alias:only:)``, by object ID.
    static func snapshots(_ rows: [PostgresRow], entity: EntityDescription, store: String) throws
        -> [ObjectID: RowSnapshot]
    {
        var result: [ObjectID: RowSnapshot] = [:]
        result.reserveCapacity(rows.count)
        for row in rows {
            let decoded = try decode(row, entity: entity, store: store)
            result[decoded.objectID] = decoded.snapshot
        }
        return result
    }

    public func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        let state = try requireLoaded()
        let (sql, destination) = try SQLNames.toMany(name, of: objectID.entityName, in: state.model, parameter: "$1")
        let keys = try withReadingConnection("load \(objectID.entityName).\(name)") { connection in
            try run(sql, [.int64(objectID.key)], on: connection).map { try $0.decode(Int64.self) }
        }
        return keys.map { ObjectID(store: state.metadata.storeIdentifier, entity: destination.name, primaryKey: $0) }
    }

    /// Permanent IDs for `objectIDs`, in order: keys from this process's reserve
    /// (``KeyReserve``), and for the entities it cannot serve a block from `bs_sequence`, of
    /// which the keys not needed now are kept for the saves after.
    public func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        let state = try requireLoaded()
        var counts: [(entity: String, count: Int64)] = []
        for id in objectIDs {
            if let index = counts.firstIndex(where: { $0.entity == id.entityName }) {
                counts[index].count += 1
            } else {
                counts.append((id.entityName, 1))
            }
        }
        var nextKeys: [String: Int64] = [:]
        let missing = keyReserve.withLock { reserve in
            counts.filter { wanted in
                guard let first = reserve.take(wanted.count, of: wanted.entity) else { return true }
                nextKeys[wanted.entity] = first
                return false
            }
        }
        if !missing.isEmpty {
            for (entity, range) in try allocateKeys(missing) {
                let wanted = missing.first { $0.entity == entity }?.count ?? 0
                nextKeys[entity] = range.lowerBound
                keyReserve.withLock { $0.keep((range.lowerBound + wanted)..<range.upperBound, of: entity) }
            }
        }
        return objectIDs.map { id in
            defer { nextKeys[id.entityName, default: 0] += 1 }
            return ObjectID(
                store: state.metadata.storeIdentifier, entity: id.entityName, primaryKey: nextKeys[id.entityName] ?? 0)
        }
    }

    /// Allocates a block of keys (``KeyReserve/allocation(for:)``) for each of `wanted`'s
    /// entities from one statement (an entity seen for the first time starts at 1); the entities
    /// in name order, so that two processes allocating for the same entities lock their rows in
    /// the same order. On a session that had ended, it goes once more: a block the first
    /// statement may have taken is never given out, and keys need not follow each other.
    private func allocateKeys(_ wanted: [(entity: String, count: Int64)]) throws -> [(String, Range<Int64>)] {
        let blocks = wanted.map { ($0.entity, KeyReserve.allocation(for: $0.count)) }.sorted { $0.0 < $1.0 }
        return try withConnection("reserve IDs for new objects", onceMoreIfEnded: true) { connection in
            var bindings = PostgresBindings()
            bindings.append(blocks.map(\.0))
            bindings.append(KeyArray(blocks.map(\.1)))
            let rows = try runPrepared(
                """
                INSERT INTO bs_sequence (entity, next) SELECT e, 1 + c FROM unnest($1::text[], $2::int8[]) AS x(e, c)
                ON CONFLICT (entity) DO UPDATE SET next = bs_sequence.next + EXCLUDED.next - 1
                RETURNING entity, next
                """, binds: bindings, on: connection)
            return try rows.map { row in
                let (entity, next) = try row.decode((String, Int64).self)
                let size = blocks.first { $0.0 == entity }?.1 ?? 0
                return (entity, (next - size)..<next)
            }
        }
    }
}
