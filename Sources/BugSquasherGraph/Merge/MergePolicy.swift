import OrderedCollections

/// How a context resolves a conflict between its unsaved changes and newer values in the store,
/// with Core Data's semantics.
///
/// A conflict arises when a save finds that a row's version in the store is no longer the one
/// the context loaded, or when a did-save merged into the context touches an object it has
/// changed. Per property, "changed locally" means different from the context's snapshot, and
/// "changed in the store" means the store's value differs from that snapshot.
public enum MergePolicy: String, Sendable, Hashable, Codable, CaseIterable {
    /// The save fails with ``GraphError/Code/mergeConflict``, listing every conflicting object
    /// with its cached and persisted versions (`NSErrorMergePolicy`).
    case error
    /// Property by property, the store's changes win; local changes to properties the store did
    /// not change are kept (`NSMergeByPropertyStoreTrumpMergePolicy`).
    case mergeByPropertyStoreTrump
    /// Property by property, local changes win; properties changed only in the store take the
    /// store's values (`NSMergeByPropertyObjectTrumpMergePolicy`).
    case mergeByPropertyObjectTrump
    /// The object's whole state is written over the store's (`NSOverwriteMergePolicy`).
    case overwrite
    /// The object's changes are discarded in favour of the store's values
    /// (`NSRollbackMergePolicy`).
    case rollback
}

extension ContextCore {
    /// Resolves one object against the store's current row under `policy`; afterwards the
    /// object's snapshot is `persisted`, so that the next save writes over that version.
    func resolve(_ object: ManagedObject, against persisted: RowSnapshot, policy: MergePolicy) {
        if object.isFault {
            apply(persisted, to: object)
            return
        }
        guard let snapshot = object.snapshot else { return }
        let local = object.currentRow(version: snapshot.version)
        var attributes = persisted.attributes
        var toOne = persisted.toOne
        switch policy {
        case .rollback:
            break
        case .overwrite:
            attributes = local.attributes
            toOne = local.toOne
        case .mergeByPropertyObjectTrump, .error:
            for i in attributes.indices where local.attributes[i] != snapshot.attributes[i] {
                attributes[i] = local.attributes[i]
            }
            for i in toOne.indices where local.toOne[i] != snapshot.toOne[i] { toOne[i] = local.toOne[i] }
        case .mergeByPropertyStoreTrump:
            for i in attributes.indices where persisted.attributes[i] == snapshot.attributes[i] {
                attributes[i] = local.attributes[i]
            }
            for i in toOne.indices where persisted.toOne[i] == snapshot.toOne[i] { toOne[i] = local.toOne[i] }
        }
        let pendingLinks = object.toMany
        apply(persisted, to: object)
        if policy != .rollback {
            for slot in object.toMany.indices where slot < pendingLinks.count {
                object.toMany[slot].added = pendingLinks[slot].added
                object.toMany[slot].removed = pendingLinks[slot].removed
                object.toMany[slot].addedRows = pendingLinks[slot].addedRows
            }
        }
        object.values = attributes
        object.toOne = toOne.map { $0.map(self.object(for:)) }
        if object.hasChanges { updated.append(object) } else { updated.remove(object) }
        flushRegistrations()
    }
}
