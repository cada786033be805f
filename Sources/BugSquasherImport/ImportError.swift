public import BugSquasherErrors

/// The error every import operation throws: like `GraphError`, a ``Code`` (a struct over a private
/// enum, so new codes break no caller's switch), a statement of what happened and, apart from it,
/// the advice (``ExplainedError``), an optional cause, the input line when known, and the place.
///
/// ```swift
/// do { let record = try decoder.decode(line.bytes, line: line.lineNumber) }
/// catch let error as ImportError where error.code == .missingKey { print(error.inputLine ?? 0, error.message) }
/// ```
public struct ImportError: ExplainedError, Sendable {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: String, Hashable, Sendable {
            case invalidJSON, missingKey, invalidRecord, io, unsupportedFormat
        }
        private let wrapped: Wrapped
        private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

        /// The input is not valid JSON, or not a JSON object.
        public static let invalidJSON = Code(.invalidJSON)
        /// A Jira issue has no `key`, so it cannot be matched to a bug.
        public static let missingKey = Code(.missingKey)
        /// A ``BugRecord`` handed to the upserter cannot be stored (an empty key, say).
        public static let invalidRecord = Code(.invalidRecord)
        /// A file could not be opened or read.
        public static let io = Code(.io)
        /// An input is none of the formats the importer reads, or not the one it was declared as.
        public static let unsupportedFormat = Code(.unsupportedFormat)

        /// The code's name, such as `missingKey`.
        public var description: String { wrapped.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What happened, without advice.
    public var statement: String
    /// What to do about it; empty when there is nothing to do.
    public var advice: String
    /// The statement followed by the advice.
    public var message: String { Self.joined(statement, advice) }
    /// The error that caused this one, if any (a `DecodingError`, say).
    public var cause: (any Error & Sendable)?
    /// The 1-based line of the input the error is about, when the input is line-oriented.
    public var inputLine: Int?
    /// Where the error was raised.
    public var location: SourceLocation

    /// Creates an error; `file` and `line` default to the caller's position.
    public init(
        _ code: Code,
        _ statement: String,
        advice: String = "",
        cause: (any Error & Sendable)? = nil,
        inputLine: Int? = nil,
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.statement = statement
        self.advice = advice
        self.cause = cause
        self.inputLine = inputLine
        self.location = SourceLocation(file: file, line: line)
    }

    /// The code, the input line when known, the statement and the advice, and the cause.
    public var description: String {
        var text = "\(code): "
        if let inputLine { text += "line \(inputLine): " }
        text += message
        if let cause { text += " (cause: \(cause))" }
        return text
    }

    /// A position in the source code.
    public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
        /// The `#fileID` of the position.
        public var file: String
        /// The line number.
        public var line: Int
        /// `file:line`.
        public var description: String { "\(file):\(line)" }
    }
}
