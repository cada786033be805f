/// A person referenced by a ``BugRecord`` (reporter, assignee) or a ``CommentRecord`` (author),
/// unique by ``name``.
///
/// ```swift
/// let reporter = PersonRecord(name: "user-1a2b3c4d", displayName: "Jane Doe")
/// ```
public struct PersonRecord: Sendable, Hashable, Codable {
    /// The account name; unique.
    public var name: String
    /// The display name; `nil` leaves a stored display name as it is.
    public var displayName: String?

    /// Creates a person record.
    public init(name: String, displayName: String? = nil) {
        self.name = name
        self.displayName = displayName
    }
}
