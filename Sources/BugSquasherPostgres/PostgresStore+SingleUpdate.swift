public import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// An edit of one object, the commonest save of all, in one statement: the row's update, the
// counter row's, the history row and the hint as data-modifying CTEs. One statement is its own
// transaction, so the edit costs one round trip instead of four (BEGIN, the row, the token,
// COMMIT), and the counter row's lock is held for that one.
extension PostgresStore {
    /// The one updated row of a save that changes nothing else.
    static func singleUpdate(_ changes: SaveChanges) -> SaveChanges.Row? {
        guard changes.updated.count == 1, changes.inserted.isEmpty, changes.deleted.isEmpty,
            changes.linksAdded.isEmpty, changes.linksRemoved.isEmpty
        else { return nil }
        return changes.updated[0]
    }

    /// Writes `row` and its history row in one statement; a version the store no longer has
    /// commits nothing and throws the merge conflict, as ``save(_:)`` does for any save.
    func writeSingleUpdate(_ row: SaveChanges.Row, state: Loaded, bulk: Bool, on connection: PostgresConnection)
        throws -> DidSave
    {
        let entity = try state.model.requireEntity(row.objectID.entityName)
        var didSave = DidSave(token: .zero, storeIdentifier: state.metadata.storeIdentifier)
        didSave.updated = [Self.change(row)]
        let names = Self.columnNames(of: entity)
        let columns = Self.changedColumns(row, names: names)
        var arguments = Self.updateArguments(row, columns: columns)
        let sql = singleUpdateText(entity, names: names, columns: columns)
        arguments += tokenArguments(didSave, bulk: bulk)
        let token = try keepingKeysUnique(entity, row.attributes, updating: true) {
            try runPrepared(sql, arguments, on: connection).first?.makeRandomAccess()[0].decode(Int64.self)
        }
        guard let token else {
            // Answered, and nothing committed: a failure from here on is no lost save. A save that
            // committed keeps its row noted, so that it is never taken for one that did not.
            sentHistoryRow.withLock { $0 = nil }
            throw GraphError.staleObjects([try conflict(row, entity: entity, on: connection)])
        }
        didSave.token = HistoryToken(rawValue: token)
        return didSave
    }

    /// The statement of ``writeSingleUpdate(_:state:bulk:on:)`` changing `columns` of `entity`, built
    /// once for each: building it took a fifth of an edit's work before the edit went out.
    private func singleUpdateText(_ entity: EntityDescription, names: [String], columns: [Int]) -> String {
        let shape = SingleUpdateShape(entity: entity.name, columns: columns)
        if let text = singleUpdateTexts.withLock({ $0[shape] }) { return text }
        let text = """
            WITH changed AS (\(Self.updateText(of: entity, names: names, columns: columns)) RETURNING pk),
            \(Self.issuingToken(when: "EXISTS (SELECT 1 FROM changed)", first: columns.count + 3))
            """
        singleUpdateTexts.withLock { texts in
            // As many as statements are prepared: an entity's sets of columns are many.
            if texts.count < PreparedNames.limit { texts[shape] = text }
        }
        return text
    }
}

/// What the statement of a one-object edit depends on: the entity and the columns it changes
/// (indexes into `PostgresStore.columnNames(of:)`).
struct SingleUpdateShape: Hashable, Sendable {
    let entity: String
    let columns: [Int]
}

// `Import.Update` of attributes without a context: the row a recent save left or, without one,
// the row read on the reading connection, then the one-statement edit above, checked against
// that version; when another save came between, the edit again with the row locked.
extension PostgresStore: AttributeEditable {
    public func edit(_ request: AttributeEditRequest) throws -> AttributeEditOutcome {
        let state = try requireLoaded()
        let edit = try AttributeEdit(request, model: state.model, store: state.metadata.storeIdentifier)
        // The row a recent save left, when there is one: the version check tells whether it is
        // still the store's.
        let kept = recentRows.withLock { $0[request.objectID] }
        let current =
            try kept
            ?? withReadingConnection("load values") { try currentRow(request.objectID, entity: edit.entity, on: $0) }
        let save: SaveChanges?
        do {
            save = try edit.save(from: current)
        } catch let error as GraphError where error.code == .mergeConflict && kept != nil {
            // A kept row may be older than the store's: only the store's row can say whether
            // the version the edit expects is gone.
            return try editLocked(edit, state: state)
        }
        guard let save else {
            // Nothing changes against a kept row, which may be older than the store's (an edit
            // elsewhere not delivered yet): only the store's row can say so. A row just read
            // held the values at its version.
            return kept == nil ? .unchanged(version: current?.version ?? 0) : try editLocked(edit, state: state)
        }
        do {
            return .saved(try self.save(save))
        } catch let error as GraphError where error.code == .mergeConflict {
            return try editLocked(edit, state: state)
        }
    }

    /// The edit in one transaction that reads the row with `FOR UPDATE`: no other save can come
    /// between, so it cannot conflict, however busy the row (four round trips instead of one),
    /// unless it expects a version the row is not at.
    private func editLocked(_ edit: AttributeEdit, state: Loaded) throws -> AttributeEditOutcome {
        try savingOnceMore(
            {
                // Once more when the kept session had ended before the token went out, as `save`.
                try withConnection("save", onceMoreIfEnded: true) { connection in
                    let outcome = try transaction(on: connection) { () -> AttributeEditOutcome in
                        let row = try currentRow(edit.objectID, entity: edit.entity, on: connection, locking: true)
                        guard let save = try edit.save(from: row) else {
                            return .unchanged(version: row?.version ?? 0)
                        }
                        return .saved(try write(save, state: state, on: connection))
                    }
                    if case .saved(let didSave) = outcome { deliverOwn(didSave, on: connection) }
                    return outcome
                }
            }, found: { .saved($0) })
    }
}
