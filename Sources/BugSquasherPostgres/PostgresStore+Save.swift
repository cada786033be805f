import BugSquasherGraph
import Foundation
import NIOCore
import PostgresNIO
import Synchronization

// Saves: the rows, links and history row of a save in one transaction, checked against the
// versions the context saw; the token is taken last, from the counter row.
extension PostgresStore {
    func save(_ changes: SaveChanges) throws -> DidSave {
        let state = try requireLoaded()
        // An interactive save: bulk work gives way from when it has the connection, and again
        // from its commit, before its did-save goes out (see `EditsFirst`).
        let interactive = changes.isBulk ? nil : editsFirst
        // An interactive save meets an ended session with no history row noted
        // (`sentHistoryRow`) only before its token's statement went out, or after an answer that
        // said nothing committed: it goes once more on a new connection. Bulk work notes no row;
        // an import tries its chunk again from its job's last commit.
        return try savingOnceMore(
            {
                try withConnection("save", onceMoreIfEnded: !changes.isBulk) { connection in
                    interactive?.openWindow()
                    // An edit of one object is one statement, its own transaction: one round trip.
                    let didSave =
                        try Self.singleUpdate(changes).map {
                            try writeSingleUpdate($0, state: state, bulk: changes.isBulk, on: connection)
                        }
                        ?? writeInTransaction(changes, state: state, on: connection)
                    interactive?.openWindow()
                    deliverOwn(didSave, on: connection)
                    return didSave
                }
            }, found: { $0 })
    }

    /// Hands the observers a save of this process that just committed, with the connection
    /// still held: the other processes' saves before it first (see `deliverHistory`), so that
    /// the observers see the saves in token order.
    func deliverOwn(_ didSave: DidSave, on connection: PostgresConnection) {
        guard isObserved else { return }
        committedHere.withLock { $0 = max($0, didSave.token.rawValue) }
        do {
            try deliverHistory(before: didSave.token.rawValue, store: didSave.storeIdentifier, on: connection)
            remember(didSave)
            for handler in commitHandlers.withLock({ $0 }) { handler(didSave) }
            delivered.withLock { $0 = didSave.token.rawValue }
        } catch {
            // The saves before this one could not be read (the connection broke after the
            // commit): handing this one out now would skip them. The follower's next look,
            // within a second, reads them and this one from the history.
            logger.warning(
                "committed a save, but could not read the saves before it; it reaches observers from the history",
                metadata: ["token": "\(didSave.token.rawValue)", "error": "\(Self.describe(error))"])
        }
    }

    /// Writes a save in a transaction of its own, waiting for the server about twice however
    /// many statements it takes: every statement goes out without waiting for the answer to the
    /// one before, the new rows are encoded while the server reads them, the token's statement
    /// goes out with the `COMMIT` once the updates' version checks have passed, and every answer
    /// is checked before the save counts as committed. An update whose version check fails
    /// rolls the transaction back, and the save is written again one statement at a time, which
    /// tells a conflict from a change of to-many relationships only (``versionedUpdate(_:of:)``).
    /// Why: docs/DESIGN-NOTES.md, "A save waits for the server twice".
    private func writeInTransaction(_ changes: SaveChanges, state: Loaded, on connection: PostgresConnection) throws
        -> DidSave
    {
        if changes.deleted.isEmpty {
            do {
                return try committingWithToken(changes, on: connection) {
                    try sendRows(changes, state: state, on: connection)
                }
            } catch is VersionCheckFailed {}
        }
        return try committingWithToken(changes, on: connection) {
            (try writeRows(changes, state: state, on: connection), [])
        }
    }

    /// Runs `rows` in a transaction, then takes the save's token and commits in one round trip.
    /// `rows` returns the did-save (without its token) and the statements it sent without
    /// waiting, whose answers are checked in order once the `COMMIT`'s is in: a transaction in
    /// which a statement failed is rolled back by its `COMMIT`, which the server answers without
    /// an error.
    private func committingWithToken(
        _ changes: SaveChanges, on connection: PostgresConnection, _ rows: () throws -> (DidSave, [SentStatement])
    ) throws -> DidSave {
        let begun = try send("BEGIN", on: connection)
        do {
            var (didSave, sent) = try rows()
            // Last: the counter row's lock is held from here to the commit, so tokens are issued
            // in commit order and a save that rolls back gives its token back. One statement
            // (the token, the history row, and a hint to the other daemons, which the server
            // sends when, and if, the transaction commits), sent with the COMMIT, so that the
            // lock is held for one round trip. Unnamed: a named statement is prepared first when
            // new to the connection, and the COMMIT sent after it would run before it.
            let issued = try send(
                "WITH \(Self.issuingToken(first: 1))", tokenArguments(didSave, bulk: changes.isBulk), on: connection)
            let committed = try send("COMMIT", on: connection)
            // The answers come in order: once the COMMIT's is in, the others are read without
            // waiting, and the first error is the one to tell.
            _ = try? committed.value()
            _ = try begun.value()
            for statement in sent { try statement.check(self) }
            let token = try issued.value().rows.first?.makeRandomAccess()[0].decode(Int64.self) ?? 0
            _ = try committed.value()
            didSave.token = HistoryToken(rawValue: token)
            return didSave
        } catch {
            _ = try? run("ROLLBACK", [], on: connection)
            throw error
        }
    }

    /// Writes a save in the transaction open on `connection`, one statement at a time; its token
    /// is taken last.
    func write(_ changes: SaveChanges, state: Loaded, on connection: PostgresConnection) throws -> DidSave {
        var didSave = try writeRows(changes, state: state, on: connection)
        let token =
            try runPrepared(
                "WITH \(Self.issuingToken(first: 1))", tokenArguments(didSave, bulk: changes.isBulk), on: connection
            )
            .first?.makeRandomAccess()[0].decode(Int64.self) ?? 0
        didSave.token = HistoryToken(rawValue: token)
        return didSave
    }

    /// Writes a save's updates, deletions, new rows and links in the transaction open on
    /// `connection`, one statement at a time; the did-save has no token yet.
    private func writeRows(_ changes: SaveChanges, state: Loaded, on connection: PostgresConnection) throws -> DidSave {
        var didSave = DidSave(token: .zero, storeIdentifier: state.metadata.storeIdentifier)
        var conflicts = try writeUpdates(changes.updated, into: &didSave, state: state, on: connection)
        conflicts += try writeDeletions(changes.deleted, into: &didSave, state: state, on: connection)
        guard conflicts.isEmpty else {
            throw GraphError.staleObjects(conflicts)
        }
        _ = try writeInserts(changes.inserted, into: &didSave, state: state, waiting: true, on: connection)
        _ = try writeLinks(removed: changes.linksRemoved, added: changes.linksAdded, waiting: true, on: connection)
        return didSave
    }

    /// Sends a save without deletions in the transaction open on `connection`, waiting only for
    /// the updates' answers (which come while the new rows are encoded): the did-save, without
    /// its token, and the statements whose answers are still to be checked. Throws
    /// ``VersionCheckFailed`` when an update's version check failed.
    private func sendRows(_ changes: SaveChanges, state: Loaded, on connection: PostgresConnection) throws -> (
        DidSave, [SentStatement]
    ) {
        var didSave = DidSave(token: .zero, storeIdentifier: state.metadata.storeIdentifier)
        let updates = try changes.updated.sorted { Self.locksFirst($0.objectID, $1.objectID) }.map { row in
            let entity = try state.model.requireEntity(row.objectID.entityName)
            let (sql, arguments) = Self.versionedUpdate(row, of: entity)
            return (row, entity, try send(sql, arguments, on: connection))
        }
        let sent =
            try writeInserts(changes.inserted, into: &didSave, state: state, waiting: false, on: connection)
            + writeLinks(removed: changes.linksRemoved, added: changes.linksAdded, waiting: false, on: connection)
        for (row, entity, answer) in updates {
            // A failed update fails every statement after it: its error is the one to tell.
            let version = try keepingKeysUnique(entity, row.attributes, updating: true) {
                try answer.value().rows.first?.decode(Int64.self)
            }
            guard let version else { throw VersionCheckFailed() }
            didSave.updated.append(Self.change(row, version: version))
        }
        return (didSave, sent)
    }

    /// A statement sent without waiting for its answer, and the rows it writes, which name a
    /// clash with a unique key.
    struct SentStatement {
        var answer: PendingAnswer<Void>
        var entity: EntityDescription? = nil
        var attributes: [Value]? = nil

        /// Throws the statement's error, if it failed.
        func check(_ store: PostgresStore) throws {
            guard let entity else { return try answer.value() }
            try store.keepingKeysUnique(entity, attributes, updating: false) { try answer.value() }
        }
    }

    private func writeUpdates(
        _ rows: [SaveChanges.Row], into didSave: inout DidSave, state: Loaded, on connection: PostgresConnection
    ) throws -> [MergeConflict] {
        var conflicts: [MergeConflict] = []
        for row in rows.sorted(by: { Self.locksFirst($0.objectID, $1.objectID) }) {
            let entity = try state.model.requireEntity(row.objectID.entityName)
            let (sql, arguments) = Self.versionedUpdate(row, of: entity)
            let version = try keepingKeysUnique(entity, row.attributes, updating: true) {
                try run(sql, arguments, on: connection).first?.decode(Int64.self)
            }
            if let version {
                didSave.updated.append(Self.change(row, version: version))
            } else {
                conflicts.append(try conflict(row, entity: entity, on: connection))
            }
        }
        return conflicts
    }

    /// The update of `row` with its version check, returning the row's new version, or no row
    /// when the check fails. For a change of `row`'s to-many relationships only (bugs added to
    /// a project), nothing of its row changes but its version, and the check is looser: another
    /// process's save of the same kind since the context read the row (another importer adding
    /// bugs to the same project) is no conflict. The row still holds what the context holds, so
    /// the version goes up from the one it reached, and the context reloads the relationships it
    /// had loaded. A row deleted, or whose values changed, is a conflict, as for any other update.
    /// Why: docs/DESIGN-NOTES.md, "Importers adding to one project do not conflict".
    static func versionedUpdate(_ row: SaveChanges.Row, of entity: EntityDescription) -> (
        sql: String, arguments: [Value]
    ) {
        let names = columnNames(of: entity)
        let columns = changedColumns(row, names: names)
        guard columns.isEmpty else {
            return (
                updateText(of: entity, names: names, columns: columns) + " RETURNING _version",
                updateArguments(row, columns: columns)
            )
        }
        var arguments: [Value] = [.int64(row.objectID.key), .int64(row.expectedVersion)]
        var unchanged = ["TRUE"]
        for column in names.indices {
            arguments.append(value(row, column: column))
            unchanged.append("\(PostgresSchema.quote(names[column])) IS NOT DISTINCT FROM $\(arguments.count)")
        }
        let sql = """
            UPDATE \(PostgresSchema.quote(entity.name)) SET _version = _version + 1
            WHERE pk = $1 AND (_version = $2 OR (\(unchanged.joined(separator: " AND ")))) RETURNING _version
            """
        return (sql, arguments)
    }

    /// The end of every save's statement, as CTEs and the final `SELECT` of the token: the
    /// save's token from the counter row (when `condition` holds), its history row and its hint.
    /// Its parameters are ``tokenArguments(_:bulk:)``, numbered from `$first`.
    static func issuingToken(when condition: String? = nil, first: Int) -> String {
        """
        issued AS (UPDATE bs_counter SET token = token + 1 WHERE id = 1\(condition.map { " AND \($0)" } ?? "") RETURNING token),
        written AS (INSERT INTO bs_history (token, committed_at, payload) SELECT token, $\(first), $\(first + 1) FROM issued RETURNING token)
        SELECT token, pg_notify($\(first + 2), token::text || $\(first + 3)) FROM written
        """
    }

    /// The parameters of ``issuingToken(when:first:)`` for `didSave`: the commit time, the
    /// history row's payload, the hint's channel and what follows the token in the hint
    /// (``Hint``).
    /// An interactive save's row is kept until the writing connection is let go, to be found
    /// again if the answer to it is lost (``settle(_:)``); bulk work has its own way to find out
    /// (an import's job records its progress in the chunk's transaction).
    func tokenArguments(_ didSave: DidSave, bulk: Bool = false) -> [Value] {
        let (committedAt, payload) = (Date().timeIntervalSince1970, Self.historyPayload(didSave))
        if !bulk {
            let after = max(delivered.withLock { $0 } ?? 0, committedHere.withLock { $0 })
            sentHistoryRow.withLock {
                $0 = SentHistoryRow(committedAt: committedAt, payload: payload, after: after, didSave: didSave)
            }
        }
        return [.double(committedAt), .data(payload), .string(hintChannel), .string(bulk ? Hint.bulkMark : "")]
    }

    /// Whether `a`'s row is locked before `b`'s: every save and batch of edits updates its rows
    /// in this one order, so that two of them waiting for each other's rows cannot deadlock.
    static func locksFirst(_ a: ObjectID, _ b: ObjectID) -> Bool {
        (a.entityName, a.key) < (b.entityName, b.key)
    }

    /// The UPDATE of `columns` (indexes into ``columnNames(of:)``, which are `names`) of a row
    /// of `entity`, checked against the version the context saw: its parameters are the
    /// columns' values, `$1`…, then the row's primary key and that version.
    static func updateText(of entity: EntityDescription, names: [String], columns: [Int]) -> String {
        var sql = "UPDATE \(PostgresSchema.quote(entity.name)) SET _version = _version + 1"
        for (position, column) in columns.enumerated() {
            sql += ", \(PostgresSchema.quote(names[column])) = $\(position + 1)"
        }
        sql += " WHERE pk = $\(columns.count + 1) AND _version = $\(columns.count + 2)"
        return sql
    }

    /// The parameters of ``updateText(of:names:columns:)`` for `row`.
    static func updateArguments(_ row: SaveChanges.Row, columns: [Int]) -> [Value] {
        columns.map { value(row, column: $0) } + [.int64(row.objectID.key), .int64(row.expectedVersion)]
    }

    /// The columns of `entity`'s rows a save may change: its attributes, then its to-one
    /// relationships, by name.
    static func columnNames(of entity: EntityDescription) -> [String] {
        entity.attributes.map(\.name) + entity.toOneRelationships.map(\.name)
    }

    /// The columns `row` changes, as indexes into ``columnNames(of:)`` of its entity, ascending.
    static func changedColumns(_ row: SaveChanges.Row, names: [String]) -> [Int] {
        row.changedKeys.compactMap { names.firstIndex(of: $0) }.sorted()
    }

    /// `row`'s value of `column`, an index into ``columnNames(of:)``: an attribute's value, or
    /// the primary key a to-one relationship points to.
    static func value(_ row: SaveChanges.Row, column: Int) -> Value {
        column < row.attributes.count
            ? row.attributes[column] : row.toOne[column - row.attributes.count].map { .int64($0.key) } ?? .null
    }

    /// The change an updated row makes, with its new values, at `version` (by default the one
    /// after the version the context saw).
    static func change(_ row: SaveChanges.Row, version: Int64? = nil) -> ObjectChange {
        let snapshot = RowSnapshot(
            version: version ?? row.expectedVersion + 1, attributes: row.attributes, toOne: row.toOne)
        return ObjectChange(
            objectID: row.objectID, version: snapshot.version, changedKeys: row.changedKeys, values: snapshot)
    }

    /// The conflict of a row whose version in the store is not the one the context saw.
    func conflict(_ row: SaveChanges.Row, entity: EntityDescription, on connection: PostgresConnection) throws
        -> MergeConflict
    {
        MergeConflict(
            objectID: row.objectID, cachedVersion: row.expectedVersion,
            persisted: try currentRow(row.objectID, entity: entity, on: connection))
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

    /// Inserts the rows entity by entity: many rows by one `COPY`, a few by one `INSERT` (a
    /// round trip per row is what bounds an import on a server). Without `waiting`, the
    /// statements go out without waiting for their answers, which are returned to be checked.
    private func writeInserts(
        _ rows: [SaveChanges.Row], into didSave: inout DidSave, state: Loaded, waiting: Bool,
        on connection: PostgresConnection
    ) throws -> [SentStatement] {
        var byEntity: [String: [SaveChanges.Row]] = [:]
        var order: [String] = []
        for row in rows {
            if byEntity[row.objectID.entityName] == nil { order.append(row.objectID.entityName) }
            byEntity[row.objectID.entityName, default: []].append(row)
        }
        var sent: [SentStatement] = []
        for name in order {
            let entity = try state.model.requireEntity(name)
            let names = entity.attributes.map(\.name) + entity.toOneRelationships.map(\.name)
            let entityRows = byEntity[name] ?? []
            let statement: SentStatement
            if entityRows.count >= Self.fewestCopiedRows {
                statement = SentStatement(
                    answer: startCopy(entityRows[...], into: entity, columns: names, on: connection), entity: entity)
            } else {
                var arguments: [Value] = []
                var tuples: [String] = []
                for row in entityRows {
                    let first = arguments.count + 1
                    arguments.append(.int64(row.objectID.key))
                    arguments += row.attributes
                    arguments += row.toOne.map { $0.map { .int64($0.key) } ?? .null }
                    let rest = ((first + 1)...arguments.count).map { ", $\($0)" }.joined()
                    tuples.append("($\(first), 1\(rest))")
                }
                let columns = names.map { ", " + PostgresSchema.quote($0) }.joined()
                let sql =
                    "INSERT INTO \(PostgresSchema.quote(entity.name)) (pk, _version\(columns)) VALUES "
                    + tuples.joined(separator: ", ")
                statement = SentStatement(
                    answer: try send(sql, arguments, on: connection).done, entity: entity,
                    attributes: entityRows.count == 1 ? entityRows[0].attributes : nil)
            }
            if waiting { try statement.check(self) } else { sent.append(statement) }
            for row in entityRows {
                didSave.inserted.append(
                    ObjectChange(
                        objectID: row.objectID, version: 1, changedKeys: [],
                        values: RowSnapshot(version: 1, attributes: row.attributes, toOne: row.toOne)))
            }
        }
        return sent
    }

    /// Removes and adds links, one statement per join table and direction; without `waiting`,
    /// as ``writeInserts(_:into:state:waiting:on:)`` sends its statements.
    private func writeLinks(
        removed: [SaveChanges.Link], added: [SaveChanges.Link], waiting: Bool, on connection: PostgresConnection
    ) throws -> [SentStatement] {
        var statements: [(String, [SaveChanges.Link])] = []
        for (table, links) in Self.byJoinTable(removed) {
            statements.append(
                (
                    "DELETE FROM \(table) t USING unnest($1::int8[], $2::int8[]) AS x(src, dst) WHERE t.src = x.src AND t.dst = x.dst",
                    links
                ))
        }
        for (table, links) in Self.byJoinTable(added) {
            statements.append(
                (
                    "INSERT INTO \(table) (src, dst) SELECT * FROM unnest($1::int8[], $2::int8[]) ON CONFLICT DO NOTHING",
                    links
                ))
        }
        var sent: [SentStatement] = []
        for (sql, links) in statements {
            let statement = SentStatement(
                answer: try send(sql, arrays: [links.map(\.source.key), links.map(\.destination.key)], on: connection)
                    .done)
            if waiting { try statement.check(self) } else { sent.append(statement) }
        }
        return sent
    }

    /// Links grouped by their join table, in the order the tables first appear.
    private static func byJoinTable(_ links: [SaveChanges.Link]) -> [(String, [SaveChanges.Link])] {
        var groups: [String: [SaveChanges.Link]] = [:]
        var order: [String] = []
        for link in links {
            let table = PostgresSchema.joinTable(owner: link.source.entityName, relationship: link.relationship)
            if groups[table] == nil { order.append(table) }
            groups[table, default: []].append(link)
        }
        return order.map { ($0, groups[$0] ?? []) }
    }

    /// Runs a write of rows of `entity`; a clash with its unique index becomes a
    /// ``GraphError/Code/constraintViolation`` that names the key (from `attributes` for one row,
    /// from the server's words for many) and what to do.
    func keepingKeysUnique<T>(
        _ entity: EntityDescription, _ attributes: [Value]?, updating: Bool, _ body: () throws -> T
    ) throws -> T {
        do {
            return try body()
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            let fromRow = attributes.flatMap { attributes in
                entity.uniqueKey.flatMap { entity.attributeIndex[$0] }.map {
                    "\(entity.uniqueKey!) = \(attributes[$0])"
                }
            }
            let key = fromRow ?? Self.clashingKey(error.serverInfo?[.detail]) ?? "its key"
            let advice =
                updating
                ? "Choose a value no other \(entity.name) has, or change that one first."
                : "Fetch and update the existing object instead of inserting a second one."
            throw GraphError(
                .constraintViolation, "Another \(entity.name) already has \(key).", advice: advice,
                cause: Described(error))
        }
    }

    /// `key = "value"` from the server's `Key (key)=(value) already exists.`
    static func clashingKey(_ detail: String?) -> String? {
        guard let detail, let match = detail.firstMatch(of: /Key \((.+?)\)=\((.*)\) already exists/) else {
            return nil
        }
        return "\(match.1) = \"\(PostgresText.decode(String(match.2)))\""
    }

    /// The row of `id` as it is in the store; with `locking`, locked until the transaction ends.
    func currentRow(_ id: ObjectID, entity: EntityDescription, on connection: PostgresConnection, locking: Bool = false)
        throws -> RowSnapshot?
    {
        try runPrepared(
            "SELECT \(PostgresSchema.columns(of: entity)) FROM \(PostgresSchema.quote(entity.name)) t WHERE t.pk = $1"
                + (locking ? " FOR UPDATE" : ""),
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

/// An update sent ahead found its row at another version than the context saw (see
/// `PostgresStore.writeInTransaction`): the save is written again one statement at a time.
private struct VersionCheckFailed: Error {}
