import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// Saves: the rows, links and history row of a save in one transaction, checked against the
// versions the context saw; the token is taken last, from the counter row.
extension PostgresStore {
    func save(_ changes: SaveChanges) throws -> DidSave {
        let state = try requireLoaded()
        return try withConnection("save") { connection in
            let didSave = try transaction(on: connection) { try write(changes, state: state, on: connection) }
            // Still holding the connection: the observers see the saves in token order, the
            // other processes' saves before this one first (see `deliverHistory`).
            if isObserved {
                try? deliverHistory(before: didSave.token.rawValue, store: didSave.storeIdentifier, on: connection)
                for handler in commitHandlers.withLock({ $0 }) { handler(didSave) }
                delivered.withLock { $0 = didSave.token.rawValue }
            }
            return didSave
        }
    }

    private func write(_ changes: SaveChanges, state: Loaded, on connection: PostgresConnection) throws -> DidSave {
        var didSave = DidSave(token: .zero, storeIdentifier: state.metadata.storeIdentifier)
        var conflicts = try writeUpdates(changes.updated, into: &didSave, state: state, on: connection)
        conflicts += try writeDeletions(changes.deleted, into: &didSave, state: state, on: connection)
        guard conflicts.isEmpty else {
            throw GraphError(
                .mergeConflict, "\(conflicts.count) object(s) changed in the store since this context loaded them.",
                conflicts: conflicts)
        }
        try writeInserts(changes.inserted, into: &didSave, state: state, on: connection)
        try writeLinks(removed: changes.linksRemoved, added: changes.linksAdded, on: connection)
        // Last: the counter row's lock is held from here to the commit, so tokens are issued in
        // commit order and a save that rolls back gives its token back.
        let token =
            try run("UPDATE bs_counter SET token = token + 1 WHERE id = 1 RETURNING token", [], on: connection)
            .first?.decode(Int64.self) ?? 0
        _ = try run(
            "INSERT INTO bs_history (token, committed_at, payload) VALUES ($1, $2, $3)",
            [.int64(token), .double(Date().timeIntervalSince1970), .data(HistoryCoding.encode(didSave))],
            on: connection)
        // A hint to the other daemons, sent by the server when (and if) the transaction commits.
        _ = try run("SELECT pg_notify($1, $2)", [.string(hintChannel), .string(String(token))], on: connection)
        didSave.token = HistoryToken(rawValue: token)
        return didSave
    }

    private func writeUpdates(
        _ rows: [SaveChanges.Row], into didSave: inout DidSave, state: Loaded, on connection: PostgresConnection
    ) throws -> [MergeConflict] {
        var conflicts: [MergeConflict] = []
        for row in rows {
            let entity = try state.model.requireEntity(row.objectID.entityName)
            let names = entity.attributes.map(\.name) + entity.toOneRelationships.map(\.name)
            let columns = row.changedKeys.compactMap { names.firstIndex(of: $0) }.sorted()
            var arguments: [Value] = []
            var sql = "UPDATE \(PostgresSchema.quote(entity.name)) SET _version = _version + 1"
            for column in columns {
                arguments.append(
                    column < row.attributes.count
                        ? row.attributes[column]
                        : row.toOne[column - row.attributes.count].map { .int64($0.key) } ?? .null)
                sql += ", \(PostgresSchema.quote(names[column])) = $\(arguments.count)"
            }
            arguments += [.int64(row.objectID.key), .int64(row.expectedVersion)]
            sql += " WHERE pk = $\(arguments.count - 1) AND _version = $\(arguments.count)"
            let changed = try keepingKeysUnique(entity, row.attributes, updating: true) {
                try changeCount(sql, arguments, on: connection)
            }
            if changed == 0 {
                conflicts.append(
                    MergeConflict(
                        objectID: row.objectID, cachedVersion: row.expectedVersion,
                        persisted: try currentRow(row.objectID, entity: entity, on: connection)))
            } else {
                let snapshot = RowSnapshot(
                    version: row.expectedVersion + 1, attributes: row.attributes, toOne: row.toOne)
                didSave.updated.append(
                    ObjectChange(
                        objectID: row.objectID, version: snapshot.version, changedKeys: row.changedKeys,
                        values: snapshot))
            }
        }
        return conflicts
    }

    private func writeDeletions(
        _ deletions: [SaveChanges.Deletion], into didSave: inout DidSave, state: Loaded,
        on connection: PostgresConnection
    ) throws -> [MergeConflict] {
        var conflicts: [MergeConflict] = []
        for deletion in deletions {
            let entity = try state.model.requireEntity(deletion.objectID.entityName)
            let deleted = try changeCount(
                "DELETE FROM \(PostgresSchema.quote(entity.name)) WHERE pk = $1 AND _version = $2",
                [.int64(deletion.objectID.key), .int64(deletion.expectedVersion)], on: connection)
            if deleted == 0, let current = try currentRow(deletion.objectID, entity: entity, on: connection) {
                conflicts.append(
                    MergeConflict(
                        objectID: deletion.objectID, cachedVersion: deletion.expectedVersion, persisted: current))
                continue
            }
            try deleteLinks(of: deletion.objectID, entity: entity, model: state.model, on: connection)
            didSave.deleted.append(
                ObjectChange(objectID: deletion.objectID, version: deletion.expectedVersion, changedKeys: []))
        }
        return conflicts
    }

    private func writeInserts(
        _ rows: [SaveChanges.Row], into didSave: inout DidSave, state: Loaded, on connection: PostgresConnection
    ) throws {
        for row in rows {
            let entity = try state.model.requireEntity(row.objectID.entityName)
            let names = entity.attributes.map(\.name) + entity.toOneRelationships.map(\.name)
            let arguments: [Value] =
                [.int64(row.objectID.key)] + row.attributes + row.toOne.map { $0.map { .int64($0.key) } ?? .null }
            let placeholders = (2...arguments.count).map { "$\($0)" }
            let sql =
                "INSERT INTO \(PostgresSchema.quote(entity.name)) (pk, _version\(names.map { ", " + PostgresSchema.quote($0) }.joined())) VALUES ($1, 1\(placeholders.map { ", " + $0 }.joined()))"
            _ = try keepingKeysUnique(entity, row.attributes, updating: false) {
                try changeCount(sql, arguments, on: connection)
            }
            didSave.inserted.append(
                ObjectChange(
                    objectID: row.objectID, version: 1, changedKeys: [],
                    values: RowSnapshot(version: 1, attributes: row.attributes, toOne: row.toOne)))
        }
    }

    private func writeLinks(removed: [SaveChanges.Link], added: [SaveChanges.Link], on connection: PostgresConnection)
        throws
    {
        for link in removed {
            let table = PostgresSchema.joinTable(owner: link.source.entityName, relationship: link.relationship)
            _ = try run(
                "DELETE FROM \(table) WHERE src = $1 AND dst = $2",
                [.int64(link.source.key), .int64(link.destination.key)], on: connection)
        }
        for link in added {
            let table = PostgresSchema.joinTable(owner: link.source.entityName, relationship: link.relationship)
            _ = try run(
                "INSERT INTO \(table) (src, dst) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                [.int64(link.source.key), .int64(link.destination.key)], on: connection)
        }
    }

    /// Runs a write of a row of `entity`; a clash with its unique index becomes a
    /// ``GraphError/Code/constraintViolation`` that names the key and what to do.
    private func keepingKeysUnique<T>(
        _ entity: EntityDescription, _ attributes: [Value], updating: Bool, _ body: () throws -> T
    ) throws -> T {
        do {
            return try body()
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            let key =
                entity.uniqueKey.flatMap { entity.attributeIndex[$0] }.map {
                    "\(entity.uniqueKey!) = \(attributes[$0])"
                }
                ?? "its key"
            let advice =
                updating
                ? "Choose a value no other \(entity.name) has, or change that one first."
                : "Fetch and update the existing object instead of inserting a second one."
            throw GraphError(
                .constraintViolation, "Another \(entity.name) already has \(key).", advice: advice, cause: error)
        }
    }

    private func currentRow(_ id: ObjectID, entity: EntityDescription, on connection: PostgresConnection) throws
        -> RowSnapshot?
    {
        try run(
            "SELECT \(PostgresSchema.columns(of: entity)) FROM \(PostgresSchema.quote(entity.name)) t WHERE t.pk = $1",
            [.int64(id.key)], on: connection
        ).first.map { try Self.decode($0, entity: entity, store: id.storeIdentifier).snapshot }
    }

    private func deleteLinks(
        of id: ObjectID, entity: EntityDescription, model: ManagedObjectModel, on connection: PostgresConnection
    ) throws {
        for relationship in entity.toManyRelationships {
            guard
                let inverse = model.entity(named: relationship.destination)?.relationship(named: relationship.inverse),
                inverse.isToMany
            else { continue }
            let sql =
                relationship.ownsManyToManyLinks(in: entity.name)
                ? "DELETE FROM \(PostgresSchema.joinTable(owner: entity.name, relationship: relationship.name)) WHERE src = $1"
                : "DELETE FROM \(PostgresSchema.joinTable(owner: relationship.destination, relationship: inverse.name)) WHERE dst = $1"
            _ = try run(sql, [.int64(id.key)], on: connection)
        }
    }
}
