public import Foundation

/// One issue, normalized from whatever tracker it came from, ready for ``BugUpserter``.
///
/// A record is a plain value: decode it on any thread (``JiraIssueDecoder``), send it to the
/// importer context, and upsert it there. Its fields follow the `Bug` entity of BugSquasherModel.
///
/// ```swift
/// let record = BugRecord(
///     key: "TIMOB-100", title: "Crash on launch", status: "Open",
///     project: ProjectRecord(key: "TIMOB", name: "Titanium SDK"),
///     components: ["Android"], reporter: PersonRecord(name: "user-1a2b3c4d")
/// )
/// ```
public struct BugRecord: Sendable, Hashable, Codable {
    /// The issue key, such as `TIMOB-100`; unique.
    public var key: String
    /// The numeric ID in the tracker it came from.
    public var jiraID: String?
    /// The summary line.
    public var title: String
    /// The description (Jira markup).
    public var details: String?
    /// The workflow status (`Open`, `Closed`, …).
    public var status: String
    /// The resolution (`Fixed`, `Won't Fix`, …), if resolved.
    public var resolution: String?
    /// The priority (`High`, `Medium`, …); `nil` when unset (Jira's literal `None` included).
    public var priority: String?
    /// The issue type (`Bug`, `Story`, …).
    public var type: String?
    /// The labels; never contain spaces (they are stored space-separated).
    public var labels: [String]
    /// When the issue was created.
    public var created: Date?
    /// When the issue last changed.
    public var updated: Date?
    /// When the issue was resolved.
    public var resolved: Date?
    /// The project the issue belongs to.
    public var project: ProjectRecord
    /// The names of the components; the bug's components become exactly this set.
    public var components: [String]
    /// Who reported the issue.
    public var reporter: PersonRecord?
    /// Who the issue is assigned to.
    public var assignee: PersonRecord?
    /// The comments, upserted by their ``CommentRecord/jiraID``.
    public var comments: [CommentRecord]

    /// Creates a record.
    public init(
        key: String,
        jiraID: String? = nil,
        title: String,
        details: String? = nil,
        status: String,
        resolution: String? = nil,
        priority: String? = nil,
        type: String? = nil,
        labels: [String] = [],
        created: Date? = nil,
        updated: Date? = nil,
        resolved: Date? = nil,
        project: ProjectRecord,
        components: [String] = [],
        reporter: PersonRecord? = nil,
        assignee: PersonRecord? = nil,
        comments: [CommentRecord] = []
    ) {
        self.key = key
        self.jiraID = jiraID
        self.title = title
        self.details = details
        self.status = status
        self.resolution = resolution
        self.priority = priority
        self.type = type
        self.labels = labels
        self.created = created
        self.updated = updated
        self.resolved = resolved
        self.project = project
        self.components = components
        self.reporter = reporter
        self.assignee = assignee
        self.comments = comments
    }
}

extension BugRecord {
    /// Labels as they can be stored: whitespace replaced by `_` (Jira labels never contain
    /// spaces, and `Bug.labels` is stored space-separated), empty ones and repeats dropped.
    static func normalizedLabels(_ labels: [String]) -> [String] {
        var seen = Set<String>()
        var result: [String] = []
        for label in labels {
            let cleaned = String(label.map { $0.isWhitespace ? "_" : $0 })
            if !cleaned.isEmpty, seen.insert(cleaned).inserted { result.append(cleaned) }
        }
        return result
    }
}
