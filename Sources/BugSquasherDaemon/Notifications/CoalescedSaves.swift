import BugSquasherGraph

/// A save in a subscriber's mailbox.
struct QueuedSave: Sendable {
    /// The save, as this subscriber receives it.
    var save: DidSave
    /// The encoding this save shares with every other subscriber that receives the same save
    /// with the same options; `nil` for a save filtered to one subscriber's registrations.
    let encoding: SharedEncoding?
}

/// Consecutive saves merged one at a time, in time proportional to each save: the newest
/// version of each object, its changed keys merged; an object deleted last is only deleted, and
/// one inserted and deleted in between is gone.
///
/// While the saves' inserted and deleted objects are disjoint, as an import's chunks are, only the
/// updated ones are merged by object: the other lists stay in their saves (``disjoint``), neither
/// hashed nor encoded again, until a save may touch an object inserted or deleted before.
///
/// Why it is built this way: docs/PROTOCOL.md, "Backpressure".
struct CoalescedSaves: Sendable {
    /// The token of the newest save merged (or skipped).
    var token: HistoryToken = .zero
    let storeIdentifier: String

    /// The saves, while their inserted and deleted objects are disjoint; `nil` once every
    /// object is merged.
    private var saves: [QueuedSave]? = []
    /// Per entity, the smallest and largest primary key that `saves` inserted.
    private var insertedKeys: [String: ClosedRange<Int64>] = [:]
    /// The objects `saves` deleted.
    private var deletedObjects: Set<ObjectID> = []
    /// Per entity, the smallest and largest primary key in `updated` while `saves` is kept: an
    /// import's inserts lie past the bugs it updates, and need no lookup.
    private var updatedKeys: [String: ClosedRange<Int64>] = [:]
    private var savedCount = 0

    private var inserted: [ObjectID: ObjectChange] = [:]
    private var updated: [ObjectID: ObjectChange] = [:]
    private var deleted: [ObjectID: ObjectChange] = [:]
    private var order: [ObjectID] = []

    init(storeIdentifier: String) {
        self.storeIdentifier = storeIdentifier
    }

    /// How many distinct objects the merged save changes.
    var objectCount: Int {
        saves == nil ? inserted.count + updated.count + deleted.count : savedCount + updated.count
    }

    /// The merged save as saves whose inserted and deleted lists are concatenated, and the
    /// merged updates; `nil` when the saves had to be merged object by object.
    var disjoint: DisjointSaves? {
        saves.map {
            DisjointSaves(
                token: token, storeIdentifier: storeIdentifier, saves: $0, updated: order.compactMap { updated[$0] })
        }
    }

    /// Merges the next save.
    mutating func add(_ save: DidSave) {
        add(QueuedSave(save: save, encoding: nil))
    }

    /// Merges the next save.
    mutating func add(_ queued: QueuedSave) {
        token = max(token, queued.save.token)
        let save = queued.save
        if let earlier = saves {
            if isDisjoint(save) {
                record(queued)
                return
            }
            // Back to merging every object: the saves so far again, in order, from scratch.
            saves = nil
            insertedKeys = [:]
            deletedObjects = []
            updatedKeys = [:]
            savedCount = 0
            updated = [:]
            order = []
            for queued in earlier { merge(queued.save) }
        }
        merge(save)
    }

    /// Whether `save` inserts, updates and deletes none of the objects the saves so far inserted
    /// or deleted, and inserts none they updated. Conservative: an object whose key lies in an
    /// entity's inserted range counts as inserted.
    private func isDisjoint(_ save: DidSave) -> Bool {
        var entity = ""
        var inserted: ClosedRange<Int64>?
        var updated: ClosedRange<Int64>?
        func ranges(of id: ObjectID) {
            guard id.entityName != entity else { return }
            entity = id.entityName
            inserted = insertedKeys[entity]
            updated = updatedKeys[entity]
        }
        func insertedBefore(_ id: ObjectID) -> Bool {
            ranges(of: id)
            return inserted?.contains(id.key) ?? false
        }
        func updatedBefore(_ id: ObjectID) -> Bool {
            ranges(of: id)
            return updated?.contains(id.key) == true && self.updated[id] != nil
        }
        func deletedBefore(_ id: ObjectID) -> Bool { !deletedObjects.isEmpty && deletedObjects.contains(id) }
        for change in save.inserted
        where insertedBefore(change.objectID) || deletedBefore(change.objectID) || updatedBefore(change.objectID) {
            return false
        }
        for change in [save.updated, save.deleted].joined()
        where insertedBefore(change.objectID) || deletedBefore(change.objectID) {
            return false
        }
        return true
    }

    /// Keeps a disjoint save: its updates merged by object, its inserted and deleted lists as they are.
    private mutating func record(_ queued: QueuedSave) {
        let save = queued.save
        var entity = ""
        var low = Int64.max
        var high = Int64.min
        func flush() {
            guard low <= high else { return }
            let known = insertedKeys[entity]
            insertedKeys[entity] = min(low, known?.lowerBound ?? low)...max(high, known?.upperBound ?? high)
        }
        for change in save.inserted {
            if change.objectID.entityName != entity {
                flush()
                entity = change.objectID.entityName
                low = .max
                high = .min
            }
            low = min(low, change.objectID.key)
            high = max(high, change.objectID.key)
        }
        flush()
        for change in save.updated { mergeUpdate(change) }
        for change in save.deleted {
            updated[change.objectID] = nil
            deletedObjects.insert(change.objectID)
        }
        savedCount += save.inserted.count + save.deleted.count
        saves?.append(queued)
    }

    /// Merges the update of an object that was not inserted in the merged saves: the newest
    /// version, the changed keys of all its updates.
    private mutating func mergeUpdate(_ change: ObjectChange) {
        var merged = change
        if let previous = updated[change.objectID] {
            if previous.changedKeys != change.changedKeys {
                merged.changedKeys = Array(Set(previous.changedKeys + change.changedKeys)).sorted()
            }
        } else {
            order.append(change.objectID)
            let id = change.objectID
            if saves != nil {
                updatedKeys[id.entityName] =
                    updatedKeys[id.entityName].map { min($0.lowerBound, id.key)...max($0.upperBound, id.key) } ?? id
                    .key...id.key
            }
        }
        updated[change.objectID] = merged
    }

    private mutating func merge(_ save: DidSave) {
        for change in save.inserted {
            if inserted[change.objectID] == nil && updated[change.objectID] == nil { order.append(change.objectID) }
            inserted[change.objectID] = change
            deleted[change.objectID] = nil
        }
        for change in save.updated {
            guard inserted[change.objectID] != nil else {
                mergeUpdate(change)
                continue
            }
            var merged = change
            merged.changedKeys = []
            inserted[change.objectID] = merged
        }
        for change in save.deleted {
            if inserted.removeValue(forKey: change.objectID) == nil { deleted[change.objectID] = change }
            updated[change.objectID] = nil
            order.append(change.objectID)
        }
    }

    /// The merged save: objects in the order they first changed, or, for disjoint saves, their
    /// inserted and deleted lists concatenated.
    func result() -> DidSave {
        var result = DidSave(token: token, storeIdentifier: storeIdentifier)
        if let disjoint {
            for queued in disjoint.saves {
                result.inserted += queued.save.inserted
                result.deleted += queued.save.deleted
            }
            result.updated = disjoint.updated
            return result
        }
        var seen = Set<ObjectID>()
        seen.reserveCapacity(objectCount)
        for id in order where seen.insert(id).inserted {
            if let change = inserted[id] { result.inserted.append(change) }
            if let change = updated[id] { result.updated.append(change) }
            if let change = deleted[id] { result.deleted.append(change) }
        }
        return result
    }
}

/// Consecutive saves whose inserted and deleted objects are disjoint, merged: their inserted and
/// deleted lists concatenated, and their updates merged by object.
struct DisjointSaves: Sendable {
    /// The token of the newest save.
    let token: HistoryToken
    /// The store that committed the saves.
    let storeIdentifier: String
    /// The saves, whose inserted and deleted lists are taken as they are.
    let saves: [QueuedSave]
    /// The updates, merged: the newest version of each object, changed keys merged.
    let updated: [ObjectChange]
}
