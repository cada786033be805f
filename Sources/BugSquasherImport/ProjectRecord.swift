/// The project of a ``BugRecord``, unique by ``key``.
///
/// ```swift
/// let project = ProjectRecord(key: "TIMOB", name: "Titanium SDK")
/// ```
public struct ProjectRecord: Sendable, Hashable, Codable {
    /// The project key (`TIMOB`); unique.
    public var key: String
    /// The project's name; `nil` leaves a stored name as it is.
    public var name: String?

    /// Creates a project record.
    public init(key: String, name: String? = nil) {
        self.key = key
        self.name = name
    }
}
