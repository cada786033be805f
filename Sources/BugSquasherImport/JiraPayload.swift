import BugSquasherJSON

/// The part of Jira's REST v2 issue JSON the importer reads.
///
/// Every property is optional, so that missing and `null` fields decode as `nil` (the real data
/// has issues without description, components, reporter or summary); everything else in the
/// JSON (versions, links, attachments, …) is ignored.
enum JiraPayload {
    /// One issue: `{"id": …, "key": …, "fields": {…}}`.
    struct Issue {
        var id: String?
        var key: String?
        var fields: Fields?
    }

    /// The `fields` object of an issue.
    struct Fields {
        var summary: String?
        var description: String?
        var status: Named?
        var resolution: Named?
        var priority: Named?
        var issuetype: Named?
        var labels: [String?]?
        var created: String?
        var updated: String?
        var resolutiondate: String?
        var project: Project?
        var components: [Named?]?
        var reporter: User?
        var assignee: User?
        var comment: CommentPage?
        /// The record fields whose Jira field the object left out (a `null` one is present):
        /// not known, which is not the same as empty.
        var absent = BugRecord.Fields.all.subtracting(.jiraID)
    }

    /// Any object that is identified by its `name` (status, priority, component, …).
    struct Named {
        var name: String?
    }

    /// The `project` object.
    struct Project {
        var key: String?
        var name: String?
    }

    /// A user object (reporter, assignee, comment author).
    struct User {
        var name: String?
        var key: String?
        var displayName: String?
    }

    /// The `comment` object: one page of comments.
    struct CommentPage {
        var comments: [Comment?]?
    }

    /// One comment.
    struct Comment {
        var id: String?
        var body: String?
        var author: User?
        var created: String?
        var updated: String?
    }
}

// Reading the payload straight from the bytes with ``JSONReader`` (a quarter of the import's CPU
// went to `JSONDecoder` before). Every field may be missing or `null`; unknown ones are skipped.
extension JiraPayload.Issue {
    static func read(from reader: inout JSONReader) throws -> Self {
        var issue = Self()
        try reader.objectByName { reader, field in
            try JiraPayload.field(field.string) {
                switch field {
                case "id": issue.id = reader.null() ? nil : try reader.stringOrNumber()
                case "key": issue.key = try reader.optionalString()
                case "fields": issue.fields = reader.null() ? nil : try JiraPayload.Fields.read(from: &reader)
                default: try reader.skip()
                }
            }
        }
        return issue
    }
}

extension JiraPayload.Fields {
    static func read(from reader: inout JSONReader) throws -> Self {
        var fields = Self()
        // Walked without a closure: one capturing `fields` would copy it out at the end,
        // retaining and releasing every string read.
        var object = try reader.beginObject()
        while let field = try reader.nextName(&object) {
            do {
                switch field {
                case "summary":
                    fields.summary = try reader.optionalString()
                    fields.absent.remove(.title)
                case "description":
                    fields.description = try reader.optionalString()
                    fields.absent.remove(.details)
                case "status":
                    fields.status = try JiraPayload.Named.readOptional(from: &reader)
                    fields.absent.remove(.status)
                case "resolution":
                    fields.resolution = try JiraPayload.Named.readOptional(from: &reader)
                    fields.absent.remove(.resolution)
                case "priority":
                    fields.priority = try JiraPayload.Named.readOptional(from: &reader)
                    fields.absent.remove(.priority)
                case "issuetype":
                    fields.issuetype = try JiraPayload.Named.readOptional(from: &reader)
                    fields.absent.remove(.type)
                case "labels":
                    fields.absent.remove(.labels)
                    if !reader.null() { fields.labels = try readLabels(from: &reader) }
                case "created":
                    fields.created = try reader.optionalString()
                    fields.absent.remove(.created)
                case "updated":
                    fields.updated = try reader.optionalString()
                    fields.absent.remove(.updated)
                case "resolutiondate":
                    fields.resolutiondate = try reader.optionalString()
                    fields.absent.remove(.resolved)
                case "project": fields.project = try JiraPayload.Project.readOptional(from: &reader)
                case "components":
                    fields.absent.remove(.components)
                    if !reader.null() { fields.components = try readComponents(from: &reader) }
                case "reporter":
                    fields.reporter = try JiraPayload.User.readOptional(from: &reader)
                    fields.absent.remove(.reporter)
                case "assignee":
                    fields.assignee = try JiraPayload.User.readOptional(from: &reader)
                    fields.absent.remove(.assignee)
                case "comment": fields.comment = try JiraPayload.CommentPage.readOptional(from: &reader)
                default: try reader.skip()
                }
            } catch let failure as JSONReader.Failure {
                throw JiraPayload.FieldFailure(path: "fields." + field.string, failure: failure)
            }
        }
        return fields
    }

    /// The elements of a `labels` array, `null` ones kept.
    private static func readLabels(from reader: inout JSONReader) throws -> [String?] {
        var labels: [String?] = []
        try reader.array { labels.append(try $0.optionalString()) }
        return labels
    }

    /// The elements of a `components` array, `null` ones kept.
    private static func readComponents(from reader: inout JSONReader) throws -> [JiraPayload.Named?] {
        var components: [JiraPayload.Named?] = []
        try reader.array { components.append(try JiraPayload.Named.readOptional(from: &$0)) }
        return components
    }
}

extension JiraPayload.Named {
    static func readOptional(from reader: inout JSONReader) throws -> Self? {
        if reader.null() { return nil }
        var named = Self()
        try reader.objectByName { reader, key in
            if key == "name" { named.name = try reader.optionalString() } else { try reader.skip() }
        }
        return named
    }
}

extension JiraPayload.Project {
    static func readOptional(from reader: inout JSONReader) throws -> Self? {
        if reader.null() { return nil }
        var project = Self()
        try reader.objectByName { reader, key in
            switch key {
            case "key": project.key = try reader.optionalString()
            case "name": project.name = try reader.optionalString()
            default: try reader.skip()
            }
        }
        return project
    }
}

extension JiraPayload.CommentPage {
    static func readOptional(from reader: inout JSONReader) throws -> Self? {
        if reader.null() { return nil }
        var page = Self()
        try reader.objectByName { reader, key in
            guard key == "comments", !reader.null() else { return try reader.skip() }
            var comments: [JiraPayload.Comment?] = []
            try reader.array { comments.append(try JiraPayload.Comment.readOptional(from: &$0)) }
            page.comments = comments
        }
        return page
    }
}

extension JiraPayload.User {
    static func readOptional(from reader: inout JSONReader) throws -> Self? {
        if reader.null() { return nil }
        var user = Self()
        try reader.objectByName { reader, key in
            switch key {
            case "name": user.name = try reader.optionalString()
            case "key": user.key = try reader.optionalString()
            case "displayName": user.displayName = try reader.optionalString()
            default: try reader.skip()
            }
        }
        return user
    }
}

extension JiraPayload.Comment {
    static func readOptional(from reader: inout JSONReader) throws -> Self? {
        if reader.null() { return nil }
        var comment = Self()
        var object = try reader.beginObject()
        while let key = try reader.nextName(&object) {
            switch key {
            case "id": comment.id = reader.null() ? nil : try reader.stringOrNumber()
            case "body": comment.body = try reader.optionalString()
            case "author": comment.author = try JiraPayload.User.readOptional(from: &reader)
            case "created": comment.created = try reader.optionalString()
            case "updated": comment.updated = try reader.optionalString()
            default: try reader.skip()
            }
        }
        return comment
    }
}

extension JiraPayload {
    /// A syntax or type error while reading `path`, for the reject message.
    struct FieldFailure: Error {
        var path: String
        var failure: JSONReader.Failure
    }

    /// Runs `body`, naming the innermost field `path` in a failure it throws.
    static func field(_ path: @autoclosure () -> String, _ body: () throws -> Void) throws {
        do { try body() } catch let failure as JSONReader.Failure {
            throw FieldFailure(path: path(), failure: failure)
        }
    }
}
