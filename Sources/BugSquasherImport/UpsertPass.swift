import Algorithms
import BugSquasherGraph
import BugSquasherModel
import Foundation

/// The state of one ``BugUpserter`` chunk: the objects fetched or created so far, by unique key
/// (``StoredText``: two keys the store holds apart are two entries here).
///
/// It lives inside one call of ``BugUpserter/upsert(_:in:)``, on the context's executor.
struct UpsertPass {
    /// What happened to one bug.
    enum Outcome {
        case inserted, updated, unchanged

        /// What happened to a bug over two records of one chunk: inserted by the first, it stays
        /// inserted; changed by either, it is updated.
        mutating func merge(_ later: Outcome) {
            if self == .unchanged { self = later }
        }
    }

    let inListLimit: Int
    /// Bulk work gives way to interactive saves before each fetch (see ``BugUpserter/editsFirst``).
    let editsFirst: EditsFirst?
    private var bugs: [StoredText: Bug] = [:]
    private var projects: [StoredText: Project] = [:]
    private var persons: [StoredText: Person] = [:]
    private var components: [StoredText: Component] = [:]
    private var comments: [StoredText: Comment] = [:]
    /// The keys of the people, components and projects left alone, and the links to them that
    /// wait (see ``DeferredLinks``).
    private var deferred: UpsertKeys?
    private(set) var links: [DeferredLinks.Link] = []

    /// The keys of bugs the caller knows the store has no row for: not looked up.
    private let absentBugs: Set<StoredText>
    /// Set when new bugs, and their comments, are inserted as rows without objects (see
    /// ``BugUpserter/insertsRows``); only for chunks in which no bug or comment key repeats.
    var rowColumns: RowColumns?

    init(
        inListLimit: Int, editsFirst: EditsFirst? = nil, deferring deferred: UpsertKeys? = nil,
        absentBugs: Set<StoredText> = []
    ) {
        self.inListLimit = inListLimit
        self.editsFirst = editsFirst
        // No key deferred: no lookup per link.
        self.deferred = deferred?.isEmpty == false ? deferred : nil
        self.absentBugs = absentBugs
    }

    /// Fetches the existing objects the records name, one `IN` fetch per entity and part; not
    /// those whose links are deferred.
    ///
    /// With `records` (the records the keys are of), the comments of ``absentBugs``' records are
    /// not looked up either: on a first import that is every comment, thousands of `IN` keys a
    /// chunk for rows that are not there.
    mutating func fetchExisting(
        _ keys: UpsertKeys, records: UnsafeBufferPointer<BugRecord>? = nil, in context: isolated ObjectContext
    ) throws {
        func keysOf(_ entity: String) -> Set<StoredText> {
            let all = keys.byEntity[entity, default: []]
            guard let left = deferred?.byEntity[entity], !left.isEmpty else { return all }
            return all.subtracting(left)
        }
        let bugKeys = keysOf("Bug")
        bugs = try fetch(
            Bug.self, by: "key", in: absentBugs.isEmpty ? bugKeys : bugKeys.subtracting(absentBugs), context: context)
        projects = try fetch(Project.self, by: "key", in: keysOf("Project"), context: context)
        persons = try fetch(Person.self, by: "name", in: keysOf("Person"), context: context)
        components = try fetch(Component.self, by: "name", in: keysOf("Component"), context: context)
        comments = try fetch(
            Comment.self, by: "jiraID", in: commentKeys(keysOf("Comment"), of: records), context: context)
    }

    /// The comment keys to look up: `all`, less the comments of the records of ``absentBugs``.
    /// Should one of those exist after all (under another bug: an issue moved to another
    /// project keeps its comments' IDs), the save fails on the comment's unique key, and the
    /// chunk is prepared again with every key looked up.
    private func commentKeys(_ all: Set<StoredText>, of records: UnsafeBufferPointer<BugRecord>?) -> Set<StoredText> {
        guard let records, !absentBugs.isEmpty else { return all }
        var wanted = Set<StoredText>()
        for index in records.indices where !absentBugs.contains(StoredText(records[index].key)) {
            for comment in records[index].comments {
                let key = StoredText(comment.jiraID)
                if all.contains(key) { wanted.insert(key) }
            }
        }
        return wanted
    }

    /// Whether the links to the `entity` object with `key` wait.
    @inline(__always)
    private func isDeferred(_ entity: String, _ key: String) -> Bool {
        guard let deferred else { return false }
        return deferred.byEntity[entity]?.contains(StoredText(key)) == true
    }

    /// Makes the deferred links, now that the objects they name can be read: fetches those
    /// objects (or inserts them, when they do not exist after all) and applies each link's record
    /// to them, in the order the records named them. Links of bugs and comments inserted as rows
    /// go to those rows.
    mutating func link(_ deferred: DeferredLinks, in context: isolated ObjectContext) throws {
        self.deferred = nil
        try fetchExisting(deferred.keys, in: context)
        for link in deferred.links {
            editsFirst?.yieldToInteractiveSaves()
            switch link {
            case .project(let bug, let record):
                setToOne(
                    "project", rowSlot: rowColumns?.bugProject, of: bug, to: project(record, in: context), in: context)
            case .reporter(let bug, let record):
                setToOne(
                    "reporter", rowSlot: rowColumns?.bugReporter, of: bug, to: person(record, in: context), in: context)
            case .assignee(let bug, let record):
                setToOne(
                    "assignee", rowSlot: rowColumns?.bugAssignee, of: bug, to: person(record, in: context), in: context)
            case .author(let comment, let record):
                setToOne(
                    "author", rowSlot: rowColumns?.commentAuthor, of: comment, to: person(record, in: context),
                    in: context)
            case .components(let bug, let wanted, let isNew):
                let components = wanted.compactMap { wanted -> Component? in
                    switch wanted {
                    case .object(let id): context.object(with: id) as? Component
                    case .named(let name): component(named: name, in: context)
                    }
                }
                if context.isInsertedRow(bug) {
                    for component in components {
                        if let slot = rowColumns?.bugComponents {
                            context.add(component, toRow: bug, toManySlot: slot)
                        } else {
                            context.add(component, toRow: bug, "components")
                        }
                    }
                } else if let bug = context.object(with: bug) as? Bug {
                    setComponents(components, of: bug, isNew: isNew)
                }
            }
        }
    }

    /// Points the to-one `relationship` of the bug or comment `id` at `target`, whether it was
    /// inserted as a row (see ``rowColumns``, whose `rowSlot` is the relationship's position;
    /// the pass that links a chunk after its save has none, and finds it by name) or is an
    /// object.
    private func setToOne(
        _ relationship: String, rowSlot: Int?, of id: ObjectID, to target: ManagedObject?,
        in context: isolated ObjectContext
    ) {
        guard context.isInsertedRow(id) else {
            context.object(with: id).setRelated(target, for: relationship)
            return
        }
        if let rowSlot {
            context.setToOne(ofRow: id, toOneSlot: rowSlot, to: target)
        } else {
            context.setToOne(ofRow: id, relationship, to: target)
        }
    }

    /// Inserts or updates the bug of one record, with its relationships and comments.
    ///
    /// The record is read through a pointer into the chunk's records: passed by value, it would be
    /// copied out of the array (retaining each of its strings) for every record imported.
    mutating func apply(_ record: UnsafePointer<BugRecord>, in context: isolated ObjectContext) -> Outcome {
        let bug: Bug
        let isNew: Bool
        let key = StoredText(record.pointee.key)
        if let columns = rowColumns, bugs[key] == nil,
            !record.pointee.comments.contains(where: { comments[StoredText($0.jiraID)] != nil })
        {
            insertRows(record, columns, in: context)
            return .inserted
        }
        if let existing = bugs[key] {
            bug = existing
            isNew = false
        } else {
            bug = context.insert(Bug.self)
            bug.key = record.pointee.key
            bugs[key] = bug
            isNew = true
        }
        // What the source did not carry stays as the bug has it; a new bug takes the record's
        // defaults (its key as title, and so on).
        let kept = isNew ? [] : record.pointee.absent
        if !kept.contains(.jiraID) { bug.jiraID = record.pointee.jiraID }
        if !kept.contains(.title) { bug.title = record.pointee.title }
        if !kept.contains(.details) { bug.details = record.pointee.details }
        if !kept.contains(.status) { bug.status = record.pointee.status }
        if !kept.contains(.resolution) { bug.resolution = record.pointee.resolution }
        if !kept.contains(.priority) { bug.priority = record.pointee.priority }
        if !kept.contains(.type) { bug.type = record.pointee.type }
        if !kept.contains(.labels) { bug.labels = BugRecord.normalizedLabels(record.pointee.labels) }
        if !kept.contains(.created) { bug.created = record.pointee.created }
        if !kept.contains(.updated) { bug.updated = record.pointee.updated }
        if !kept.contains(.resolved) { bug.resolved = record.pointee.resolved }
        bug.sourceDigest = record.pointee.sourceDigest
        if isDeferred("Project", record.pointee.project.key) {
            links.append(.project(bug: bug.objectID, record.pointee.project))
        } else {
            bug.project = project(record.pointee.project, in: context)
        }
        if !kept.contains(.reporter) {
            if let reporter = record.pointee.reporter, isDeferred("Person", reporter.name) {
                links.append(.reporter(bug: bug.objectID, reporter))
            } else {
                bug.reporter = person(record.pointee.reporter, in: context)
            }
        }
        if !kept.contains(.assignee) {
            if let assignee = record.pointee.assignee, isDeferred("Person", assignee.name) {
                links.append(.assignee(bug: bug.objectID, assignee))
            } else {
                bug.assignee = person(record.pointee.assignee, in: context)
            }
        }
        if !kept.contains(.components) {
            let names = record.pointee.components
            if deferred != nil, names.contains(where: { isDeferred("Component", $0) }) {
                // The others are found or inserted now, as they would be without the wait.
                let wanted = names.map { name -> DeferredLinks.Component in
                    isDeferred("Component", name) ? .named(name) : .object(component(named: name, in: context).objectID)
                }
                links.append(.components(bug: bug.objectID, wanted, isNew: isNew))
            } else if !(isNew && names.isEmpty) {
                setComponents(names.map { component(named: $0, in: context) }, of: bug, isNew: isNew)
            }
        }

        var commentsChanged = false
        for comment in record.pointee.comments where upsert(comment, on: bug, in: context) {
            commentsChanged = true
        }
        if isNew { return .inserted }
        return bug.hasChanges || commentsChanged ? .updated : .unchanged
    }

    /// Inserts a new bug and its new comments as rows (see ``rowColumns``), linked as
    /// ``apply(_:in:)`` links a new `Bug` object and its comments.
    private mutating func insertRows(
        _ record: UnsafePointer<BugRecord>, _ columns: RowColumns, in context: isolated ObjectContext
    ) {
        let bug = context.insertRow(columns.bug, values: columns.bugValues(record))
        if isDeferred("Project", record.pointee.project.key) {
            links.append(.project(bug: bug, record.pointee.project))
        } else {
            context.setToOne(
                ofRow: bug, toOneSlot: columns.bugProject, to: project(record.pointee.project, in: context))
        }
        if let reporter = record.pointee.reporter {
            if isDeferred("Person", reporter.name) {
                links.append(.reporter(bug: bug, reporter))
            } else {
                context.setToOne(ofRow: bug, toOneSlot: columns.bugReporter, to: person(reporter, in: context))
            }
        }
        if let assignee = record.pointee.assignee {
            if isDeferred("Person", assignee.name) {
                links.append(.assignee(bug: bug, assignee))
            } else {
                context.setToOne(ofRow: bug, toOneSlot: columns.bugAssignee, to: person(assignee, in: context))
            }
        }
        let names = record.pointee.components
        if deferred != nil, names.contains(where: { isDeferred("Component", $0) }) {
            let wanted = names.map { name -> DeferredLinks.Component in
                isDeferred("Component", name) ? .named(name) : .object(component(named: name, in: context).objectID)
            }
            links.append(.components(bug: bug, wanted, isNew: true))
        } else {
            for name in names {
                context.add(component(named: name, in: context), toRow: bug, toManySlot: columns.bugComponents)
            }
        }
        for comment in record.pointee.comments {
            let row = context.insertRow(columns.comment, values: columns.commentValues(comment))
            context.setToOne(ofRow: row, toOneSlot: columns.commentBug, toRow: bug)
            guard let author = comment.author else { continue }
            if isDeferred("Person", author.name) {
                links.append(.author(comment: row, author))
            } else {
                context.setToOne(ofRow: row, toOneSlot: columns.commentAuthor, to: person(author, in: context))
            }
        }
    }

    // MARK: Related objects

    private mutating func project(_ record: ProjectRecord, in context: isolated ObjectContext) -> Project {
        let key = StoredText(record.key)
        let project =
            projects[key]
            ?? {
                let project = context.insert(Project.self)
                project.key = record.key
                return project
            }()
        projects[key] = project
        if let name = record.name { project.name = name }
        return project
    }

    private mutating func person(_ record: PersonRecord?, in context: isolated ObjectContext) -> Person? {
        guard let record else { return nil }
        let key = StoredText(record.name)
        let person =
            persons[key]
            ?? {
                let person = context.insert(Person.self)
                person.name = record.name
                return person
            }()
        persons[key] = person
        if let displayName = record.displayName { person.displayName = displayName }
        return person
    }

    private mutating func component(named name: String, in context: isolated ObjectContext) -> Component {
        let key = StoredText(name)
        if let component = components[key] { return component }
        let component = context.insert(Component.self)
        component.name = name
        components[key] = component
        return component
    }

    /// Makes the bug's components exactly `wanted`. A bug inserted by this pass has none yet,
    /// and its empty relationship is not read.
    private func setComponents(_ wanted: [Component], of bug: Bug, isNew: Bool) {
        let current = isNew ? [] : bug.components
        let wantedSet = Set(wanted)
        let currentSet = Set(current)
        for component in current where !wantedSet.contains(component) {
            bug.remove(component, from: "components")
        }
        for component in wanted where !currentSet.contains(component) {
            bug.add(component, to: "components")
        }
    }

    /// Inserts or updates a comment and attaches it to the bug; returns whether it changed.
    private mutating func upsert(_ record: CommentRecord, on bug: Bug, in context: isolated ObjectContext) -> Bool {
        let comment: Comment
        let key = StoredText(record.jiraID)
        if let existing = comments[key] {
            comment = existing
        } else {
            comment = context.insert(Comment.self)
            comment.jiraID = record.jiraID
            comments[key] = comment
        }
        comment.body = record.body
        comment.created = record.created
        comment.updated = record.updated
        if let author = record.author, isDeferred("Person", author.name) {
            links.append(.author(comment: comment.objectID, author))
        } else {
            comment.author = person(record.author, in: context)
        }
        comment.bug = bug
        return comment.hasChanges
    }

    // MARK: Fetching

    /// The objects whose `attribute` is one of `values`, by that value.
    private func fetch<T: ManagedObject>(
        _ type: T.Type, by attribute: String, in values: Set<StoredText>, context: isolated ObjectContext
    ) throws -> [StoredText: T] {
        // In no particular order: SQLite sorts an `IN` list itself, and sorting a chunk's keys
        // here cost more than the fetch's statement.
        let values = Array(values)
        var result: [StoredText: T] = [:]
        result.reserveCapacity(values.count)
        for batch in values.chunks(ofCount: inListLimit) {
            editsFirst?.yieldToInteractiveSaves()
            var request = FetchRequest<T>(predicate: Key(attribute).in(batch.map { Value.string($0.string) }))
            request.returnsObjectsAsFaults = false
            for object in try context.fetch(request) {
                if let key = object.get(attribute, as: String.self) { result[StoredText(key)] = object }
            }
        }
        return result
    }
}
