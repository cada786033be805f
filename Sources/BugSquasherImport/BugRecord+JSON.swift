import BugSquasherGraph
package import BugSquasherJSON
import Foundation

extension BugRecord {
    /// Decodes a record from its JSON form — what `JSONEncoder` writes for a `BugRecord` with
    /// ISO 8601 dates, and the `bugsquasher-ndjson` import format — straight from the bytes.
    ///
    /// `key` and `project` are required, `comments` defaults to empty, and any other field left out is
    /// ``absent`` (an existing bug keeps its value). A field the format does not have (a misspelled
    /// `titel`), a field given twice, and a blank `title` or `status` are refused.
    ///
    /// - Throws: ``ImportError`` with code `invalidJSON` or `invalidRecord` naming the field.
    public init(json bytes: UnsafeBufferPointer<UInt8>) throws {
        var reader = JSONReader(bytes)
        do {
            self = try Self.read(from: &reader)
            try reader.end()
        } catch let failure as JSONReader.Failure {
            throw ImportError(.invalidJSON, failure.description)
        }
    }

    /// Reads one record object at the reader's position.
    package static func read(from reader: inout JSONReader) throws -> BugRecord {
        var key: String?
        var title: String?
        var status: String?
        var project: ProjectRecord?
        var hasComments = false
        var record = BugRecord(key: "", title: "", status: "", project: ProjectRecord(key: ""))
        // Fields are walked without a closure: a struct a closure captures is copied out at the
        // end, retaining and releasing every string of the record.
        // Fields the record leaves out are not known, which is not the same as empty.
        record.absent = .all
        var fields = try reader.beginObject()
        while let name = try reader.nextName(&fields) {
            // Made into a string only for a message.
            var field: String { name.string }
            do {
                switch Self.field(named: name) {
                case .key?:
                    try once(key == nil, field)
                    key = try reader.string()
                case .title?:
                    try record.take(.title, field)
                    title = try reader.string()
                case .status?:
                    try record.take(.status, field)
                    status = try reader.string()
                case .project?:
                    try once(project == nil, field)
                    project = try ProjectRecord.read(from: &reader)
                case .comments?:
                    try once(!hasComments, field)
                    hasComments = true
                    record.comments = try readComments(from: &reader)
                case let other?:
                    try record.readField(other, named: field, from: &reader)
                case nil:
                    try reader.skip()
                    // A Jira issue in input read as BugSquasher's own format (detected from its first record).
                    throw unknownField(
                        field, of: "a bug record", known: fieldNames, hint: field == "fields" ? Self.jiraIssueHint : nil
                    )
                }
            } catch let failure as JSONReader.Failure {
                throw fieldError(field, failure)
            }
        }
        guard let key else { throw ImportError(.missingKey, "missing field 'key'") }
        guard let project else { throw ImportError(.invalidRecord, "missing field 'project'") }
        record.key = key
        try record.settle(title: title, status: status)
        record.project = project
        return record
    }

    /// Reads a field kept in the record as read (all but the key, title, status, project and
    /// comments, which ``read(from:)`` reads), refusing it when the record carried it already.
    @inline(__always)
    private mutating func readField(
        _ which: CodingKeys, named field: @autoclosure () -> String, from reader: inout JSONReader
    ) throws {
        switch which {
        case .jiraID:
            try take(.jiraID, field())
            jiraID = reader.null() ? nil : try reader.stringOrNumber()
        case .details:
            try take(.details, field())
            details = try reader.optionalString()
        case .resolution:
            try take(.resolution, field())
            resolution = try reader.optionalString()
        case .priority:
            try take(.priority, field())
            priority = try reader.optionalString()
        case .type:
            try take(.type, field())
            type = try reader.optionalString()
        case .labels:
            try take(.labels, field())
            labels = reader.null() ? [] : try reader.strings()
        case .created:
            try take(.created, field())
            created = try Self.date(&reader)
        case .updated:
            try take(.updated, field())
            updated = try Self.date(&reader)
        case .resolved:
            try take(.resolved, field())
            resolved = try Self.date(&reader)
        case .components:
            try take(.components, field())
            components = reader.null() ? [] : try reader.strings()
        case .reporter:
            try take(.reporter, field())
            reporter = reader.null() ? nil : try PersonRecord.read(from: &reader)
        case .assignee:
            try take(.assignee, field())
            assignee = reader.null() ? nil : try PersonRecord.read(from: &reader)
        case .key, .title, .status, .project, .comments:
            preconditionFailure("field '\(field())' is read by BugRecord.read(from:)")
        }
    }

    /// Reads a record's `comments` (`null` for none).
    private static func readComments(from reader: inout JSONReader) throws -> [CommentRecord] {
        var comments: [CommentRecord] = []
        if !reader.null() {
            try reader.array { comments.append(try CommentRecord.read(from: &$0)) }
        }
        return comments
    }

    /// Sets the title and status read, refusing blank ones; left out, a new bug takes its key as
    /// title and `Unknown` as status.
    private mutating func settle(title: String?, status: String?) throws {
        self.title =
            try title.map { try Self.notBlank($0, "title", leftOut: "keeps the bug's title (a new bug takes its key)") }
            ?? key
        self.status =
            try status.map {
                try Self.notBlank($0, "status", leftOut: "keeps the bug's status (a new bug gets Unknown)")
            }
            ?? "Unknown"
    }

    /// The fields of a record, in the order ``encode(to:)`` writes them.
    static let fieldNames = CodingKeys.allCases.map(\.stringValue)

    /// The field `name` names, if any. Every field of every record imported is looked up: by
    /// its length first, so that a name is compared with one or a few names of that length.
    static func field(named name: JSONReader.Name) -> CodingKeys? {
        switch name.byteCount {
        case 3: return name == "key" ? .key : nil
        case 4: return name == "type" ? .type : nil
        case 5: return name == "title" ? .title : nil
        case 6: return name == "status" ? .status : name == "labels" ? .labels : name == "jiraID" ? .jiraID : nil
        case 7:
            return name == "details"
                ? .details
                : name == "project" ? .project : name == "created" ? .created : name == "updated" ? .updated : nil
        case 8:
            return name == "priority"
                ? .priority
                : name == "comments"
                    ? .comments
                    : name == "reporter"
                        ? .reporter : name == "assignee" ? .assignee : name == "resolved" ? .resolved : nil
        case 10: return name == "components" ? .components : name == "resolution" ? .resolution : nil
        default: return nil
        }
    }

    /// Why a record has a Jira issue's `fields`.
    static let jiraIssueHint =
        "a Jira issue's field: this input is read as bugsquasher-ndjson, detected from its first record or given with --format; import Jira issues on their own, with --format jira-json"

    /// Marks `field` as read, refusing it when the record carried it already.
    private mutating func take(_ field: Fields, _ name: @autoclosure () -> String) throws {
        try once(absent.contains(field), name())
        absent.remove(field)
    }

    /// `text`, refused when it is empty or only whitespace: a record that carries `field` sets it.
    private static func notBlank(_ text: String, _ field: String, leftOut: String) throws -> String {
        // Nearly every title and status starts with a printable ASCII character: no need to
        // walk its characters.
        if let first = text.utf8.first, first > 0x20, first < 0x7F { return text }
        guard text.contains(where: { !$0.isWhitespace }) else {
            throw ImportError(
                .invalidRecord, "field '\(field)' is blank.",
                advice: "Give it a value, or leave the field out, which \(leftOut).")
        }
        return text
    }

    /// A syntax or type error in `field`, naming it.
    static func fieldError(_ field: String, _ failure: JSONReader.Failure) -> ImportError {
        // A field of the wrong shape (a project given as its key alone) is shown the right one.
        let shape = fieldShapes[field].map { "It is written \"\(field)\": \($0) (docs/IMPORTS.md)." } ?? ""
        return ImportError(
            .invalidRecord, "field '\(field)': \(failure.description)\(shape.isEmpty ? "" : ".")", advice: shape)
    }

    /// How the fields of a record that are not plain strings are written, for messages.
    static let fieldShapes: [String: String] = [
        "project": #"{"key": "TIMOB", "name": "Titanium Mobile"}"#,
        "reporter": #"{"name": "jdoe", "displayName": "Jane Doe"}"#,
        "assignee": #"{"name": "jdoe", "displayName": "Jane Doe"}"#,
        "labels": #"["crash", "ios"]"#,
        "components": #"["Android", "iOS"]"#,
        "comments":
            #"[{"jiraID": "10001", "body": "Seen again", "author": {"name": "jdoe"}, "created": "2011-04-15T02:23:39Z"}]"#,
    ]

    /// Reads an ISO 8601 date string (or `null`).
    static func date(_ reader: inout JSONReader) throws -> Date? {
        guard let text = try reader.optionalString() else { return nil }
        guard let date = ISO8601Date.parse(text) else {
            throw ImportError(
                .invalidRecord,
                ISO8601Date.refusal(
                    of: text, otherwise: "'\(text)' is not an ISO 8601 date such as 2011-04-15T02:23:39Z"))
        }
        return date
    }
}

/// Refuses a field an object carries a second time (`first` is false then): JSON leaves the
/// meaning of a repeated name open, and silently taking one of the values could lose the other.
private func once(_ first: Bool, _ field: @autoclosure () -> String) throws {
    guard first else {
        throw ImportError(
            .invalidRecord, "field '\(field())' appears twice in one object.", advice: "Keep the one value meant.")
    }
}

/// A field `object` does not have, with `hint` when the caller knows why it is there, or else
/// the name meant when it is a near miss (`titel`). The caller skips the field's value first,
/// so that broken JSON is reported as such.
private func unknownField(_ field: String, of object: String, known: [String], hint: String? = nil) -> ImportError {
    // A name far longer than any field is no near miss, and is cut short in the message.
    let hint =
        hint
        ?? (field.count > 32
            ? nil
            : known.first { distance(field.lowercased(), $0.lowercased()) <= max(1, $0.count / 4) }.map {
                "did you mean '\($0)'?"
            })
    let shown = field.count > 64 ? field.prefix(64) + "…" : field
    return ImportError(
        .invalidRecord,
        "\(object) has no field '\(shown)'\(hint.map { " (\($0))" } ?? ""); its fields are \(known.joined(separator: ", "))."
    )
}

/// The edit distance between two short strings: the fewest characters to insert, delete or
/// replace, or neighbours to swap, to turn one into the other (`titel` is 1 from `title`).
private func distance(_ a: String, _ b: String) -> Int {
    let a = Array(a)
    let b = Array(b)
    // d[i][j]: the distance between the first i characters of a and the first j of b.
    var d = (0...a.count).map { i in (0...b.count).map { j in i == 0 ? j : (j == 0 ? i : 0) } }
    for i in a.indices {
        for j in b.indices {
            d[i + 1][j + 1] = min(d[i][j + 1] + 1, d[i + 1][j] + 1, d[i][j] + (a[i] == b[j] ? 0 : 1))
            if i > 0, j > 0, a[i] == b[j - 1], a[i - 1] == b[j] {
                d[i + 1][j + 1] = min(d[i + 1][j + 1], d[i - 1][j - 1] + 1)
            }
        }
    }
    return d[a.count][b.count]
}

extension ProjectRecord {
    /// Reads `{"key": …, "name": …}`.
    package static func read(from reader: inout JSONReader) throws -> ProjectRecord {
        var key: String?
        var name: String?
        var hasName = false
        try reader.objectByName { reader, field in
            switch field {
            case "key":
                try once(key == nil, "project.key")
                key = try reader.string()
            case "name":
                try once(!hasName, "project.name")
                hasName = true
                name = try reader.optionalString()
            default:
                try reader.skip()
                throw unknownField(field.string, of: "a project", known: ["key", "name"])
            }
        }
        guard let key else { throw ImportError(.invalidRecord, "missing field 'project.key'") }
        return ProjectRecord(key: key, name: name)
    }
}

extension PersonRecord {
    /// Reads `{"name": …, "displayName": …}`.
    package static func read(from reader: inout JSONReader) throws -> PersonRecord {
        var name: String?
        var displayName: String?
        var hasDisplayName = false
        try reader.objectByName { reader, field in
            switch field {
            case "name":
                try once(name == nil, "name")
                name = try reader.string()
            case "displayName":
                try once(!hasDisplayName, "displayName")
                hasDisplayName = true
                displayName = try reader.optionalString()
            default:
                try reader.skip()
                throw unknownField(field.string, of: "a person", known: ["name", "displayName"])
            }
        }
        guard let name else { throw ImportError(.invalidRecord, "missing field 'name' of a person") }
        return PersonRecord(name: name, displayName: displayName)
    }
}

extension CommentRecord {
    /// Reads `{"jiraID": …, "body": …, "author": …, "created": …, "updated": …}`.
    package static func read(from reader: inout JSONReader) throws -> CommentRecord {
        var jiraID: String?
        var body: String?
        var author: PersonRecord?
        var created: Date?
        var updated: Date?
        // The fields that may be null, once read (a comment is decoded per comment of an
        // import: no set of names is built for it).
        var hasAuthor = false
        var hasCreated = false
        var hasUpdated = false
        try reader.objectByName { reader, field in
            switch field {
            case "jiraID":
                try once(jiraID == nil, "comments[].jiraID")
                jiraID = try reader.stringOrNumber()
            case "body":
                try once(body == nil, "comments[].body")
                body = try reader.string()
            case "author":
                try once(!hasAuthor, "comments[].author")
                hasAuthor = true
                author = reader.null() ? nil : try PersonRecord.read(from: &reader)
            case "created":
                try once(!hasCreated, "comments[].created")
                hasCreated = true
                created = try BugRecord.date(&reader)
            case "updated":
                try once(!hasUpdated, "comments[].updated")
                hasUpdated = true
                updated = try BugRecord.date(&reader)
            default:
                try reader.skip()
                throw unknownField(
                    field.string, of: "a comment", known: ["jiraID", "body", "author", "created", "updated"])
            }
        }
        guard let jiraID, let body else { throw ImportError(.invalidRecord, "a comment needs 'jiraID' and 'body'") }
        return CommentRecord(jiraID: jiraID, body: body, author: author, created: created, updated: updated)
    }
}
