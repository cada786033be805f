import Logging
import OrderedCollections

extension ContextCore {
    /// Validates pending changes: required attributes, attribute types, deny rules.
    func validate(inserted: [ManagedObject], updated: [ManagedObject], deleted: [ManagedObject]) throws {
        var problems = rowProblems()
        for object in inserted + updated {
            // Every attribute of every object a chunk saves: checked in place (copying each
            // attribute's description, or building its message, for the values that pass was
            // a tenth of a save).
            let attributes = object.entity.attributes
            let values = object.values
            for index in attributes.indices where !attributes[index].accepts(values[index]) {
                if let problem = attributes[index].problem(
                    storing: values[index], in: object.entity.name, of: object.objectID)
                {
                    problems.append(problem)
                }
            }
        }
        for object in deleted {
            for relationship in object.entity.relationships where relationship.deleteRule == .deny {
                let hasTargets =
                    relationship.isToMany
                    ? !members(of: object, slot: object.entity.toManyIndex[relationship.name]!).isEmpty
                    : object.toOne[object.entity.toOneIndex[relationship.name]!] != nil
                if hasTargets {
                    problems.append(
                        "\(object.objectID) cannot be deleted while its '\(relationship.name)' relationship is not empty (deny rule): delete those objects, or point them elsewhere, first"
                    )
                }
            }
        }
        guard problems.isEmpty else {
            var error = GraphError(
                .validation,
                "The save was refused: \(problems.prefix(20).joined(separator: "; "))\(problems.count > 20 ? "; and \(problems.count - 20) more" : "").",
                advice: "Fix these objects, or roll back."
            )
            error.problems = problems
            throw error
        }
    }

    /// Replaces the temporary IDs of inserted objects, and of the rows inserted without objects,
    /// with permanent ones from the store, in one call.
    func obtainPermanentIDs(for objects: [ManagedObject]) throws {
        let temporary = objects.filter { $0.objectID.isTemporary }
        let temporaryRows = temporaryRowIDs
        guard !temporary.isEmpty || !temporaryRows.isEmpty else { return }
        var permanent = try coordinator.obtainPermanentIDs(for: temporary.map { $0.objectID } + temporaryRows)
        if !temporaryRows.isEmpty {
            adoptRowIDs(permanent[temporary.count...])
            permanent.removeLast(permanent.count - temporary.count)
        }
        guard !temporary.isEmpty else { return }
        guard temporary.count * 2 > registered.count else {
            for (object, id) in zip(temporary, permanent) {
                registered[object.objectID] = nil
                object.objectID = id
                registered[id] = object
            }
            return
        }
        // Mostly new objects (an import's chunk): the registry is built again under the new
        // IDs, which costs an insertion per object instead of a removal and an insertion.
        for (object, id) in zip(temporary, permanent) { object.objectID = id }
        var rebuilt: [ObjectID: ManagedObject] = [:]
        rebuilt.reserveCapacity(registered.count)
        for object in registered.values { rebuilt[object.objectID] = object }
        registered = rebuilt
    }

    /// Whether saving `object` writes its row or its owned join rows, not only a new version
    /// (see ``ObjectContext/writesStoredValues(of:)``); the same test as ``saveChanges``' links.
    func writesStoredValues(of object: ManagedObject) -> Bool {
        if object.isInserted || object.isDeleted { return true }
        if object.isFault { return false }
        guard let snapshot = object.snapshot else { return true }
        if object.values != snapshot.attributes { return true }
        if object.toOne.indices.contains(where: { object.toOne[$0]?.objectID != snapshot.toOne[$0] }) { return true }
        return model.ownedLinkSlots[object.entity.name, default: []].contains {
            $0 < object.toMany.count && object.toMany[$0].hasChanges
        }
    }

    /// Builds the store-level description of the pending changes.
    func saveChanges(inserted: [ManagedObject], updated: [ManagedObject], deleted: [ManagedObject]) -> SaveChanges {
        var changes = SaveChanges()
        changes.inserted.reserveCapacity(inserted.count)
        for object in inserted {
            changes.inserted.append(
                .init(
                    objectID: object.objectID, expectedVersion: 0, attributes: object.values,
                    toOne: object.toOne.map { $0?.objectID }, changedKeys: []))
        }
        for object in updated {
            changes.updated.append(
                .init(
                    objectID: object.objectID, expectedVersion: object.snapshot?.version ?? 0,
                    attributes: object.values, toOne: object.toOne.map { $0?.objectID }, changedKeys: object.changedKeys
                ))
        }
        for object in deleted {
            changes.deleted.append(.init(objectID: object.objectID, expectedVersion: object.snapshot?.version ?? 0))
        }
        for object in inserted + updated {
            for slot in model.ownedLinkSlots[object.entity.name, default: []] where slot < object.toMany.count {
                let state = object.toMany[slot]
                guard state.hasChanges else { continue }
                let name = object.entity.toManyRelationships[slot].name
                for target in state.added where !target.isDeleted {
                    changes.linksAdded.append(
                        .init(source: object.objectID, relationship: name, destination: target.objectID))
                }
                for target in state.removed {
                    changes.linksRemoved.append(
                        .init(source: object.objectID, relationship: name, destination: target.objectID))
                }
            }
        }
        return changes
    }

    /// Saves the pending changes to the store, resolving conflicts with the merge policy.
    ///
    /// - Returns: the did-save, or `nil` when there was nothing to save.
    ///
    /// With `retiring`, the context is dropped after the save (an importer's chunk): the inserted
    /// objects are neither given snapshots nor registered with the coordinator — work that
    /// dropping them would undo at once — and the context is marked retired.
    func saveToStore(retiring: Bool = false) throws -> DidSave? {
        var attempt = 0
        while true {
            attempt += 1
            let (inserted, updated, deleted) = pendingChanges()
            guard !inserted.isEmpty || !rows.isEmpty || !updated.isEmpty || !deleted.isEmpty else {
                self.updated.removeAll()
                return nil
            }
            try validate(inserted: inserted, updated: updated, deleted: deleted)
            try obtainPermanentIDs(for: inserted)
            var changes = saveChanges(inserted: inserted, updated: updated, deleted: deleted)
            appendRows(to: &changes)
            changes.isBulk = savesAreBulk
            do {
                let didSave = try coordinator.save(changes)
                if retiring { isRetired = true }
                dropRows()
                didSaveToStore(didSave, inserted: retiring ? [] : inserted, updated: updated, deleted: deleted)
                return didSave
            } catch let error as GraphError where error.code == .mergeConflict && mergePolicy != .error && attempt < 5 {
                logger.debug(
                    "save met newer versions; resolving with the merge policy",
                    metadata: [
                        "conflicts": "\(error.conflicts.count)", "merge.policy": "\(mergePolicy)",
                    ])
                try resolveSaveConflicts(error.conflicts)
                coordinator.noteResolvedConflicts(error.conflicts.count)
            }
        }
    }

    /// Applies the merge policy to objects whose save met newer versions in the store.
    ///
    /// - Throws: `GraphError` with code `mergeConflict`, listing them, when the context
    ///   ``failsOverStoreDeletions`` and objects it changed were deleted in the store.
    private func resolveSaveConflicts(_ conflicts: [MergeConflict]) throws {
        if failsOverStoreDeletions {
            let lost = conflicts.filter { $0.persisted == nil && registered[$0.objectID].map { !$0.isDeleted } == true }
            if !lost.isEmpty {
                let named =
                    lost.prefix(3).map { "\($0.objectID)" }.joined(separator: ", ") + (lost.count > 3 ? ", …" : "")
                throw GraphError(
                    .mergeConflict,
                    "\(lost.count) object(s) this context changed were deleted in the store meanwhile (\(named)); nothing was saved.",
                    advice: "Fetch them again to save them anew.",
                    conflicts: lost)
            }
        }
        for conflict in conflicts {
            guard let object = registered[conflict.objectID] else { continue }
            guard let persisted = conflict.persisted else {
                // The store deleted the row: the deletion wins under every policy.
                object.isDeleted = true
                forget(object)
                continue
            }
            if object.isDeleted {
                if mergePolicy == .rollback || mergePolicy == .mergeByPropertyStoreTrump {
                    object.isDeleted = false
                    deleted.remove(object)
                    apply(persisted, to: object)
                } else {
                    object.snapshot?.version = persisted.version
                }
                continue
            }
            resolve(object, against: persisted, policy: mergePolicy)
        }
    }

    /// Makes saved values the objects' snapshots and registers the inserted objects.
    func didSaveToStore(
        _ didSave: DidSave, inserted: [ManagedObject], updated: [ManagedObject], deleted: [ManagedObject]
    ) {
        var versions: [ObjectID: Int64] = [:]
        // Without inserted objects (a retired context's, or rows), their versions are not needed.
        versions.reserveCapacity((inserted.isEmpty ? 0 : didSave.inserted.count) + didSave.updated.count)
        if !inserted.isEmpty {
            for change in didSave.inserted { versions[change.objectID] = change.version }
        }
        for change in didSave.updated { versions[change.objectID] = change.version }
        var updatedRows: [ObjectID: RowSnapshot] = [:]
        for object in inserted {
            object.isInserted = false
            object.snapshot = object.currentRow(version: versions[object.objectID] ?? 1)
            object.clearPendingLinks()
        }
        for object in updated {
            let previous = object.snapshot?.version ?? 0
            let version = versions[object.objectID] ?? previous + 1
            let row = object.currentRow(version: version)
            object.snapshot = row
            updatedRows[object.objectID] = row
            object.clearPendingLinks()
            // The store saved this change on top of another process's that changed only the
            // object's to-many relationships (a shared store: see PostgresStore's `touch`): the
            // members loaded here may miss what that one added, so they load again when asked.
            if version > previous + 1 {
                for slot in object.toMany.indices { object.toMany[slot].members = nil }
            }
        }
        // Inserted objects hold their values; the row cache fills when another context asks.
        coordinator.register(inserted.map { $0.objectID })
        coordinator.prime(updatedRows)
        for object in deleted { forget(object) }
        self.inserted.removeAll()
        self.updated.removeAll()
        self.deleted.removeAll()
        notifyLiveQueries(didSave)
    }
}
