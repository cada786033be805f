/// A row inserted without a managed object (see ``ObjectContext/insertRow(_:values:)``).
struct InsertedRow {
    /// Temporary until the save obtains permanent IDs.
    var objectID: ObjectID
    let entity: EntityDescription
    var values: [Value]
    /// One per to-one relationship of the entity, `nil` where it points at nothing.
    var toOne: [RowTarget?]
    /// The objects added to the row's many-to-many relationships whose links the entity owns.
    var links: [(slot: Int, target: ManagedObject)] = []
}

/// What a row's to-one relationship points at: a registered object, or another row of the
/// context (by position).
enum RowTarget {
    case object(ManagedObject)
    case row(Int)
}

extension ContextCore {
    /// See ``ObjectContext/insertRow(_:values:)``.
    func insertRow(entity: EntityDescription, values: [Value]) -> ObjectID {
        precondition(
            parentOverlay == nil,
            "Rows are inserted in a context that saves to the store; a child context inserts objects.")
        precondition(
            values.count == entity.attributes.count,
            "A row of '\(entity.name)' takes \(entity.attributes.count) values, not \(values.count).")
        let id = ObjectID.temporary(entity: entity.name)
        rowIndex[id] = rows.count
        rows.append(
            InsertedRow(
                objectID: id, entity: entity, values: values,
                toOne: Array(repeating: nil, count: entity.toOneRelationships.count)))
        return id
    }

    /// The position of the row with `id`, as a target of another row's to-one relationship.
    func rowTarget(_ id: ObjectID) -> RowTarget { .row(requireRow(id)) }

    /// Points a row's to-one relationship at `new`, counting the row out of the old object's
    /// inverse and into the new one's.
    func setToOne(ofRow id: ObjectID, slot: Int, to new: RowTarget?) {
        let index = requireRow(id)
        let entity = rows[index].entity
        precondition(
            slot < rows[index].toOne.count,
            "'\(entity.name)' has \(rows[index].toOne.count) to-one relationships; there is none at \(slot).")
        if case .object(let old) = rows[index].toOne[slot] { countRow(-1, on: old, inverseOfToOne: slot, in: entity) }
        rows[index].toOne[slot] = new
        if case .object(let object) = new { countRow(1, on: object, inverseOfToOne: slot, in: entity) }
    }

    /// Adds `target` to a row's many-to-many relationship (see ``ObjectContext/add(_:toRow:_:)``).
    func add(_ target: ManagedObject, toRow id: ObjectID, slot: Int) {
        let index = requireRow(id)
        let entity = rows[index].entity
        precondition(
            model.ownedLinkSlots[entity.name, default: []].contains(slot),
            "'\(entity.name).\(entity.toManyRelationships[slot].name)' is not a many-to-many relationship whose links '\(entity.name)' keeps."
        )
        guard !rows[index].links.contains(where: { $0.slot == slot && $0.target === target }) else { return }
        rows[index].links.append((slot, target))
        if let inverse = model.inverse(ofToMany: slot, in: entity) {
            changeMembers(of: target, slot: inverse.slot) { $0.addedRows += 1 }
        }
    }

    /// The position of the row with `id`; a precondition failure for another ID.
    private func requireRow(_ id: ObjectID) -> Int {
        // Mostly the row just inserted, whose relationships are set next: no lookup.
        if let last = rows.indices.last, rows[last].objectID == id { return last }
        guard let index = rowIndex[id] else {
            preconditionFailure("\(id) is not a row inserted in this context and not saved yet.")
        }
        return index
    }

    /// Counts a row in (or out of) the to-many inverse of a to-one relationship on `object`, so
    /// that the object is saved as changed, as it would be for an inserted object.
    private func countRow(
        _ delta: Int, on object: ManagedObject, inverseOfToOne slot: Int, in entity: EntityDescription
    ) {
        guard let inverse = model.inverse(ofToOne: slot, in: entity) else { return }
        precondition(
            inverse.relationship.isToMany,
            "'\(entity.name).\(entity.toOneRelationships[slot].name)' has a to-one inverse: rows take only to-one relationships whose inverse is to-many."
        )
        changeMembers(of: object, slot: inverse.slot) { $0.addedRows += delta }
    }

    /// Checks the rows' values as ``validate(inserted:updated:deleted:)`` checks objects'.
    func rowProblems() -> [String] {
        var problems: [String] = []
        // Read in place: a copy of each row would retain its arrays, for every row of a chunk.
        for row in rows.indices {
            let attributes = rows[row].entity.attributes
            for index in attributes.indices where !attributes[index].accepts(rows[row].values[index]) {
                if let problem = attributes[index].problem(
                    storing: rows[row].values[index], in: rows[row].entity.name, of: rows[row].objectID)
                {
                    problems.append(problem)
                }
            }
        }
        return problems
    }

    /// The store-level description of the rows: inserts, and the links they own.
    func appendRows(to changes: inout SaveChanges) {
        changes.inserted.reserveCapacity(changes.inserted.count + rows.count)
        for row in rows {
            let toOne = row.toOne.map { target -> ObjectID? in
                switch target {
                case .object(let object): object.objectID
                case .row(let index): rows[index].objectID
                case nil: nil
                }
            }
            changes.inserted.append(
                .init(objectID: row.objectID, expectedVersion: 0, attributes: row.values, toOne: toOne, changedKeys: [])
            )
            for (slot, target) in row.links where !target.isDeleted {
                changes.linksAdded.append(
                    .init(
                        source: row.objectID, relationship: row.entity.toManyRelationships[slot].name,
                        destination: target.objectID))
            }
        }
    }

    /// The temporary IDs of the rows, in order: those the save obtains permanent IDs for.
    var temporaryRowIDs: [ObjectID] {
        var ids: [ObjectID] = []
        ids.reserveCapacity(rows.count)
        for row in rows where row.objectID.isTemporary { ids.append(row.objectID) }
        return ids
    }

    /// Gives the rows the permanent IDs obtained for them, in the order of
    /// ``temporaryRowIDs``. ``rowIndex`` keeps the IDs ``insertRow(entity:values:)`` returned,
    /// the ones callers hold, until the save drops the rows.
    func adoptRowIDs(_ ids: ArraySlice<ObjectID>) {
        var next = ids.startIndex
        for index in rows.indices where rows[index].objectID.isTemporary && next < ids.endIndex {
            rows[index].objectID = ids[next]
            next += 1
        }
    }

    /// Forgets the rows (saved, or discarded).
    func dropRows() {
        rows.removeAll()
        rowIndex.removeAll()
    }
}
