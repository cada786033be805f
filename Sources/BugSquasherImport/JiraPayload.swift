/// The part of Jira's REST v2 issue JSON the importer reads.
///
/// Every property is optional, so that missing and `null` fields decode as `nil` (the real data
/// has issues without description, components, reporter or summary); everything else in the
/// JSON (versions, links, attachments, …) is ignored.
enum JiraPayload {
    /// One issue: `{"id": …, "key": …, "fields": {…}}`.
    struct Issue: Decodable {
        var id: String?
        var key: String?
        var fields: Fields?
    }

    /// The `fields` object of an issue.
    struct Fields: Decodable {
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
    }

    /// Any object that is identified by its `name` (status, priority, component, …).
    struct Named: Decodable {
        var name: String?
    }

    /// The `project` object.
    struct Project: Decodable {
        var key: String?
        var name: String?
    }

    /// A user object (reporter, assignee, comment author).
    struct User: Decodable {
        var name: String?
        var key: String?
        var displayName: String?
    }

    /// The `comment` object: one page of comments.
    struct CommentPage: Decodable {
        var comments: [Comment?]?
    }

    /// One comment.
    struct Comment: Decodable {
        var id: String?
        var body: String?
        var author: User?
        var created: String?
        var updated: String?
    }
}
