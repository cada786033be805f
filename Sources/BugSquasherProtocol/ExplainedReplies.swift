public import BugSquasherErrors
public import BugSquasherVarlink

/// How squasherd's Varlink errors carry an ``ExplainedError``: its statement as the `message`
/// parameter and its advice, when it has one, as `advice` (docs/PROTOCOL.md, "Errors"), so that
/// a client shows either. A reader joins them back with ``statementAndAdvice``.
///
/// ```swift
/// throw VarlinkError("io.bugsquasher.Import.InvalidInput", explaining: error)
/// catch let error as VarlinkError { print(error.statementAndAdvice ?? error.description) }
/// ```
extension VarlinkError {
    /// An error reply named `name` whose `message` is `statement`, with `advice` when it is not
    /// empty.
    public init(_ name: String, statement: String, advice: String = "") {
        var parameters: [String: JSONValue] = ["message": .string(statement)]
        if !advice.isEmpty { parameters["advice"] = .string(advice) }
        self.init(name, parameters)
    }

    /// An error reply named `name` that carries `error`'s statement and advice.
    public init(_ name: String, explaining error: some ExplainedError) {
        self.init(name, statement: error.statement, advice: error.advice)
    }

    /// The `message` parameter, what happened; `nil` for an error without one.
    public var statement: String? { parameters["message"]?.stringValue }

    /// The `advice` parameter, what to do; empty for an error without one.
    public var advice: String { parameters["advice"]?.stringValue ?? "" }

    /// The statement followed by the advice, with one space between them, as one text; `nil`
    /// for an error without a `message`.
    public var statementAndAdvice: String? {
        statement.map { statement in advice.isEmpty ? statement : statement + " " + advice }
    }
}
