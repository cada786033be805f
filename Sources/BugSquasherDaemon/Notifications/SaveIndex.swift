import BugSquasherGraph

/// One save's changes indexed for the subscribers of one publish: its inserts by the value of an
/// attribute, its updates and deletions by object ID. Each part is built on first use and shared.
final class SaveIndex {
    private struct Column: Hashable {
        let entity: String
        let attribute: Int
    }

    /// One column of the inserts: the first position of each value, and for each position the
    /// next one with the same value (`-1` at the end), so that no value needs an array of its own.
    private struct InsertColumn {
        var first: [Value: Int] = [:]
        var next: [Int]
        var valueless: [Int] = []
    }

    private let didSave: DidSave
    private var columns: [Column: InsertColumn] = [:]
    private var updatedPositions: [ObjectID: Int]?
    private struct UpdateColumns: Hashable {
        let entity: String
        let keys: Set<String>
    }
    private var changingUpdates: [UpdateColumns: [Int]] = [:]
    private var deletedPositions: [ObjectID: Int]?

    init(_ didSave: DidSave) {
        self.didSave = didSave
    }

    /// Positions in the save's inserts of `entity`'s objects whose `attribute` is one of
    /// `values`, and of those that carry no values, in the save's order.
    func insertPositions(of entity: String, attribute: Int, in values: Set<Value>) -> [Int] {
        let key = Column(entity: entity, attribute: attribute)
        let column = columns[key] ?? build(entity: entity, attribute: attribute)
        columns[key] = column
        var positions = column.valueless
        for value in values {
            var position = column.first[value] ?? -1
            while position >= 0 {
                positions.append(position)
                position = column.next[position]
            }
        }
        return positions.sorted()
    }

    private func build(entity: String, attribute: Int) -> InsertColumn {
        var column = InsertColumn(next: Array(repeating: -1, count: didSave.inserted.count))
        column.first.reserveCapacity(didSave.inserted.count)
        // Backwards, so that each chain runs in the save's order.
        for (position, change) in didSave.inserted.enumerated().reversed() where change.objectID.entityName == entity {
            guard let values = change.values, values.attributes.indices.contains(attribute) else {
                column.valueless.append(position)
                continue
            }
            if let following = column.first.updateValue(position, forKey: values.attributes[attribute]) {
                column.next[position] = following
            }
        }
        return column
    }

    /// Positions in the save's updates of `entity`'s objects whose changed keys include one of
    /// `keys`, in the save's order.
    func updates(of entity: String, changingAnyOf keys: Set<String>) -> [Int] {
        let key = UpdateColumns(entity: entity, keys: keys)
        if let known = changingUpdates[key] { return known }
        let positions = didSave.updated.indices.filter {
            didSave.updated[$0].objectID.entityName == entity && !keys.isDisjoint(with: didSave.updated[$0].changedKeys)
        }
        changingUpdates[key] = positions
        return positions
    }

    /// The save's updates of objects `registered` holds with values, in the save's order.
    func updated(heldBy registered: [ObjectID: Subscription.Hold]) -> [ObjectChange] {
        let positions = updatedPositions ?? Self.positions(of: didSave.updated)
        updatedPositions = positions
        return Self.changes(
            didSave.updated, at: registered.compactMap { $0.value == .values ? positions[$0.key] : nil })
    }

    /// The save's deletions of objects `registered` holds, in the save's order.
    func deleted(heldBy registered: [ObjectID: Subscription.Hold]) -> [ObjectChange] {
        let positions = deletedPositions ?? Self.positions(of: didSave.deleted)
        deletedPositions = positions
        return Self.changes(didSave.deleted, at: registered.keys.compactMap { positions[$0] })
    }

    private static func positions(of changes: [ObjectChange]) -> [ObjectID: Int] {
        // An object appears once in a save; should it not, the last position stands.
        Dictionary(changes.enumerated().map { ($1.objectID, $0) }, uniquingKeysWith: { $1 })
    }

    private static func changes(_ changes: [ObjectChange], at positions: [Int]) -> [ObjectChange] {
        positions.sorted().map { changes[$0] }
    }
}
