public import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// Edits that queued up in squasherd while one committed, committed together: their rows'
// updates, the counter row's, one history row and one hint in one statement, as one edit is
// (`writeSingleUpdate`). Every save takes the counter row's lock, so the store's saves go one
// at a time whoever makes them; a round trip that commits sixteen edits instead of one is what
// lets many writers through. Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit
// together".
extension PostgresStore: BatchEditable {
    public func edit(batch edits: [AttributeEditRequest]) -> [Result<AttributeEditOutcome, any Error>] {
        var results = [Result<AttributeEditOutcome, any Error>?](repeating: nil, count: edits.count)
        if edits.count > 1, let state = try? requireLoaded() {
            // Only the edits of rows a recent save left go together: the others read their row
            // first, and may change nothing. Any edit that cannot be built, or that expects another
            // version than the kept row's, goes alone, to throw or to read the store's row.
            var together: [(index: Int, row: SaveChanges.Row, entity: EntityDescription)] = []
            for (index, request) in edits.enumerated() {
                guard let kept = recentRows.withLock({ $0[request.objectID] }),
                    let edit = try? AttributeEdit(request, model: state.model, store: state.metadata.storeIdentifier),
                    let save = try? edit.save(from: kept)
                else { continue }
                together.append((index, save.updated[0], edit.entity))
            }
            if together.count > 1 {
                do {
                    if let didSave = try saveTogether(together.map { ($0.row, $0.entity) }, state: state) {
                        for edit in together { results[edit.index] = .success(.saved(didSave)) }
                    }
                } catch {
                    // The server or the connection failed: whether the statement committed is
                    // not known, as for an edit alone, and trying each again would not say.
                    for edit in together { results[edit.index] = .failure(error) }
                }
            }
        }
        return edits.indices.map { index in
            results[index] ?? Result { try edit(edits[index]) }
        }
    }

    /// Writes `rows` and one history row for them all in one statement, its own transaction;
    /// `nil`, with nothing committed, when a row's version is not the store's any more, a new
    /// value clashes with another row's unique key, or the server broke a deadlock with it (each
    /// edit alone then says what it says alone).
    private func saveTogether(_ rows: [(row: SaveChanges.Row, entity: EntityDescription)], state: Loaded) throws
        -> DidSave?
    {
        // Rows listed in the order every save locks them (an UPDATE over a short VALUES list
        // visits them in its order; a deadlock all the same sends each edit alone).
        let rows = rows.sorted { Self.locksFirst($0.row.objectID, $1.row.objectID) }
        var didSave = DidSave(token: .zero, storeIdentifier: state.metadata.storeIdentifier)
        didSave.updated = rows.map { Self.change($0.row) }
        // Rows changing the same columns of one entity go in one UPDATE … FROM (VALUES …): one
        // statement for the server to plan however many there are (an UPDATE of its own for each
        // of sixteen rows cost 0.3 ms of planning).
        var groups: [(entity: EntityDescription, names: [String], columns: [Int], rows: [SaveChanges.Row])] = []
        for (row, entity) in rows {
            let names = Self.columnNames(of: entity)
            let columns = Self.changedColumns(row, names: names)
            if let index = groups.firstIndex(where: { $0.entity.name == entity.name && $0.columns == columns }) {
                groups[index].rows.append(row)
            } else {
                groups.append((entity, names, columns, [row]))
            }
        }
        var arguments: [Value] = []
        var updates: [String] = []
        for (index, group) in groups.enumerated() {
            // The first row's parameters name their types; the other rows' take them from it.
            let types =
                ["bigint", "bigint"]
                + group.columns.map { column in
                    column < group.entity.attributes.count
                        ? PostgresSchema.castType(group.entity.attributes[column].type) : "bigint"
                }
            var tuples: [String] = []
            for (position, row) in group.rows.enumerated() {
                arguments += [.int64(row.objectID.key), .int64(row.expectedVersion)]
                arguments += group.columns.map { Self.value(row, column: $0) }
                let first = arguments.count - types.count
                let cells = types.indices.map { "$\(first + $0 + 1)" + (position == 0 ? "::\(types[$0])" : "") }
                tuples.append("(\(cells.joined(separator: ", ")))")
            }
            let sets =
                ["_version = t._version + 1"]
                + group.columns.enumerated().map { "\(PostgresSchema.quote(group.names[$1])) = v.c\($0)" }
            let names = ["pk", "expected"] + group.columns.indices.map { "c\($0)" }
            updates.append(
                """
                u\(index) AS (UPDATE \(PostgresSchema.quote(group.entity.name)) AS t SET \(sets.joined(separator: ", "))
                FROM (VALUES \(tuples.joined(separator: ", "))) AS v (\(names.joined(separator: ", ")))
                WHERE t.pk = v.pk AND t._version = v.expected RETURNING 1)
                """)
        }
        arguments.append(.int64(Int64(rows.count)))
        let count = arguments.count
        // The counter row is taken after every row's update (its condition reads them all), and
        // divides by zero unless every update found its version: the error rolls the statement
        // back whole, as a save with a stale row is.
        let sql = """
            WITH \(updates.joined(separator: ",\n")),
            changed AS (SELECT count(*) AS n FROM (\(groups.indices.map { "SELECT 1 FROM u\($0)" }.joined(separator: " UNION ALL "))) AS each),
            \(Self.issuingToken(when: "1 / ((SELECT n FROM changed) = $\(count))::int = 1", first: count + 1))
            """
        return try savingOnceMore({ try write(together: sql, arguments, didSave: didSave) }, found: { $0 })
    }

    /// Runs the statement of ``saveTogether(_:state:)``, its history row's parameters last.
    private func write(together sql: String, _ rowArguments: [Value], didSave: DidSave) throws -> DidSave? {
        var didSave = didSave
        return try withConnection("save") { connection in
            let arguments = rowArguments + tokenArguments(didSave)
            // Edits: bulk work gives way, as for a save of one (see `save`).
            editsFirst?.openWindow()
            let token: Int64
            do {
                guard let row = try runPrepared(sql, arguments, on: connection).first else { return nil }
                token = try row.makeRandomAccess()[0].decode(Int64.self)
                editsFirst?.openWindow()
            } catch let error as PSQLError
                where [Self.divisionByZero, Self.uniqueViolation, Self.deadlock].contains(error.serverInfo?[.sqlState])
            {
                return nil
            }
            didSave.token = HistoryToken(rawValue: token)
            deliverOwn(didSave, on: connection)
            return didSave
        }
    }

    /// The SQLSTATE of the batch's version check failing (see `saveTogether`).
    private static let divisionByZero = "22012"
    /// The SQLSTATE of a unique key that another row has.
    private static let uniqueViolation = "23505"
    /// The SQLSTATE of a statement the server rolled back to end a deadlock (a save of another
    /// program that locks rows in another order).
    private static let deadlock = "40P01"
}
