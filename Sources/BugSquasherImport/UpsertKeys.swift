public import BugSquasherGraph

/// The unique keys of the objects an upsert reads or writes, by entity name: bug keys, project
/// keys, person names, component names and comment IDs. Keys are ``StoredText``, compared byte
/// for byte as the store compares them.
///
/// An importer that prepares the next chunk while the previous one is being saved compares the
/// keys the next chunk reads (``init(_:)``) with the keys the previous chunk writes
/// (``init(writtenIn:)``); when they meet, the next chunk must wait for the save, since it would
/// otherwise read rows that are about to change.
public struct UpsertKeys: Sendable, Equatable {
    /// The keys, by entity name.
    public var byEntity: [String: Set<StoredText>]

    /// These keys, by entity name.
    public init(byEntity: [String: Set<StoredText>]) {
        self.byEntity = byEntity
    }

    /// The keys of every object upserting `records` looks up.
    public init(_ records: [BugRecord]) {
        self = records.withUnsafeBufferPointer { UpsertKeys($0) }
    }

    /// The keys of every object upserting `records` looks up; reads the records in place (a copy
    /// of a record retains every string of it).
    init(_ records: UnsafeBufferPointer<BugRecord>) {
        // Sized up front: growing a set hashes every key in it again.
        var commentCount = 0
        for index in records.indices { commentCount += records[index].comments.count }
        var bugs = Set<StoredText>(minimumCapacity: records.count)
        var projects = Set<StoredText>()
        var persons = Set<StoredText>(minimumCapacity: records.count)
        var components = Set<StoredText>()
        var comments = Set<StoredText>(minimumCapacity: commentCount)
        for index in records.indices {
            bugs.insert(StoredText(records[index].key))
            projects.insert(StoredText(records[index].project.key))
            components.formUnion(records[index].components.lazy.map(StoredText.init))
            if let reporter = records[index].reporter { persons.insert(StoredText(reporter.name)) }
            if let assignee = records[index].assignee { persons.insert(StoredText(assignee.name)) }
            for comment in records[index].comments {
                comments.insert(StoredText(comment.jiraID))
                if let author = comment.author { persons.insert(StoredText(author.name)) }
            }
        }
        byEntity = ["Bug": bugs, "Project": projects, "Person": persons, "Component": components, "Comment": comments]
    }

    /// The keys of the objects whose stored values saving `context` writes (see
    /// ``ObjectContext/writesStoredValues(of:)``): inserted ones, and updated ones beyond a
    /// version bump.
    public init(writtenIn context: isolated ObjectContext) {
        var keys: [String: Set<StoredText>] = [:]
        let objects = context.insertedObjects + context.updatedObjects
        let rows = context.insertedRows
        // Each entity's set sized for every key at once: growing a set hashes its keys again.
        let most = objects.count + rows.count
        for object in objects where context.writesStoredValues(of: object) {
            guard let attribute = object.entity.uniqueKey, let key = object.get(attribute, as: String.self) else {
                continue
            }
            keys[object.entity.name, default: Set(minimumCapacity: most)].insert(StoredText(key))
        }
        for row in rows {
            guard let attribute = row.entity.uniqueKey, let index = row.entity.attributeIndex[attribute],
                case .string(let key) = row.values[index]
            else { continue }
            keys[row.entity.name, default: Set(minimumCapacity: most)].insert(StoredText(key))
        }
        byEntity = keys
    }

    /// Whether any entity has a key in both; only the entities in `entities`, when given.
    public func overlaps(_ other: UpsertKeys, in entities: Set<String>? = nil) -> Bool {
        byEntity.contains { entity, keys in
            guard entities?.contains(entity) ?? true, let others = other.byEntity[entity] else { return false }
            return keys.count <= others.count ? !keys.isDisjoint(with: others) : !others.isDisjoint(with: keys)
        }
    }

    /// The keys of `entities` in both.
    public func common(with other: UpsertKeys, in entities: Set<String>) -> UpsertKeys {
        var common = UpsertKeys(byEntity: [:])
        for entity in entities {
            guard let keys = byEntity[entity], let others = other.byEntity[entity] else { continue }
            let both = keys.count <= others.count ? keys.intersection(others) : others.intersection(keys)
            if !both.isEmpty { common.byEntity[entity] = both }
        }
        return common
    }

    /// Whether there is no key at all.
    public var isEmpty: Bool { byEntity.values.allSatisfy(\.isEmpty) }
}
