import BugSquasherGraph
package import BugSquasherJSON
import Foundation

extension BugRecord {
    /// Decodes a record from its JSON form — what `JSONEncoder` writes for a `BugRecord` with
    /// ISO 8601 dates, and the `bugsquasher-ndjson` import format — straight from the bytes.
    ///
    /// `key` and `project` are required; `comments` defaults to empty; unknown fields are
    /// skipped. Any other field left out is one the record does not carry (``absent``): an
    /// existing bug keeps its value, and a new bug gets its key as title, `Unknown` as status,
    /// and nothing for the rest.
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
        var key: String?, title: String?, status: String?, project: ProjectRecord?
        var record = BugRecord(key: "", title: "", status: "", project: ProjectRecord(key: ""))
        // Fields are walked without a closure: a struct a closure captures is copied out at the
        // end, retaining and releasing every string of the record.
        // Fields the record leaves out are not known, which is not the same as empty.
        record.absent = .all
        var fields = try reader.beginObject()
        while let field = try reader.nextKey(&fields) {
            do {
                switch field {
                case "key": key = try reader.string()
                case "jiraID": record.jiraID = reader.null() ? nil : try reader.stringOrNumber(); record.absent.remove(.jiraID)
                case "title": title = try reader.string(); record.absent.remove(.title)
                case "details": record.details = try reader.optionalString(); record.absent.remove(.details)
                case "status": status = try reader.string(); record.absent.remove(.status)
                case "resolution": record.resolution = try reader.optionalString(); record.absent.remove(.resolution)
                case "priority": record.priority = try reader.optionalString(); record.absent.remove(.priority)
                case "type": record.type = try reader.optionalString(); record.absent.remove(.type)
                case "labels": record.labels = reader.null() ? [] : try reader.strings(); record.absent.remove(.labels)
                case "created": record.created = try date(&reader); record.absent.remove(.created)
                case "updated": record.updated = try date(&reader); record.absent.remove(.updated)
                case "resolved": record.resolved = try date(&reader); record.absent.remove(.resolved)
                case "project": project = try ProjectRecord.read(from: &reader)
                case "components": record.components = reader.null() ? [] : try reader.strings(); record.absent.remove(.components)
                case "reporter": record.reporter = reader.null() ? nil : try PersonRecord.read(from: &reader); record.absent.remove(.reporter)
                case "assignee": record.assignee = reader.null() ? nil : try PersonRecord.read(from: &reader); record.absent.remove(.assignee)
                case "comments":
                    var comments: [CommentRecord] = []
                    if !reader.null() {
                        try reader.array { comments.append(try CommentRecord.read(from: &$0)) }
                    }
                    record.comments = comments
                default: try reader.skip()
                }
            } catch let failure as JSONReader.Failure {
                throw fieldError(field, failure)
            }
        }
        guard let key else { throw ImportError(.missingKey, "missing field 'key'") }
        guard let project else { throw ImportError(.invalidRecord, "missing field 'project'") }
        record.key = key
        record.title = title ?? key
        record.status = status ?? "Unknown"
        record.project = project
        return record
    }

    /// A syntax or type error in `field`, naming it.
    static func fieldError(_ field: String, _ failure: JSONReader.Failure) -> ImportError {
        ImportError(.invalidRecord, "field '\(field)': \(failure.description)")
    }

    /// Reads an ISO 8601 date string (or `null`).
    static func date(_ reader: inout JSONReader) throws -> Date? {
        guard let text = try reader.optionalString() else { return nil }
        guard let date = ISO8601Date.parse(text) else {
            throw ImportError(.invalidRecord, ISO8601Date.refusal(of: text, otherwise: "'\(text)' is not an ISO 8601 date such as 2011-04-15T02:23:39Z"))
        }
        return date
    }
}

extension ProjectRecord {
    /// Reads `{"key": …, "name": …}`.
    package static func read(from reader: inout JSONReader) throws -> ProjectRecord {
        var key: String?, name: String?
        try reader.object { reader, field in
            switch field {
            case "key": key = try reader.string()
            case "name": name = try reader.optionalString()
            default: try reader.skip()
            }
        }
        guard let key else { throw ImportError(.invalidRecord, "missing field 'project.key'") }
        return ProjectRecord(key: key, name: name)
    }
}

extension PersonRecord {
    /// Reads `{"name": …, "displayName": …}`.
    package static func read(from reader: inout JSONReader) throws -> PersonRecord {
        var name: String?, displayName: String?
        try reader.object { reader, field in
            switch field {
            case "name": name = try reader.string()
            case "displayName": displayName = try reader.optionalString()
            default: try reader.skip()
            }
        }
        guard let name else { throw ImportError(.invalidRecord, "missing field 'name' of a person") }
        return PersonRecord(name: name, displayName: displayName)
    }
}

extension CommentRecord {
    /// Reads `{"jiraID": …, "body": …, "author": …, "created": …, "updated": …}`.
    package static func read(from reader: inout JSONReader) throws -> CommentRecord {
        var jiraID: String?, body: String?, author: PersonRecord?, created: Date?, updated: Date?
        try reader.object { reader, field in
            switch field {
            case "jiraID": jiraID = try reader.stringOrNumber()
            case "body": body = try reader.string()
            case "author": author = reader.null() ? nil : try PersonRecord.read(from: &reader)
            case "created": created = try BugRecord.date(&reader)
            case "updated": updated = try BugRecord.date(&reader)
            default: try reader.skip()
            }
        }
        guard let jiraID, let body else { throw ImportError(.invalidRecord, "a comment needs 'jiraID' and 'body'") }
        return CommentRecord(jiraID: jiraID, body: body, author: author, created: created, updated: updated)
    }
}
