/// What keeps a file of the store from being used, apart from what to do about it, as a person
/// acts on them. Both are clauses, so that a message ends its sentence with the problem and
/// gives the remedy as a sentence of its own, its advice:
///
/// ```swift
/// let why = SQLiteStore.whyNotWritable(path)
/// throw GraphError(.storeIO, "Could not save: \(why.problem).", advice: why.advice)
/// ```
public struct FileProblem: Sendable, Hashable {
    /// What is wrong, as a clause without a full stop: "the file system holding run/state is
    /// full". It may begin with a path, so it is never capitalized.
    public var problem: String
    /// What to do, as a clause without a full stop: "free space on it, or move the state
    /// directory to another file system".
    public var remedy: String

    /// Creates a problem and its remedy, both clauses.
    public init(_ problem: String, remedy: String) {
        self.problem = problem
        self.remedy = remedy
    }

    /// The remedy as a sentence: capitalized, with a full stop.
    public var advice: String { remedy.prefix(1).uppercased() + remedy.dropFirst() + "." }
}
