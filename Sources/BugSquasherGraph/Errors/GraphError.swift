public import BugSquasherErrors

/// The error every object-graph operation throws: a ``Code`` (a struct over a private enum, so new
/// codes break no caller's switch), a statement of what happened and, apart from it, the advice
/// (`ExplainedError`), an optional underlying cause, and the place where it happened.
///
/// ```swift
/// do { try await context.save() }
/// catch let error as GraphError where error.code == .mergeConflict { print(error.conflicts.map(\.objectID)) }
/// ```
public struct GraphError: ExplainedError, Sendable {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: String, Hashable, Sendable {
            case incompatibleModel, invalidStore, storeIO, unsupportedRequest, objectNotFound
            case validation, mergeConflict, readOnly, constraintViolation, invalidArgument
            case wrongContext, storeBusy
        }
        private let wrapped: Wrapped
        private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

        /// The store was written with a model this program cannot open.
        public static let incompatibleModel = Code(.incompatibleModel)
        /// The store file is not a BugSquasher store, or its metadata is damaged.
        public static let invalidStore = Code(.invalidStore)
        /// The store's backing file or database reported an error.
        public static let storeIO = Code(.storeIO)
        /// Another program held the store's write lock for longer than the store waits: nothing
        /// was written, and the same operation can be retried once the lock is released.
        public static let storeBusy = Code(.storeBusy)
        /// A store was asked to execute a request kind it does not know.
        public static let unsupportedRequest = Code(.unsupportedRequest)
        /// An object ID names no row in the store (it was deleted, or never saved).
        public static let objectNotFound = Code(.objectNotFound)
        /// An object failed validation (missing required value, deny rule, wrong type).
        public static let validation = Code(.validation)
        /// A save met newer versions in the store and the merge policy is `.error`.
        public static let mergeConflict = Code(.mergeConflict)
        /// A save was attempted on a context that refuses saves.
        public static let readOnly = Code(.readOnly)
        /// A save would break a unique key.
        public static let constraintViolation = Code(.constraintViolation)
        /// A caller passed a value that cannot be used (unknown entity, attribute or key path).
        public static let invalidArgument = Code(.invalidArgument)
        /// An object or ID was used with a context or store it does not belong to.
        public static let wrongContext = Code(.wrongContext)

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
    /// The error that caused this one, if any (a GRDB `DatabaseError`, say).
    public var cause: (any Error & Sendable)?
    /// The conflicts of a failed save under the `.error` merge policy; empty otherwise.
    public var conflicts: [MergeConflict]
    /// What is wrong with each object of a save refused by validation (``Code/validation``),
    /// one sentence each; empty otherwise.
    public var problems: [String] = []
    /// Where the error was raised.
    public var location: SourceLocation

    /// Creates an error; `file` and `line` default to the caller's position.
    public init(
        _ code: Code,
        _ statement: String,
        advice: String = "",
        cause: (any Error & Sendable)? = nil,
        conflicts: [MergeConflict] = [],
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.statement = statement
        self.advice = advice
        self.cause = cause
        self.conflicts = conflicts
        self.location = SourceLocation(file: file, line: line)
    }

    /// The code, the statement and the advice, and the cause.
    public var description: String {
        var text = "\(code): \(message)"
        if let cause { text += " (cause: \(cause))" }
        return text
    }

    /// A position in the source code.
    public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
        /// The `#fileID` of the position.
        public var file: String
        /// The line number.
        public var line: Int
        public var description: String { "\(file):\(line)" }
    }
}

extension GraphError {
    /// What every store throws when a save meets objects whose versions in the store are not
    /// the ones its context loaded: the conflicts, for the merge policy to resolve.
    public static func staleObjects(_ conflicts: [MergeConflict]) -> GraphError {
        GraphError(
            .mergeConflict, "\(conflicts.count) object(s) changed in the store since this context loaded them.",
            conflicts: conflicts)
    }
}
