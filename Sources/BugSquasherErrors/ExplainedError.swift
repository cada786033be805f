/// An error that says what happened and, apart from it, what to do about it.
///
/// Every error BugSquasher throws to a user conforms: a log shows ``statement`` as the message
/// and ``advice`` as metadata, squasherctl prints both, and a Varlink error reply carries them as
/// its `message` and `advice` parameters, so that each reader shows the part it needs.
/// Why it is built this way: docs/DESIGN-NOTES.md, "An error says what happened, then what to do".
///
/// ```swift
/// catch let error as any ExplainedError {
///     logger.error("\(error.statement)", metadata: ["advice": "\(error.advice)"])
/// }
/// ```
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
