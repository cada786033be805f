/// An error that says what happened and, apart from it, what to do about it.
///
/// Every error BugSquasher shows a user conforms, and keeps ``statement`` and ``advice`` apart
/// (a Varlink error reply carries them as `message` and `advice`), so each reader shows the part
/// it needs.
/// Why it is built this way: docs/DESIGN-NOTES.md, "An error says what happened, then what to do".
public protocol ExplainedError: Error, CustomStringConvertible {
    /// What happened, as one or two sentences of fact: no advice.
    var statement: String { get }
    /// What to do about it; empty when there is nothing the reader can do.
    var advice: String { get }
}

extension ExplainedError {
    /// The statement, then the advice.
    public var description: String { Self.joined(statement, advice) }

    /// `statement` followed by `advice`, with one space between them when both are present.
    public static func joined(_ statement: String, _ advice: String) -> String {
        if advice.isEmpty { return statement }
        if statement.isEmpty { return advice }
        return statement + " " + advice
    }
}
