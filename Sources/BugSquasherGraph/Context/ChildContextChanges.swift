import OrderedCollections

/// One object's unsaved state, as a parent shows it to a child context or a child pushes it to
/// its parent.
struct PendingRow: Sendable {
    var objectID: ObjectID
    var row: RowSnapshot
    var added: [String: [ObjectID]]
    var removed: [String: [ObjectID]]
    var isInserted: Bool
    var isDeleted: Bool
}

/// The parent's unsaved changes as a child context sees them.
struct ParentOverlay: Sendable {
    var rows: [ObjectID: PendingRow]
}

/// What a child context's save pushes into its parent.
struct ChildChanges: Sendable {
    var rows: [PendingRow]
}

extension ContextCore {
    func pendingRow(for object: ManagedObject) -> PendingRow {
        var added: [String: [ObjectID]] = [:]
        var removed: [String: [ObjectID]] = [:]
        for (slot, relationship) in object.entity.toManyRelationships.enumerated() where slot < object.toMany.count {
            if !object.toMany[slot].added.isEmpty {
                added[relationship.name] = object.toMany[slot].added.map(\.objectID)
            }
            if !object.toMany[slot].removed.isEmpty {
                removed[relationship.name] = object.toMany[slot].removed.map(\.objectID)
            }
        }
        return PendingRow(
            objectID: object.objectID, row: object.currentRow(version: object.snapshot?.version ?? 0),
            added: added, removed: removed, isInserted: object.isInserted, isDeleted: object.isDeleted
        )
    }

    /// This context's unsaved changes, for a new child.
    func overlayForChild() -> ParentOverlay {
        let (inserted, updated, deleted) = pendingChanges()
        var rows: [ObjectID: PendingRow] = [:]
        for object in inserted + updated + deleted { rows[object.objectID] = pendingRow(for: object) }
        return ParentOverlay(rows: rows)
    }

    /// Collects a child's changes to push into its parent, then treats them as saved.
    func changesForParent() throws -> ChildChanges? {
        let (inserted, updated, deleted) = pendingChanges()
        guard !inserted.isEmpty || !updated.isEmpty || !deleted.isEmpty else { return nil }
        try validate(inserted: inserted, updated: updated, deleted: deleted)
        try obtainPermanentIDs(for: inserted)
        let changes = ChildChanges(rows: (inserted + updated + deleted).map(pendingRow(for:)))
        for object in inserted + updated {
            object.isInserted = false
            object.snapshot = object.currentRow(version: object.snapshot?.version ?? 0)
            object.clearPendingLinks()
        }
        for object in deleted { forget(object) }
        self.inserted.removeAll()
        self.updated.removeAll()
        self.deleted.removeAll()
        return changes
    }

    /// Applies a child's pushed changes as this context's own unsaved changes.
    func absorb(_ changes: ChildChanges) {
        // Objects first, so that relationships among new objects resolve.
        for pending in changes.rows where pending.isInserted && registered[pending.objectID] == nil {
            guard let entity = model.entity(named: pending.objectID.entityName) else { continue }
            insert(entity: entity, objectID: pending.objectID).values = pending.row.attributes
        }
        for pending in changes.rows {
            let object = self.object(for: pending.objectID)
            if object.isFault { fulfillFault(object) }
            if pending.isDeleted {
                object.isDeleted = true
                updated.remove(object)
                if object.isInserted {
                    inserted.remove(object)
                    registered[object.objectID] = nil
                } else {
                    deleted.append(object)
                }
                continue
            }
            for index in pending.row.attributes.indices where index < object.values.count {
                object.setValue(pending.row.attributes[index], at: index)
            }
            for (slot, target) in pending.row.toOne.enumerated() where slot < object.toOne.count {
                if object.toOne[slot]?.objectID != target {
                    object.toOne[slot] = target.map(self.object(for:))
                    didChange(object)
                }
            }
            for (slot, relationship) in object.entity.toManyRelationships.enumerated() where slot < object.toMany.count
            {
                for id in pending.added[relationship.name, default: []] {
                    object.toMany[slot].insert(self.object(for: id))
                }
                for id in pending.removed[relationship.name, default: []] {
                    object.toMany[slot].remove(self.object(for: id))
                }
                if pending.added[relationship.name] != nil || pending.removed[relationship.name] != nil {
                    didChange(object)
                }
            }
        }
        flushRegistrations()
    }
}
