import BugSquasherGraph

/// The inserts a subscriber that filters to its registrations still receives: those of one
/// entity that match a predicate on their own attributes (objects it waits for, which do not
/// exist yet and so cannot be registered).
struct InsertWatch: Sendable {
    /// The entity.
    let entity: EntityDescription
    /// What an insert must match; `nil` passes every insert of the entity.
    let predicate: ObjectPredicate?
    /// `attribute IN (strings)`, the common watch (keys waited for), as a set lookup: every
    /// insert of an import is checked against every watching subscriber's predicate.
    private let lookup: (attribute: Int, values: Set<Value>)?

    /// The attributes the predicate reads: an update that changes none of them cannot make an
    /// object match.
    private let watchedKeys: Set<String>

    init(entity: EntityDescription, predicate: ObjectPredicate?) {
        self.entity = entity
        self.predicate = predicate
        watchedKeys = predicate?.keyPaths ?? []
        if case .isIn(let path, let values)? = predicate, let index = entity.attributeIndex[path],
            values.allSatisfy({ if case .string = $0 { true } else { false } })
        {
            lookup = (index, Set(values))
        } else {
            lookup = nil
        }
    }

    /// What a store screening other daemons' inserts looks for to serve `watches` (of one
    /// entity): their predicates in one, the key lists of `attribute IN (…)` watches joined
    /// into one list per attribute, so that the server matches a hundred subscribers' keys
    /// with one array.
    static func interest(of watches: [InsertWatch]) -> InsertInterest {
        guard !watches.isEmpty else { return .none }
        var lists: [(keyPath: String, values: [Value], seen: Set<Value>)] = []
        var others: [ObjectPredicate] = []
        for watch in watches {
            switch watch.predicate {
            case nil, .all?: return .every
            case .isIn(let keyPath, let values)?:
                if !lists.contains(where: { $0.keyPath == keyPath }) { lists.append((keyPath, [], [])) }
                let index = lists.firstIndex { $0.keyPath == keyPath }!
                for value in values where lists[index].seen.insert(value).inserted { lists[index].values.append(value) }
            case let predicate?:
                others.append(predicate)
            }
        }
        let all = lists.map { ObjectPredicate.isIn(keyPath: $0.keyPath, $0.values) } + others
        return .matching(all.count == 1 ? all[0] : .or(all))
    }

    /// The inserts that pass, in their order. With `index` (the save's inserts by value), a
    /// set lookup costs one probe per watched value instead of one per insert: an import chunk
    /// of 1,000 bugs offered to 100 subscribers waiting for a few keys each.
    func passing(_ inserted: [ObjectChange], index: SaveIndex?) -> [ObjectChange] {
        guard let lookup, let index else { return inserted.filter(passes) }
        return index.insertPositions(of: entity.name, attribute: lookup.attribute, in: lookup.values).map {
            inserted[$0]
        }
    }

    /// The objects among `updated` that changed a watched attribute and now match, other than
    /// those `registered` holds with values (sent to it anyway). With `index`, the updates that
    /// change a watched attribute are found once for every subscriber of a publish: an import's
    /// updates never rename a bug, and cost each watching subscriber nothing.
    func updatesPassing(_ updated: [ObjectChange], index: SaveIndex?, unless registered: [ObjectID: Subscription.Hold])
        -> [ObjectID]
    {
        guard !watchedKeys.isEmpty else { return [] }
        let candidates =
            index?.updates(of: entity.name, changingAnyOf: watchedKeys).map { updated[$0] }
            ?? updated.filter { $0.objectID.entityName == entity.name && !watchedKeys.isDisjoint(with: $0.changedKeys) }
        return candidates.filter { registered[$0.objectID] != .values && passes($0) }.map(\.objectID)
    }

    /// Whether an insert passes. An insert without values (an old history row) passes when its
    /// entity does: the subscriber checks it.
    func passes(_ change: ObjectChange) -> Bool {
        guard change.objectID.entityName == entity.name else { return false }
        guard let predicate, let values = change.values else { return true }
        if let lookup {
            return values.attributes.indices.contains(lookup.attribute)
                && lookup.values.contains(values.attributes[lookup.attribute])
        }
        return predicate.evaluate(on: InsertedRow(entity: entity, row: values))
    }

    /// An inserted row, read on its own: key paths through relationships are refused when the
    /// watch is made.
    private struct InsertedRow: RowKeyPathReading {
        let entity: EntityDescription
        let row: RowSnapshot
        func follow(_ id: ObjectID) -> InsertedRow? { nil }
    }
}
