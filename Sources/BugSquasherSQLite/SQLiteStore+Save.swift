public import BugSquasherGraph
import Foundation
import GRDB
import Synchronization

// Saves: the rows, links and history row of a save in one transaction, checked against the
// versions the context saw.
extension SQLiteStore {
    /// Runs an insert or update of one row; a clash with the entity's unique index becomes a
    /// ``GraphError/Code/constraintViolation`` that names the key and what to do.
    private static func executeKeepingKeysUnique(
        _ statement: consuming BoundStatement, entity: EntityDescription, attributes: [Value], updating: Bool
    ) throws {
        var statement = statement
        try keepingKeysUnique(entity: entity, attributes: attributes, updating: updating) { try statement.execute() }
    }

    /// Runs `execute`, which writes a row of `entity` with `attributes`, turning a constraint
    /// failure into a ``GraphError`` that names the clashing key.
    private static func keepingKeysUnique(
        entity: EntityDescription, attributes: [Value], updating: Bool, _ execute: () throws -> Void
    ) throws {
        do {
            try execute()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            let key =
                entity.uniqueKey.flatMap { entity.attributeIndex[$0] }.map {
                    "\(entity.uniqueKey!) = \(attributes[$0])"
                } ?? "its key"
            let advice =
                updating
                ? "Choose a value no other \(entity.name) has, or change that one first."
                : "Fetch and update the existing object instead of inserting a second one."
            throw GraphError(
                .constraintViolation, "Another \(entity.name) already has \(key).", advice: advice, cause: error)
        }
    }

    func save(_ changes: SaveChanges) throws -> DidSave {
        let state = try requireLoaded()
        guard let editsFirst, changes.isBulk else {
            // Bulk work gives way from the start of the transaction (see `write`).
            return try wrap("save") { try writeTransaction { db in try write(changes, in: db, state: state) } }
        }
        // A bulk save that gets the writer within an interactive save's window gives it back
        // (an empty transaction) and waits outside it, so that edits are not held up meanwhile.
        while true {
            let didSave = try wrap("save") {
                try pool.write { db -> DidSave? in
                    editsFirst.pause() > 0 ? nil : try write(changes, in: db, state: state)
                }
            }
            if let didSave { return didSave }
            editsFirst.yieldToInteractiveSaves()
        }
    }

    // One edit runs through far less here than a context's fetch and save: one transaction
    // reads the row and writes it (see ``AttributeEditable``).
    public func edit(_ request: AttributeEditRequest) throws -> AttributeEditOutcome {
        let state = try requireLoaded()
        let store = state.metadata.storeIdentifier
        let id = request.objectID
        let edit = try AttributeEdit(request, model: state.model, store: store)
        let sql = try statements(for: id, in: state)
        return try wrap("save") {
            try writeTransaction { db -> AttributeEditOutcome in
                let row = try currentRow(id, sql: sql, store: store, model: state.model, db: db)
                // Nothing changes (`save(from:)` threw without a row): nothing is written, and no
                // window opens for bulk work.
                guard let save = try edit.save(from: row) else { return .unchanged(version: row?.version ?? 0) }
                return .saved(try write(save, in: db, state: state))
            }
        }
    }

    /// Writes a save's changes in the transaction of `db`: rows, links and the history row; the
    /// commit observers are called once it commits.
    private func write(_ changes: SaveChanges, in db: Database, state: Loaded) throws -> DidSave {
        // An interactive save: bulk work gives way from now, so that the import steps under way
        // reach a yield point before the did-save goes out, and again from the commit (below).
        let interactive = changes.isBulk ? nil : editsFirst
        if let interactive {
            interactive.openWindow()
            checkpointer.giveWay()
        }
        var didSave = DidSave(token: .zero, storeIdentifier: state.metadata.storeIdentifier)
        var conflicts = try writeUpdates(changes.updated, into: &didSave, state: state, db: db)
        conflicts += try writeDeletions(changes.deleted, into: &didSave, state: state, db: db)
        guard conflicts.isEmpty else {
            throw GraphError.staleObjects(conflicts)
        }
        try writeInserts(changes.inserted, into: &didSave, state: state, db: db)
        try writeLinks(removed: changes.linksRemoved, added: changes.linksAdded, db: db)
        try db.cachedStatement(sql: "INSERT INTO bs_history (committed_at, payload) VALUES (?, ?)")
            .execute(arguments: [Date().timeIntervalSince1970, HistoryCoding.encode(didSave)])
        didSave.token = HistoryToken(rawValue: db.lastInsertedRowID)
        notifyAfterCommit(didSave, interactive: interactive, db: db)
        return didSave
    }

    /// Updates the rows of a save, each checked against the version the context saw; returns
    /// the conflicts, rows another save changed since.
    private func writeUpdates(
        _ rows: [SaveChanges.Row], into didSave: inout DidSave, state: Loaded, db: Database
    ) throws -> [MergeConflict] {
        let model = state.model
        let store = state.metadata.storeIdentifier
        var conflicts: [MergeConflict] = []
        for row in rows {
            let sql = try statements(for: row.objectID, in: state)
            let columns = sql.changedColumns(row.changedKeys)
            var statement = BoundStatement(try db.cachedStatement(sql: sql.update(columns: columns)))
            for column in columns {
                if column < row.attributes.count {
                    statement.bind(row.attributes[column])
                } else {
                    statement.bind(row.toOne[column - row.attributes.count]?.key)
                }
            }
            statement.bind(row.objectID.key)
            statement.bind(row.expectedVersion)
            try Self.executeKeepingKeysUnique(statement, entity: sql.entity, attributes: row.attributes, updating: true)
            if db.changesCount == 0 {
                conflicts.append(
                    MergeConflict(
                        objectID: row.objectID, cachedVersion: row.expectedVersion,
                        persisted: try currentRow(row.objectID, sql: sql, store: store, model: model, db: db)))
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

    /// Deletes the rows of a save, and their links, each checked against the version the
    /// context saw; returns the conflicts, rows another save changed since.
    private func writeDeletions(
        _ deletions: [SaveChanges.Deletion], into didSave: inout DidSave, state: Loaded, db: Database
    ) throws -> [MergeConflict] {
        let model = state.model
        let store = state.metadata.storeIdentifier
        var conflicts: [MergeConflict] = []
        for deletion in deletions {
            let sql = try statements(for: deletion.objectID, in: state)
            let entity = sql.entity
            let statement = try db.cachedStatement(sql: sql.delete)
            try statement.execute(arguments: [deletion.objectID.key, deletion.expectedVersion])
            if db.changesCount == 0,
                let current = try currentRow(deletion.objectID, sql: sql, store: store, model: model, db: db)
            {
                conflicts.append(
                    MergeConflict(
                        objectID: deletion.objectID, cachedVersion: deletion.expectedVersion, persisted: current))
                continue
            }
            try deleteLinks(of: deletion.objectID, entity: entity, model: model, db: db)
            didSave.deleted.append(
                ObjectChange(objectID: deletion.objectID, version: deletion.expectedVersion, changedKeys: []))
        }
        return conflicts
    }

    /// Inserts the new rows of a save.
    private func writeInserts(_ rows: [SaveChanges.Row], into didSave: inout DidSave, state: Loaded, db: Database)
        throws
    {
        // Each entity's insert statement is looked up once per save, not once per row (GRDB's
        // statement cache hashes the whole SQL text).
        var inserts = ByEntity<(entity: EntityDescription, statement: Statement)>()
        for row in rows {
            let insert = inserts[
                try inserts.index(of: row.objectID.entityName) {
                    let sql = try statements(for: row.objectID, in: state)
                    return (sql.entity, try db.cachedStatement(sql: sql.insert))
                }]
            var statement = BoundStatement(insert.statement)
            statement.bind(row.objectID.key)
            try Self.keepingKeysUnique(entity: insert.entity, attributes: row.attributes, updating: false) {
                try statement.execute(values: row.attributes, then: row.toOne)
            }
            didSave.inserted.append(
                ObjectChange(
                    objectID: row.objectID, version: 1, changedKeys: [],
                    values: RowSnapshot(version: 1, attributes: row.attributes, toOne: row.toOne)))
        }
    }

    /// Removes and adds the to-many links of a save.
    private func writeLinks(removed: [SaveChanges.Link], added: [SaveChanges.Link], db: Database) throws {
        var delete = LinkStatement { "DELETE FROM \($0) WHERE src = ? AND dst = ?" }
        for link in removed {
            try delete.statement(for: link, db: db).execute(arguments: [link.source.key, link.destination.key])
        }
        var insert = LinkStatement { "INSERT OR IGNORE INTO \($0) (src, dst) VALUES (?, ?)" }
        for link in added {
            try insert.statement(for: link, db: db).execute(arguments: [link.source.key, link.destination.key])
        }
    }

    /// The statement for one join table's links, looked up again only when the table changes:
    /// a save's links come table by table, and building the SQL and hashing it in GRDB's cache
    /// for every link of a chunk (a bug's components) cost more than executing it.
    private struct LinkStatement {
        let sql: (String) -> String
        private var last: (owner: String, relationship: String, statement: Statement)?

        init(sql: @escaping (String) -> String) { self.sql = sql }

        mutating func statement(for link: SaveChanges.Link, db: Database) throws -> Statement {
            if let last, last.owner == link.source.entityName, last.relationship == link.relationship {
                return last.statement
            }
            let statement = try db.cachedStatement(
                sql: sql(SQLSchema.joinTable(owner: link.source.entityName, relationship: link.relationship)))
            last = (link.source.entityName, link.relationship, statement)
            return statement
        }
    }

    /// Hands a save to the commit observers, and opens the window bulk work gives way for, once
    /// the transaction of `db` commits.
    private func notifyAfterCommit(_ didSave: DidSave, interactive: EditsFirst?, db: Database) {
        let handlers = commitHandlers.withLock { $0 }
        if !handlers.isEmpty || interactive != nil {
            // Runs on the writer after the commit, serialized with every other write: the
            // observers see saves in token order; a rollback hands off nothing. The window
            // bulk work gives way for starts before the did-save goes to the subscribers.
            let committed = didSave
            db.afterNextTransaction(onCommit: { _ in
                interactive?.openWindow()
                for handler in handlers { handler(committed) }
            })
        }
    }

    private func currentRow(
        _ id: ObjectID, sql: EntityStatements, store: String, model: ManagedObjectModel, db: Database
    ) throws -> RowSnapshot? {
        try Row.fetchOne(db.cachedStatement(sql: sql.selectByKey + " = ?"), arguments: [id.key])
            .map { Self.decode($0, entity: sql.entity, store: store, model: model).snapshot }
    }

    private func deleteLinks(of id: ObjectID, entity: EntityDescription, model: ManagedObjectModel, db: Database) throws
    {
        for relationship in entity.toManyRelationships {
            guard
                let inverse = model.entity(named: relationship.destination)?.relationship(named: relationship.inverse),
                inverse.isToMany
            else { continue }
            if relationship.ownsManyToManyLinks(in: entity.name) {
                try db.cachedStatement(
                    sql:
                        "DELETE FROM \(SQLSchema.joinTable(owner: entity.name, relationship: relationship.name)) WHERE src = ?"
                ).execute(arguments: [id.key])
            } else {
                try db.cachedStatement(
                    sql:
                        "DELETE FROM \(SQLSchema.joinTable(owner: relationship.destination, relationship: inverse.name)) WHERE dst = ?"
                ).execute(arguments: [id.key])
            }
        }
    }
}
