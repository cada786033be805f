public import Foundation

/// One comment of a ``BugRecord``, unique by ``jiraID``.
///
/// ```swift
/// let comment = CommentRecord(jiraID: "194980", body: "Fixed in master.", author: PersonRecord(name: "user-d4ddfb7d"))
/// ```
public struct CommentRecord: Sendable, Hashable, Codable {
    /// The comment's ID in the tracker it came from; unique across all bugs.
    public var jiraID: String
    /// The text (Jira markup); empty when the tracker sent none.
    public var body: String
    /// Who wrote it.
    public var author: PersonRecord?
    /// When it was written.
    public var created: Date?
    /// When it was last edited.
    public var updated: Date?

    /// Creates a comment record.
    public init(jiraID: String, body: String, author: PersonRecord? = nil, created: Date? = nil, updated: Date? = nil) {
        self.jiraID = jiraID
        self.body = body
        self.author = author
        self.created = created
        self.updated = updated
    }
}
