import BugSquasherGraph
import BugSquasherJSON
public import Foundation

/// Decodes one Jira REST v2 issue object (one line of an NDJSON export, or one element of the
/// `issues` array of `/rest/api/2/search`) into a ``BugRecord``.
///
/// It tolerates what real exports hold: a missing or `null` description, components, reporter,
/// assignee, resolution or date; the priority `None` (no priority); comments without body or
/// author; no summary (the key becomes the title). It refuses text that is not a JSON object, an
/// issue without `key`, and a date (of the issue or a comment) that is not one.
public struct JiraIssueDecoder: Sendable {
    /// Creates a decoder.
    public init() {}

    /// Decodes one issue.
    ///
    /// - Parameters:
    ///   - json: the UTF-8 JSON text of one issue object.
    ///   - line: the input line it came from, reported in errors.
    /// - Throws: ``ImportError`` with ``ImportError/Code/invalidJSON`` when `json` is not a JSON
    ///   object of the expected shape, ``ImportError/Code/missingKey`` when it has no `key`,
    ///   ``ImportError/Code/invalidRecord`` when a date is not one, or the issue has no `fields`.
    public func decode(_ json: Data, line: Int? = nil) throws -> BugRecord {
        try json.withUnsafeBytes { try decode(bytes: $0.bindMemory(to: UInt8.self), line: line) }
    }

    /// Whether `failure` came from the input ending (an unterminated string or object at its
    /// last byte): a record cut short, not one of the wrong shape.
    private static func endsEarly(_ failure: JSONReader.Failure, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        failure.message == "unexpected end of input" || failure.message == "unterminated string"
            || failure.offset >= bytes.count
    }

    /// Decodes one issue from its UTF-8 bytes; see ``decode(_:line:)``.
    public func decode(bytes: UnsafeBufferPointer<UInt8>, line: Int? = nil) throws -> BugRecord {
        var reader = JSONReader(bytes)
        let issue: JiraPayload.Issue
        do {
            issue = try JiraPayload.Issue.read(from: &reader)
            try reader.end()
        } catch let error as JiraPayload.FieldFailure where Self.endsEarly(error.failure, in: bytes) {
            throw ImportError(
                .invalidJSON,
                "The issue's JSON ends inside its field \(error.path), at byte \(error.failure.offset): the record is cut short (a truncated line or file).",
                advice: "Fix or remove this line.",
                inputLine: line)
        } catch let error as JiraPayload.FieldFailure {
            throw ImportError(
                .invalidJSON,
                "The issue's field \(error.path) is not what Jira's REST API v2 sends (\(error.failure)).",
                advice: "Check that the input is Jira's REST API v2 format, or fix this line.",
                inputLine: line)
        } catch let failure as JSONReader.Failure where Self.endsEarly(failure, in: bytes) {
            throw ImportError(
                .invalidJSON,
                "The issue's JSON ends at byte \(failure.offset), before the object closes: the record is cut short (a truncated line or file).",
                advice: "Fix or remove this line.",
                inputLine: line)
        } catch let failure as JSONReader.Failure {
            throw ImportError(
                .invalidJSON,
                "The input is not a Jira issue object (\(failure)).",
                advice:
                    "Each line must hold one complete JSON object from Jira's REST API v2; fix or remove this line.",
                inputLine: line)
        }
        guard let key = issue.key, !key.isEmpty else {
            throw ImportError(
                .missingKey,
                "The issue has no \"key\" (such as \"TIMOB-100\"), so it cannot be matched to a bug.",
                advice:
                    "Export issues with Jira's REST API v2 (/rest/api/2/search), or remove this one from the input.",
                inputLine: line
            )
        }
        guard issue.fields != nil else {
            // Read as an issue without fields, it would blank the bug's title, status and the
            // rest: a BugSquasher record ({"key", "title", "status", …}) in a JSON array looks
            // like this.
            throw ImportError(
                .invalidRecord,
                "The issue \(key) has no \"fields\" object, so it is not an issue as Jira's REST API v2 sends it, and importing it would blank the bug's title and status.",
                advice:
                    "A file of BugSquasher records (\"key\", \"title\", \"status\" …) imports with --format bugsquasher-ndjson.",
                inputLine: line
            )
        }
        return try Self.record(key: key, issue: issue, line: line)
    }

    /// Maps a decoded issue onto a record.
    private static func record(key: String, issue: JiraPayload.Issue, line: Int?) throws -> BugRecord {
        let fields = issue.fields
        let summary = fields?.summary ?? ""
        // A search with `fields=summary,status` (or a Jira plugin's partial export) sends only
        // those: the others are left as the bug has them.
        var absent = fields?.absent ?? []
        if issue.id == nil { absent.insert(.jiraID) }
        let priority = fields?.priority?.name.flatMap { $0.isEmpty || $0 == "None" ? nil : $0 }
        let projectKey = fields?.project?.key.flatMap { $0.isEmpty ? nil : $0 } ?? projectKey(fromIssueKey: key)
        var record = BugRecord(
            key: key,
            jiraID: issue.id,
            title: summary.isEmpty ? key : summary,
            details: fields?.description,
            status: fields?.status?.name ?? "Unknown",
            resolution: fields?.resolution?.name,
            priority: priority,
            type: fields?.issuetype?.name,
            labels: BugRecord.normalizedLabels((fields?.labels ?? []).compactMap { $0 }),
            created: try date(fields?.created, "fields.created", line: line),
            updated: try date(fields?.updated, "fields.updated", line: line),
            resolved: try date(fields?.resolutiondate, "fields.resolutiondate", line: line),
            project: ProjectRecord(key: projectKey, name: fields?.project?.name),
            components: unique((fields?.components ?? []).compactMap { $0?.name }.filter { !$0.isEmpty }),
            reporter: person(fields?.reporter),
            assignee: person(fields?.assignee),
            comments: try comments(fields?.comment?.comments ?? [], line: line)
        )
        record.absent = absent
        return record
    }

    /// A date field: `nil` when absent or empty; an unreadable one rejects the issue rather
    /// than being stored as no date.
    private static func date(_ text: String?, _ path: @autoclosure () -> String, line: Int?) throws -> Date? {
        guard let text, !text.isEmpty else { return nil }
        guard let date = ISO8601Date.parse(text) else {
            let problem =
                ISO8601Date.isOutsideFourDigitYears(text)
                ? "which is outside the years 0001 to 9999 (in UTC)"
                : "which is not a date as Jira's REST API v2 sends it (2011-04-15T02:23:39.000+0000)"
            throw ImportError(
                .invalidRecord,
                "The issue's \(path()) holds '\(text.prefix(60))', \(problem).", advice: "Fix or remove this line.",
                inputLine: line)
        }
        return date
    }

    /// An issue's comments (`fields.comment.comments`); one without its id rejects the issue.
    private static func comments(_ comments: [JiraPayload.Comment?], line: Int?) throws -> [CommentRecord] {
        try comments.enumerated().compactMap { index, comment in
            // A null entry holds nothing; a comment without its id cannot be keyed, and
            // leaving it out would lose it without a word.
            guard let comment else { return nil }
            guard let id = comment.id, !id.isEmpty else {
                throw ImportError(
                    .invalidRecord,
                    "The issue's fields.comment.comments[\(index)] has no \"id\"; BugSquasher keys comments by their Jira id, so that a re-import updates them instead of adding copies.",
                    advice: "Give each comment its id, or remove the comment from this line.",
                    inputLine: line)
            }
            return CommentRecord(
                jiraID: id,
                body: comment.body ?? "",
                author: person(comment.author),
                created: try date(comment.created, "comment \(id).created", line: line),
                updated: try date(comment.updated, "comment \(id).updated", line: line)
            )
        }
    }

    /// A user as a person record: by account name, else by user key; `nil` without either.
    private static func person(_ user: JiraPayload.User?) -> PersonRecord? {
        guard let user else { return nil }
        if let name = user.name, !name.isEmpty { return PersonRecord(name: name, displayName: user.displayName) }
        if let key = user.key, !key.isEmpty { return PersonRecord(name: key, displayName: user.displayName) }
        return nil
    }

    /// `TIMOB` for `TIMOB-100`: the project key when an issue does not name its project.
    private static func projectKey(fromIssueKey key: String) -> String {
        guard let dash = key.lastIndex(of: "-"), dash != key.startIndex else { return key }
        return String(key[..<dash])
    }

    /// The strings in their first order, without repeats (byte for byte, as the store compares
    /// names).
    private static func unique(_ strings: [String]) -> [String] {
        guard strings.count > 1 else { return strings }
        var seen = Set<StoredText>()
        return strings.filter { seen.insert(StoredText($0)).inserted }
    }
}
