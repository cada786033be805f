import Logging
import OrderedCollections

/// Something a context tells about each save it made or merged.
protocol LiveQueryUpdating: AnyObject {
    func contextDidChange(_ didSave: DidSave)
}

/// How a live query's results changed after a save or a merged did-save, in the style of
/// `NSFetchedResultsControllerDelegate`. Indexes refer to the old results for deletions and to
/// the new results for insertions, updates and moves.
public struct LiveQueryChanges: Sendable, Hashable {
    /// Objects that entered the results, with their new index.
    public var inserted: [(index: Int, objectID: ObjectID)] = []
    /// Objects that left the results, with their old index.
    public var deleted: [(index: Int, objectID: ObjectID)] = []
    /// Objects that stayed and changed, with their new index.
    public var updated: [(index: Int, objectID: ObjectID)] = []
    /// Objects that stayed and changed position.
    public var moved: [(from: Int, to: Int, objectID: ObjectID)] = []

    /// Whether nothing changed.
    public var isEmpty: Bool { inserted.isEmpty && deleted.isEmpty && updated.isEmpty && moved.isEmpty }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.inserted.elementsEqual(rhs.inserted, by: { $0 == $1 })
            && lhs.deleted.elementsEqual(rhs.deleted, by: { $0 == $1 })
            && lhs.updated.elementsEqual(rhs.updated, by: { $0 == $1 })
            && lhs.moved.elementsEqual(rhs.moved, by: { $0 == $1 })
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(inserted.map(\.objectID))
        hasher.combine(deleted.map(\.objectID))
    }
}

/// A live query — Core Data's `NSFetchedResultsController`: a fetch request whose results follow
/// every save of its context and every did-save merged into it. It lives in its context (it is not
/// `Sendable`) and stops updating when released.
///
/// ```swift
/// let open = try context.liveQuery(FetchRequest<Bug>(predicate: Key("status") == "Open"))
/// open.onChange = { changes in print(changes.inserted.count, "new open bugs") }
/// ```
public final class LiveQuery<Object: ManagedObject>: LiveQueryUpdating {
    /// The query's request.
    public let request: FetchRequest<Object>
    /// The current results.
    public private(set) var objects: [Object] = []
    /// Called after each change to the results.
    public var onChange: ((LiveQueryChanges) -> Void)?
    private weak var core: ContextCore?

    init(request: FetchRequest<Object>, core: ContextCore) {
        self.request = request
        self.core = core
    }

    /// Runs the fetch again and replaces the results (without reporting changes).
    public func performFetch() throws {
        guard let core else { return }
        objects = try core.fetch(request)
    }

    func contextDidChange(_ didSave: DidSave) {
        guard let core else { return }
        let entity = request.entityName
        let relevant = (didSave.inserted + didSave.updated + didSave.deleted).contains {
            $0.objectID.entityName == entity
        }
        guard relevant else { return }
        let old = objects.map(\.objectID)
        let updatedIDs = Set(didSave.updated.filter { $0.objectID.entityName == entity }.map(\.objectID))
        do {
            if request.limit != nil || request.offset > 0 {
                objects = try core.fetch(request)
            } else {
                objects = try incrementalResults(core: core, didSave: didSave)
            }
        } catch {
            core.logger.warning("live query could not update", metadata: ["entity": "\(entity)", "error": "\(error)"])
            return
        }
        let changes = Self.diff(old: old, new: objects.map(\.objectID), updated: updatedIDs)
        if !changes.isEmpty { onChange?(changes) }
    }

    /// New results from the old ones plus the did-save's objects of this entity, evaluated in
    /// memory: no refetch of the whole result set.
    private func incrementalResults(core: ContextCore, didSave: DidSave) throws -> [Object] {
        let predicate = request.predicate ?? .all
        let deleted = Set(didSave.deleted.map(\.objectID))
        var candidates = objects.filter { !$0.isDeleted && !deleted.contains($0.objectID) }
        var present = Set(candidates.map(\.objectID))
        let arriving = (didSave.inserted + didSave.updated).filter {
            $0.objectID.entityName == request.entityName && !present.contains($0.objectID)
        }
        if !arriving.isEmpty {
            let rows = try core.coordinator.rows(for: arriving.map(\.objectID))
            for change in arriving {
                guard let row = rows[change.objectID] ?? change.values,
                    let entity = core.model.entity(named: request.entityName)
                else { continue }
                let reader = RowReader(entity: entity, row: row, core: core)
                if predicate.evaluate(on: reader), let object = core.object(for: change.objectID) as? Object {
                    if object.isFault { core.apply(row, to: object) }
                    candidates.append(object)
                    present.insert(change.objectID)
                }
            }
            core.flushRegistrations()
        }
        candidates.removeAll { !predicate.evaluate(on: $0) }
        return candidates.sortedStably(by: request.sort)
    }

    static func diff(old: [ObjectID], new: [ObjectID], updated: Set<ObjectID>) -> LiveQueryChanges {
        var changes = LiveQueryChanges()
        let oldIndex = Dictionary(old.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        let newIndex = Dictionary(new.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        for (index, id) in old.enumerated() where newIndex[id] == nil { changes.deleted.append((index, id)) }
        // Positions among the survivors tell moves from shifts caused by inserts and deletes.
        let survivorsOld = old.filter { newIndex[$0] != nil }
        let survivorsNew = new.filter { oldIndex[$0] != nil }
        let rankOld = Dictionary(survivorsOld.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        for (index, id) in new.enumerated() {
            guard let was = oldIndex[id] else {
                changes.inserted.append((index, id))
                continue
            }
            if let rank = rankOld[id], rank < survivorsNew.count, survivorsNew[rank] != id {
                changes.moved.append((was, index, id))
            } else if updated.contains(id) {
                changes.updated.append((index, id))
            }
        }
        return changes
    }
}

/// Reads key paths from a row that is not registered in the context (a live-query candidate),
/// following to-one links through the context's objects or the coordinator.
struct RowReader: RowKeyPathReading {
    let entity: EntityDescription
    let row: RowSnapshot
    let core: ContextCore

    func follow(_ id: ObjectID) -> RowReader? {
        guard let next = core.model.entity(named: id.entityName) else { return nil }
        if let object = core.registered[id], !object.isFault {
            return RowReader(entity: next, row: object.currentRow(version: 0), core: core)
        }
        guard let nextRow = try? core.coordinator.rows(for: [id])[id] else { return nil }
        return RowReader(entity: next, row: nextRow, core: core)
    }
}
