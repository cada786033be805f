import Algorithms
import Logging
import OrderedCollections

extension ContextCore {
    /// Fetches objects, taking unsaved changes into account when asked to.
    func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
        let entity = try model.requireEntity(request.entityName)
        let pending = request.includesPendingChanges && hasPendingChanges(for: entity.name)
        if !pending {
            return try fetchFromStore(request, entity: entity).compactMap { $0 as? T }
        }
        var unbounded = request
        unbounded.limit = nil
        unbounded.offset = 0
        var objects = try fetchFromStore(unbounded, entity: entity).filter { !$0.isDeleted }
        let predicate = request.predicate ?? .all
        objects.removeAll { $0.hasChanges && !predicate.evaluate(on: $0) }
        var seen = Set(objects.map(ObjectIdentifier.init))
        for object in inserted
        where object.entity === entity && !object.isDeleted && !seen.contains(ObjectIdentifier(object)) {
            if predicate.evaluate(on: object) {
                objects.append(object)
                seen.insert(ObjectIdentifier(object))
            }
        }
        for object in updated where object.entity === entity && !seen.contains(ObjectIdentifier(object)) {
            if predicate.evaluate(on: object) {
                objects.append(object)
                seen.insert(ObjectIdentifier(object))
            }
        }
        objects = objects.sortedStably(by: request.sort)
        let start = min(request.offset, objects.count)
        let end = request.limit.map { min(objects.count, start + $0) } ?? objects.count
        return objects[start..<end].compactMap { $0 as? T }
    }

    /// The number of matching objects.
    func count<T: ManagedObject>(_ request: FetchRequest<T>) throws -> Int {
        let entity = try model.requireEntity(request.entityName)
        if request.includesPendingChanges && hasPendingChanges(for: entity.name) {
            return try fetch(request).count
        }
        guard case .count(let count) = try coordinator.fetch(request.storeRequest(.count)) else {
            throw GraphError(.storeIO, "The store answered a count with another result.")
        }
        return count
    }

    /// The IDs of the matching objects, without registering or loading anything.
    func fetchIDs<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ObjectID] {
        let entity = try model.requireEntity(request.entityName)
        if request.includesPendingChanges && hasPendingChanges(for: entity.name) {
            return try fetch(request).map(\.objectID)
        }
        guard case .objectIDs(let ids) = try coordinator.fetch(request.storeRequest(.objectIDs)) else {
            throw GraphError(.storeIO, "The store answered an ID fetch with another result.")
        }
        return ids
    }

    private func hasPendingChanges(for entityName: String) -> Bool {
        inserted.contains { $0.entity.name == entityName }
            || deleted.contains { $0.entity.name == entityName }
            || updated.contains { $0.entity.name == entityName }
    }

    private func fetchFromStore<T>(_ request: FetchRequest<T>, entity: EntityDescription) throws -> [ManagedObject] {
        let prefetch = !request.returnsObjectsAsFaults
        let result = try coordinator.fetch(request.storeRequest(prefetch ? .rows : .objectIDs))
        switch result {
        case .rows(let rows):
            var byID: [ObjectID: RowSnapshot] = [:]
            let objects = rows.map { row -> ManagedObject in
                let object = self.object(for: row.objectID)
                if object.isFault {
                    apply(overlaid(row.snapshot, for: row.objectID), to: object)
                    byID[row.objectID] = row.snapshot
                }
                return object
            }
            flushRegistrations(rows: byID)
            return objects
        case .objectIDs(let ids):
            let objects = ids.map(self.object(for:))
            if request.batchSize > 0 {
                for (batchIDs, batchObjects) in zip(
                    ids.chunks(ofCount: request.batchSize), objects.chunks(ofCount: request.batchSize))
                {
                    let batch = FaultBatch(Array(batchIDs))
                    for object in batchObjects where object.isFault { object.faultBatch = batch }
                }
            }
            flushRegistrations()
            return objects
        case .count:
            throw GraphError(.storeIO, "The store answered a fetch with a count.")
        }
    }

    /// For a child context, the parent's unsaved values replace the store's.
    private func overlaid(_ row: RowSnapshot, for id: ObjectID) -> RowSnapshot {
        parentOverlay?.rows[id]?.row ?? row
    }

    /// An object that must exist: registered, or loaded from the store now.
    func existingObject(with id: ObjectID) throws -> ManagedObject {
        guard model.entity(named: id.entityName) != nil else {
            throw GraphError(.invalidArgument, "\(id) names entity '\(id.entityName)', which the model does not have.")
        }
        guard id.isTemporary || id.storeIdentifier == coordinator.storeIdentifier else {
            throw GraphError(
                .wrongContext,
                "\(id) belongs to store \(id.storeIdentifier), not to this context's store \(coordinator.storeIdentifier)."
            )
        }
        if let object = registered[id], !object.isDeleted {
            if object.isFault { fulfillFault(object) }
            if let error = object.faultError { throw error }
            return object
        }
        guard !id.isTemporary else {
            throw GraphError(
                .objectNotFound,
                "\(id) is a temporary ID that this context does not hold.",
                advice: "Pass permanent IDs between contexts (save first)."
            )
        }
        let object = self.object(for: id)
        object.faultBatch = nil
        fulfillFault(object)
        if let error = object.faultError {
            forget(object)
            throw error
        }
        return object
    }
}

extension ManagedObject: KeyPathValueReading {
    package func value(atKeyPath path: String) -> Value {
        guard let dot = path.firstIndex(of: ".") else {
            return entity.attributeIndex[path].map { value(at: $0) } ?? .null
        }
        let head = String(path[..<dot])
        guard entity.toOneIndex[head] != nil else { return .null }
        return relatedObject(head)?.value(atKeyPath: String(path[path.index(after: dot)...])) ?? .null
    }

    package func objectID(atKeyPath path: String) -> ObjectID? {
        guard let dot = path.firstIndex(of: ".") else {
            return entity.toOneIndex[path] != nil ? relatedObject(path)?.objectID : nil
        }
        let head = String(path[..<dot])
        guard entity.toOneIndex[head] != nil else { return nil }
        return relatedObject(head)?.objectID(atKeyPath: String(path[path.index(after: dot)...]))
    }
}
