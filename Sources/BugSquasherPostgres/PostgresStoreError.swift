public import BugSquasherErrors

/// An error of the PostgreSQL store's configuration, said before anything connects.
public struct PostgresStoreError: ExplainedError, Sendable {
    /// What is wrong.
    public var statement: String
    /// What to do about it.
    public var advice: String

    /// A configuration that cannot be used.
    static func configuration(_ statement: String, advice: String) -> PostgresStoreError {
        PostgresStoreError(statement: statement, advice: advice)
    }
}
