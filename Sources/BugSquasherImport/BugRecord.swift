public import Foundation

/// One issue, normalized from whatever tracker it came from, ready for ``BugUpserter``: a plain
/// value, decoded on any thread (``JiraIssueDecoder``) and upserted in the importer context. Its
/// fields follow the `Bug` entity of BugSquasherModel.
///
/// ```swift
/// let record = BugRecord(key: "TIMOB-100", title: "Crash on launch", status: "Open",
///                        project: ProjectRecord(key: "TIMOB", name: "Titanium SDK"), components: ["Android"])
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
    /// The fields the source did not carry (a Jira export of some fields only, a CSV without
    /// some columns): an existing bug keeps what it has for them, rather than have them blanked.
    /// Empty for a record that carries every field; not part of the record's JSON form.
    public var absent: Fields = []
    /// The ``SourceDigest`` of the bytes the record was read from, which the import keeps on its
    /// bug to skip the same bytes next time; `nil` for a record without one (a CSV row, say),
    /// which clears the bug's. Not part of the record's JSON form.
    public var sourceDigest: Int64?

    /// Fields of a record that a source may leave out.
    public struct Fields: OptionSet, Sendable, Hashable {
        public let rawValue: Int
        /// Creates a set from its raw value.
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// ``BugRecord/jiraID``.
        public static let jiraID = Fields(rawValue: 1 << 0)
        /// ``BugRecord/title``.
        public static let title = Fields(rawValue: 1 << 1)
        /// ``BugRecord/details``.
        public static let details = Fields(rawValue: 1 << 2)
        /// ``BugRecord/status``.
        public static let status = Fields(rawValue: 1 << 3)
        /// ``BugRecord/resolution``.
        public static let resolution = Fields(rawValue: 1 << 4)
        /// ``BugRecord/priority``.
        public static let priority = Fields(rawValue: 1 << 5)
        /// ``BugRecord/type``.
        public static let type = Fields(rawValue: 1 << 6)
        /// ``BugRecord/labels``.
        public static let labels = Fields(rawValue: 1 << 7)
        /// ``BugRecord/created``.
        public static let created = Fields(rawValue: 1 << 8)
        /// ``BugRecord/updated``.
        public static let updated = Fields(rawValue: 1 << 9)
        /// ``BugRecord/resolved``.
        public static let resolved = Fields(rawValue: 1 << 10)
        /// ``BugRecord/components``.
        public static let components = Fields(rawValue: 1 << 11)
        /// ``BugRecord/reporter``.
        public static let reporter = Fields(rawValue: 1 << 12)
        /// ``BugRecord/assignee``.
        public static let assignee = Fields(rawValue: 1 << 13)
        /// Every field a source may leave out.
        public static let all = Fields(rawValue: (1 << 14) - 1)
    }

    /// The fields of the JSON form, in the order ``encode(to:)`` writes them.
    enum CodingKeys: String, CodingKey, CaseIterable {
        case key, jiraID, title, details, status, resolution, priority, type, labels, created, updated, resolved,
            project, components, reporter, assignee, comments
    }

    /// Encodes the JSON form: a field the record carries is written even when empty (`null`),
    /// and one it does not carry (``absent``) is left out, so that reading it back (the
    /// `bugsquasher-ndjson` format, a job's spool) gives the same record.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        func encode<T: Encodable>(_ value: T, _ key: CodingKeys, unless field: Fields) throws {
            if !absent.contains(field) { try container.encode(value, forKey: key) }
        }
        try container.encode(key, forKey: .key)
        try encode(jiraID, .jiraID, unless: .jiraID)
        try encode(title, .title, unless: .title)
        try encode(details, .details, unless: .details)
        try encode(status, .status, unless: .status)
        try encode(resolution, .resolution, unless: .resolution)
        try encode(priority, .priority, unless: .priority)
        try encode(type, .type, unless: .type)
        try encode(labels, .labels, unless: .labels)
        try encode(created, .created, unless: .created)
        try encode(updated, .updated, unless: .updated)
        try encode(resolved, .resolved, unless: .resolved)
        try container.encode(project, forKey: .project)
        try encode(components, .components, unless: .components)
        try encode(reporter, .reporter, unless: .reporter)
        try encode(assignee, .assignee, unless: .assignee)
        try container.encode(comments, forKey: .comments)
    }

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
        // Most issues have no label or one: no set of those seen.
        if labels.count < 2 {
            guard let label = labels.first else { return [] }
            let cleaned = cleaned(label)
            return cleaned.isEmpty ? [] : [cleaned]
        }
        var seen = Set<String>()
        var result: [String] = []
        for label in labels {
            let cleaned = cleaned(label)
            if !cleaned.isEmpty, seen.insert(cleaned).inserted { result.append(cleaned) }
        }
        return result
    }

    /// `label` with each whitespace character made an underscore.
    private static func cleaned(_ label: String) -> String {
        // Most labels are plain ASCII without whitespace: kept as they are, without asking each
        // character's Unicode properties (2 % of an import's CPU did).
        let plain = label.utf8.allSatisfy { $0 < 0x80 && $0 != 0x20 && !(0x09...0x0D).contains($0) }
        return plain ? label : String(label.map { $0.isWhitespace ? "_" : $0 })
    }
}
