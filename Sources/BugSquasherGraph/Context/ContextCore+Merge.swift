import Logging
import OrderedCollections

extension ContextCore {
    /// Merges a did-save: refreshes registered objects that were updated, deletes registered
    /// objects that were deleted, and loads nothing that is not registered.
    func merge(_ didSave: DidSave) -> MergeResult {
        coordinator.absorb(didSave)
        var result = MergeResult(token: didSave.token)
        guard didSave.storeIdentifier == coordinator.storeIdentifier else { return result }
        guard !registered.isEmpty else {
            notifyLiveQueries(didSave)
            return result
        }
        // One look-up per change (cheaper than indexing the changes to walk the registered
        // objects, however many there are).
        var touched: [(ManagedObject, ObjectChange)] = []
        for changes in [didSave.inserted, didSave.updated] {
            for change in changes {
                if let object = registered[change.objectID] { touched.append((object, change)) }
            }
        }
        var needRows: [ManagedObject] = []
        for (object, change) in touched {
            if let version = object.snapshot?.version, version >= change.version { continue }
            if object.isFault {
                result.refreshed.append(object.objectID)
                continue
            }
            if object.hasChanges {
                if let values = change.values {
                    resolve(object, against: values, policy: mergePolicy)
                } else {
                    needRows.append(object)
                }
            } else if let values = change.values {
                apply(values, to: object)
            } else {
                turnIntoFault(object)
            }
            result.refreshed.append(object.objectID)
        }
        if !needRows.isEmpty {
            let rows = (try? coordinator.rows(for: needRows.map(\.objectID))) ?? [:]
            for object in needRows {
                if let row = rows[object.objectID] { resolve(object, against: row, policy: mergePolicy) }
            }
        }
        for change in didSave.deleted {
            guard let object = registered[change.objectID] else { continue }
            object.isDeleted = true
            forget(object)
            result.deleted.append(change.objectID)
        }
        flushRegistrations()
        notifyLiveQueries(didSave)
        return result
    }

    func notifyLiveQueries(_ didSave: DidSave) {
        liveQueries.removeAll { $0.query == nil }
        for entry in liveQueries { entry.query?.contextDidChange(didSave) }
    }

    /// Re-reads an object. Without `mergeChanges` its unsaved changes are discarded and it
    /// becomes a fault; with it, the store's newest values are loaded and the local changes are
    /// kept on top.
    func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
        guard object.core === self, !object.isInserted else { return }
        guard mergeChanges, object.hasChanges else {
            if object.isDeleted {
                object.isDeleted = false
                deleted.remove(object)
            }
            turnIntoFault(object)
            return
        }
        guard let row = try coordinator.store.newValues(for: object.objectID) else {
            throw GraphError(
                .objectNotFound, "\(object.objectID) is no longer in the store; it was deleted by another save.")
        }
        coordinator.prime([object.objectID: row])
        resolve(object, against: row, policy: .mergeByPropertyObjectTrump)
    }
}

/// What merging a did-save did to a context.
public struct MergeResult: Sendable, Hashable {
    /// The merged save's token.
    public var token: HistoryToken
    /// Registered objects that were refreshed (faults stay faults and read the new values when
    /// touched).
    public var refreshed: [ObjectID] = []
    /// Registered objects that the save deleted.
    public var deleted: [ObjectID] = []

    /// Creates a result.
    public init(token: HistoryToken, refreshed: [ObjectID] = [], deleted: [ObjectID] = []) {
        self.token = token
        self.refreshed = refreshed
        self.deleted = deleted
    }
}
