public import BugSquasherGraph

/// Inserts or updates bugs from ``BugRecord``s in an importer context, a chunk at a time, with one
/// `IN` fetch per entity (at most ``inListLimit`` values each); only what really changed is dirtied.
/// It does not save: the caller does, once per chunk.
///
/// ```swift
/// let summary = try await context.perform { context in try BugUpserter().upsert(records, in: context) }
/// ```
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "An upsert changes only what the records change".
public struct BugUpserter: Sendable {
    /// At most this many values go into one `IN` predicate; longer lists are fetched in parts.
    public static let inListLimit = 500

    /// The entities whose objects many bugs share (people, components, projects): links to
    /// them can be deferred (see ``DeferredLinks``).
    public static let sharedEntities: Set<String> = ["Person", "Component", "Project"]

    /// When set, the upserter gives way to interactive saves before each record it checks or
    /// applies and before each fetch (see ``EditsFirst/yieldToInteractiveSaves()``): it may then
    /// block its thread for a moment.
    public var editsFirst: EditsFirst?

    /// Whether new bugs and their comments are inserted as rows, without objects
    /// (`ObjectContext.insertRow(_:values:)`), for a context that saves and is dropped without
    /// reading them again, such as an importer's chunk. A chunk in which a bug or comment key
    /// repeats, and a new bug with a comment that exists already, are upserted as objects. What
    /// the save writes and broadcasts is the same either way.
    ///
    /// Why: docs/DESIGN-NOTES.md, "New bugs are inserted as rows".
    public var insertsRows: Bool

    /// Creates an upserter; `editsFirst`, when given, is ``editsFirst``; `insertsRows` is
    /// ``insertsRows``.
    public init(editsFirst: EditsFirst? = nil, insertsRows: Bool = false) {
        self.editsFirst = editsFirst
        self.insertsRows = insertsRows
    }

    /// Upserts one chunk of records into `context`, without saving it.
    ///
    /// - Parameters:
    ///   - keys: `UpsertKeys(records)`, when the caller built them already; built here otherwise.
    ///   - validated: whether the caller ran ``validate(_:at:)`` on every record; they are not checked again.
    ///   - absentBugs: keys of bugs the caller found no row for (a query of its own, such as the
    ///     digests of ``SourceDigest``): they are not looked up again, nor are their records'
    ///     comments. Should one exist after all (a bug inserted meanwhile, a comment under another
    ///     bug), the save fails on its unique key; upsert the records again without `absentBugs`.
    /// - Returns: how many bugs were inserted, updated or left unchanged.
    /// - Throws: ``ImportError`` (``ImportError/Code/invalidRecord``), before changing anything, for an empty
    ///   or blank key, project key, person name, component name or comment ID; `GraphError` if a fetch fails.
    public func upsert(
        _ records: [BugRecord], keys: UpsertKeys? = nil, validated: Bool = false, absentBugs: Set<StoredText> = [],
        in context: isolated ObjectContext
    ) throws -> UpsertSummary {
        var pass = UpsertPass(inListLimit: Self.inListLimit, editsFirst: editsFirst, absentBugs: absentBugs)
        return try upsert(records, keys: keys, validated: validated, with: &pass, in: context)
    }

    /// Upserts `records` like ``upsert(_:keys:validated:in:)``, except that the links to the
    /// people, components and projects with `deferred` keys (which another save is writing) are
    /// not made: they are returned, for ``link(_:in:)`` once that save has committed (none, when
    /// `deferred` is empty). The
    /// objects with those keys are neither fetched nor touched meanwhile, and a bug whose only
    /// change waits counts as unchanged in ``upsert(_:keys:validated:in:)``'s terms.
    public func upsert(
        _ records: [BugRecord], keys: UpsertKeys? = nil, validated: Bool = false, absentBugs: Set<StoredText> = [],
        deferring deferred: UpsertKeys, in context: isolated ObjectContext
    ) throws -> DeferredLinks {
        var pass = UpsertPass(
            inListLimit: Self.inListLimit, editsFirst: editsFirst, deferring: deferred, absentBugs: absentBugs)
        _ = try upsert(records, keys: keys, validated: validated, with: &pass, in: context)
        return DeferredLinks(keys: deferred, links: pass.links)
    }

    /// Makes the links an upsert deferred (see ``DeferredLinks``): fetches the objects they
    /// name, applies the records' values to them (a person's display name, a project's name),
    /// and links them. Objects that do not exist after all are inserted.
    public func link(_ deferred: DeferredLinks, in context: isolated ObjectContext) throws {
        guard !deferred.isEmpty else { return }
        var pass = UpsertPass(inListLimit: Self.inListLimit, editsFirst: editsFirst)
        try pass.link(deferred, in: context)
    }

    private func upsert(
        _ records: [BugRecord], keys: UpsertKeys?, validated: Bool, with pass: inout UpsertPass,
        in context: isolated ObjectContext
    ) throws -> UpsertSummary {
        // Records are read in place (through the buffer), not copied: a copy of a record retains
        // every string of it, and this runs for every record of every chunk. `apply` takes a
        // pointer because a subscript's element, passed as an argument, is copied out.
        try records.withUnsafeBufferPointer { records in
            for index in records.indices where !validated {
                editsFirst?.yieldToInteractiveSaves()
                try Self.validate(records.baseAddress! + index, at: index)
            }
            let keys = keys ?? UpsertKeys(records)
            let commentCount = records.reduce(0) { $0 + $1.comments.count }
            // The key set tells whether a key repeats; only then is each key's outcome merged
            // over its records.
            let repeated = records.count - (keys.byEntity["Bug"]?.count ?? 0)
            if insertsRows, repeated == 0, commentCount == keys.byEntity["Comment"]?.count ?? 0 {
                pass.rowColumns = RowColumns(context.coordinator.model)
            }
            // Each record's bug and comments (as objects, or as rows when new), and a few projects,
            // people and components.
            let insertsAsRows = pass.rowColumns != nil
            context.reserveCapacity(
                (insertsAsRows ? 0 : records.count + commentCount) + 64,
                rows: insertsAsRows ? records.count + commentCount : 0)
            try pass.fetchExisting(keys, records: records, in: context)
            var summary = UpsertSummary(repeated: repeated)
            if repeated == 0 {
                for index in records.indices {
                    editsFirst?.yieldToInteractiveSaves()
                    summary.count(pass.apply(records.baseAddress! + index, in: context))
                }
                return summary
            }
            var outcomes: [StoredText: UpsertPass.Outcome] = [:]
            for index in records.indices {
                editsFirst?.yieldToInteractiveSaves()
                let outcome = pass.apply(records.baseAddress! + index, in: context)
                outcomes[StoredText(records[index].key), default: outcome].merge(outcome)
            }
            for outcome in outcomes.values { summary.count(outcome) }
            return summary
        }
    }

    /// Throws ``ImportError`` for a record whose unique keys cannot be stored (an empty or blank
    /// key, project key, person name, component name or comment ID); `index` is named in the
    /// message.
    public static func validate(_ record: BugRecord, at index: Int) throws {
        try withUnsafePointer(to: record) { try validate($0, at: index) }
    }

    /// ``validate(_:at:)`` of a record read in place: an element of the chunk passed by value
    /// would be copied out of it, retaining each of its strings, for every record imported.
    static func validate(_ record: UnsafePointer<BugRecord>, at index: Int) throws {
        if let what = emptyUniqueKey(of: record) {
            throw ImportError(
                .invalidRecord,
                "Record \(index) (key \"\(record.pointee.key)\") has an empty or blank \(what); it is a unique key and cannot be stored.",
                advice: "Fix the record or leave it out of the chunk."
            )
        }
        // Two checks, not a loop over an array of the keys: this runs for every record imported.
        // (CSV cells are trimmed before they get here.)
        if EntityDescription.hasStrayCharacters(inKey: record.pointee.key) {
            throw strayCharacters(in: "key", record.pointee.key, record: index)
        }
        if EntityDescription.hasStrayCharacters(inKey: record.pointee.project.key) {
            throw strayCharacters(in: "project key", record.pointee.project.key, record: index)
        }
    }

    private static func strayCharacters(in what: String, _ key: String, record index: Int) -> ImportError {
        ImportError(
            .invalidRecord,
            "Record \(index) has the \(what) \(String(reflecting: key)), with spaces around it or a control character in it: no lookup by that key would find it.",
            advice: "Fix the record or leave it out of the chunk."
        )
    }

    /// What in `record` is an empty or blank (whitespace only) unique key, if anything. (No
    /// closure captures the record: that would copy it, retaining each of its strings, for every
    /// record imported.)
    private static func emptyUniqueKey(of record: UnsafePointer<BugRecord>) -> String? {
        if isBlank(record.pointee.key) { return "key" }
        if isBlank(record.pointee.project.key) { return "project key" }
        if record.pointee.components.contains(where: isBlank) { return "component name" }
        if let reporter = record.pointee.reporter?.name, isBlank(reporter) { return "person name" }
        if let assignee = record.pointee.assignee?.name, isBlank(assignee) { return "person name" }
        for comment in record.pointee.comments {
            if isBlank(comment.jiraID) { return "comment jiraID" }
            if comment.author.map({ isBlank($0.name) }) == true { return "comment author name" }
        }
        return nil
    }

    /// Whether `key` is empty or only whitespace: no key names a bug, project, person, component
    /// or comment that way, and such keys are mistakes (a column shifted, a field left blank).
    private static func isBlank(_ key: String) -> Bool {
        // A key that starts with a printable ASCII character (nearly every key) is not blank,
        // decided without Unicode's tables; the others are checked character by character.
        if let first = key.utf8.first, first > 0x20, first < 0x7F { return false }
        return key.allSatisfy(\.isWhitespace)
    }
}
