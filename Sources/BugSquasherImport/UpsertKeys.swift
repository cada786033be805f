public import BugSquasherGraph

/// The unique keys of the objects an upsert reads or writes, by entity name: bug keys, project
/// keys, person names, component names and comment IDs.
///
/// An importer that prepares the next chunk while the previous one is being saved compares the
/// keys the next chunk reads (``init(_:)``) with the keys the previous chunk writes
/// (``init(writtenIn:)``); when they meet, the next chunk must wait for the save, since it would
/// otherwise read rows that are about to change.
public struct UpsertKeys: Sendable, Equatable {
    /// The keys, by entity name.
    public var byEntity: [String: Set<String>]

    /// The keys of every object upserting `records` looks up.
    public init(_ records: [BugRecord]) {
        self = records.withUnsafeBufferPointer { UpsertKeys($0) }
    }

    /// The keys of every object upserting `records` looks up; reads the records in place (a copy
    /// of a record retains every string of it).
    init(_ records: UnsafeBufferPointer<BugRecord>) {
        var bugs = Set<String>(), projects = Set<String>(), persons = Set<String>()
        var components = Set<String>(), comments = Set<String>()
        for index in records.indices {
            bugs.insert(records[index].key)
            projects.insert(records[index].project.key)
            components.formUnion(records[index].components)
            if let reporter = records[index].reporter { persons.insert(reporter.name) }
            if let assignee = records[index].assignee { persons.insert(assignee.name) }
            for comment in records[index].comments {
                comments.insert(comment.jiraID)
                if let author = comment.author { persons.insert(author.name) }
            }
        }
        byEntity = ["Bug": bugs, "Project": projects, "Person": persons, "Component": components, "Comment": comments]
    }

    /// The keys of the objects whose stored values saving `context` writes (see
    /// ``ObjectContext/writesStoredValues(of:)``): inserted ones, and updated ones beyond a
    /// version bump.
    public init(writtenIn context: isolated ObjectContext) {
        var keys: [String: Set<String>] = [:]
        for object in context.insertedObjects + context.updatedObjects where context.writesStoredValues(of: object) {
            guard let attribute = object.entity.uniqueKey, let key = object.get(attribute, as: String.self) else { continue }
            keys[object.entity.name, default: []].insert(key)
        }
        byEntity = keys
    }

    /// Whether any entity has a key in both.
    public func overlaps(_ other: UpsertKeys) -> Bool {
        byEntity.contains { entity, keys in
            guard let others = other.byEntity[entity] else { return false }
            return keys.count <= others.count ? !keys.isDisjoint(with: others) : !others.isDisjoint(with: keys)
        }
    }
}
