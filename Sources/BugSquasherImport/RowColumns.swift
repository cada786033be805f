import BugSquasherGraph
import BugSquasherModel

/// Where each field of a new bug and its comments goes in a row inserted without an object
/// (`ObjectContext.insertRow(_:values:)`): the positions of the `Bug` and `Comment` attributes,
/// looked up once per chunk instead of by name for every value.
///
/// Why new bugs are rows: docs/DESIGN-NOTES.md, "New bugs are inserted as rows".
struct RowColumns {
    let bug: EntityDescription
    let comment: EntityDescription
    private let bugKey, jiraID, title, details, status, resolution, priority, type, labels: Int
    private let created, updated, resolved, sourceDigest: Int
    private let commentJiraID, body, commentCreated, commentUpdated: Int
    /// The relationships rows are linked through, by position (see
    /// `ObjectContext.setToOne(ofRow:toOneSlot:to:)`).
    let bugProject, bugReporter, bugAssignee, bugComponents, commentBug, commentAuthor: Int

    /// The columns of `model`'s `Bug` and `Comment`; `nil` when it lacks one of them.
    init?(_ model: ManagedObjectModel) {
        guard let bug = model.entity(named: Bug.entityName), let comment = model.entity(named: Comment.entityName)
        else { return nil }
        func at(_ entity: EntityDescription, _ name: String) -> Int? { entity.attributeIndex[name] }
        guard let bugKey = at(bug, "key"), let jiraID = at(bug, "jiraID"), let title = at(bug, "title"),
            let details = at(bug, "details"), let status = at(bug, "status"), let resolution = at(bug, "resolution"),
            let priority = at(bug, "priority"), let type = at(bug, "type"), let labels = at(bug, "labels"),
            let created = at(bug, "created"), let updated = at(bug, "updated"), let resolved = at(bug, "resolved"),
            let sourceDigest = at(bug, "sourceDigest"), let commentJiraID = at(comment, "jiraID"),
            let body = at(comment, "body"), let commentCreated = at(comment, "created"),
            let commentUpdated = at(comment, "updated"), let bugProject = bug.toOneIndex["project"],
            let bugReporter = bug.toOneIndex["reporter"], let bugAssignee = bug.toOneIndex["assignee"],
            let bugComponents = bug.toManyIndex["components"], let commentBug = comment.toOneIndex["bug"],
            let commentAuthor = comment.toOneIndex["author"]
        else { return nil }
        self.bug = bug
        self.comment = comment
        (self.bugKey, self.jiraID, self.title, self.details, self.status) = (bugKey, jiraID, title, details, status)
        (self.resolution, self.priority, self.type, self.labels) = (resolution, priority, type, labels)
        (self.created, self.updated, self.resolved, self.sourceDigest) = (created, updated, resolved, sourceDigest)
        (self.commentJiraID, self.body) = (commentJiraID, body)
        (self.commentCreated, self.commentUpdated) = (commentCreated, commentUpdated)
        (self.bugProject, self.bugReporter, self.bugAssignee) = (bugProject, bugReporter, bugAssignee)
        (self.bugComponents, self.commentBug, self.commentAuthor) = (bugComponents, commentBug, commentAuthor)
    }

    /// The values of a new bug for `record`: what a new `Bug` object gets from the upsert.
    func bugValues(_ record: UnsafePointer<BugRecord>) -> [Value] {
        var values = bug.defaultValues
        values[bugKey] = .string(record.pointee.key)
        values[jiraID] = Self.value(record.pointee.jiraID)
        values[title] = .string(record.pointee.title)
        values[details] = Self.value(record.pointee.details)
        values[status] = .string(record.pointee.status)
        values[resolution] = Self.value(record.pointee.resolution)
        values[priority] = Self.value(record.pointee.priority)
        values[type] = Self.value(record.pointee.type)
        // As `Bug.labels` stores them.
        values[labels] = .string(BugRecord.normalizedLabels(record.pointee.labels).joined(separator: " "))
        values[created] = Self.value(record.pointee.created)
        values[updated] = Self.value(record.pointee.updated)
        values[resolved] = Self.value(record.pointee.resolved)
        values[sourceDigest] = Self.value(record.pointee.sourceDigest)
        return values
    }

    /// The values of a new comment for `record`.
    func commentValues(_ record: CommentRecord) -> [Value] {
        var values = comment.defaultValues
        values[commentJiraID] = .string(record.jiraID)
        values[body] = .string(record.body)
        values[commentCreated] = Self.value(record.created)
        values[commentUpdated] = Self.value(record.updated)
        return values
    }

    /// A value as a typed setter stores it: null for `nil`.
    @inline(__always)
    private static func value<T: AttributeConvertible>(_ value: T?) -> Value {
        value?.attributeValue ?? .null
    }
}
