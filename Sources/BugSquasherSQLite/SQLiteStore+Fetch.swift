import Algorithms
public import BugSquasherGraph
import BugSquasherSQL
import Foundation
import GRDB

// Fetches, and the values of faults and to-many relationships.
extension SQLiteStore {
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
        var query = SQLQuery(model: state.model, entity: entity, storeIdentifier: state.metadata.storeIdentifier)
        let sql = try query.select(request)
        let arguments = StatementArguments(query.arguments)
        let store = state.metadata.storeIdentifier
        return try wrap("fetch \(entity.name)") {
            try pool.read { db in
                let statement = query.isCacheable ? try db.cachedStatement(sql: sql) : try db.makeStatement(sql: sql)
                switch request.resultType {
                case .count:
                    return .count(try Int.fetchOne(statement, arguments: arguments) ?? 0)
                case .objectIDs:
                    let keys = try Int64.fetchAll(statement, arguments: arguments)
                    return .objectIDs(keys.map { ObjectID(store: store, entity: entity.name, primaryKey: $0) })
                case .rows:
                    var rows: [StoreRow] = []
                    let cursor = try Row.fetchCursor(statement, arguments: arguments)
                    while let row = try cursor.next() {
                        rows.append(Self.decode(row, entity: entity, store: store, model: state.model))
                    }
                    return .rows(rows)
                }
            }
        }
    }

    static func decode(_ row: Row, entity: EntityDescription, store: String, model: ManagedObjectModel)
        -> StoreRow
    {
        let pk: Int64 = row[0]
        let version: Int64 = row[1]
        var attributes: [Value] = []
        attributes.reserveCapacity(entity.attributes.count)
        for (index, attribute) in entity.attributes.enumerated() {
            attributes.append(Value(row[index + 2] as DatabaseValue, as: attribute.type))
        }
        let base = entity.attributes.count + 2
        let toOne = entity.toOneRelationships.enumerated().map { index, relationship -> ObjectID? in
            (row[base + index] as Int64?).map {
                ObjectID(store: store, entity: relationship.destination, primaryKey: $0)
            }
        }
        return StoreRow(
            objectID: ObjectID(store: store, entity: entity.name, primaryKey: pk),
            snapshot: RowSnapshot(version: version, attributes: attributes, toOne: toOne))
    }

    public func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        let state = try requireLoaded()
        let store = state.metadata.storeIdentifier
        let byEntity = Dictionary(
            grouping: objectIDs.filter { !$0.isTemporary && $0.storeIdentifier == store }, by: \.entityName)
        return try wrap("load values") {
            try pool.read { db in
                var result: [ObjectID: RowSnapshot] = [:]
                for (name, ids) in byEntity {
                    guard let sql = state.statements[name] else {
                        throw GraphError(
                            .invalidArgument, "\(ids[0]) names entity '\(name)', which the model does not have.")
                    }
                    for slice in ids.chunks(ofCount: 500) {
                        // A fault (one row) and a full batch reuse prepared statements.
                        let text =
                            slice.count == 1
                            ? sql.selectByKey + " = ?"
                            : sql.selectByKey + " IN (" + String(repeating: "?,", count: slice.count - 1) + "?)"
                        let statement =
                            slice.count == 1 || slice.count == 500
                            ? try db.cachedStatement(sql: text) : try db.makeStatement(sql: text)
                        let cursor = try Row.fetchCursor(statement, arguments: StatementArguments(slice.map(\.key)))
                        while let row = try cursor.next() {
                            let decoded = Self.decode(row, entity: sql.entity, store: store, model: state.model)
                            result[decoded.objectID] = decoded.snapshot
                        }
                    }
                }
                return result
            }
        }
    }

    public func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        let state = try requireLoaded()
        let (sql, destination) = try SQLNames.toMany(name, of: objectID.entityName, in: state.model, parameter: "?")
        let keys = try wrap("load \(objectID.entityName).\(name)") {
            try pool.read { db in try Int64.fetchAll(db, sql: sql, arguments: [objectID.key]) }
        }
        return keys.map { ObjectID(store: state.metadata.storeIdentifier, entity: destination.name, primaryKey: $0) }
    }

    public func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        let state = try requireLoaded()
        // Each entity's count, and each ID's entity by position: a search of a handful of names,
        // in plain arrays (a chunk's save obtains thousands of IDs).
        var entities: [String] = []
        var counts: [Int64] = []
        var slots: [Int] = []
        slots.reserveCapacity(objectIDs.count)
        for id in objectIDs {
            var slot = 0
            while slot < entities.count, entities[slot] != id.entityName { slot += 1 }
            if slot == entities.count {
                entities.append(id.entityName)
                counts.append(0)
            }
            counts[slot] += 1
            slots.append(slot)
        }
        // Each entity's first key, then the next one to hand out; in the order of `entities`.
        var nextKeys: [Int64] = try wrap("reserve IDs for new objects") {
            try pool.write { db in
                try zip(entities, counts).map { entity, count in
                    try db.execute(
                        sql: "INSERT INTO bs_sequence(entity, next) VALUES (?, 1) ON CONFLICT(entity) DO NOTHING",
                        arguments: [entity])
                    let next =
                        try Int64.fetchOne(
                            db, sql: "UPDATE bs_sequence SET next = next + ? WHERE entity = ? RETURNING next",
                            arguments: [count, entity]) ?? count + 1
                    return next - count
                }
            }
        }
        let store = state.metadata.storeIdentifier
        return zip(objectIDs, slots).map { id, slot in
            defer { nextKeys[slot] += 1 }
            return ObjectID(store: store, entity: id.entityName, primaryKey: nextKeys[slot])
        }
    }
}
