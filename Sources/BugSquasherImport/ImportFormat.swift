/// The input formats an import accepts, by the names `io.bugsquasher.Import.Begin` takes in
/// `format`.
public enum ImportFormat: String, Sendable, CaseIterable {
    /// Jira REST JSON: one issue per line, a JSON array, or a search response with `issues`.
    case jiraJSON = "jira-json"
    /// A Jira CSV export.
    case jiraCSV = "jira-csv"
    /// A Bugzilla CSV export.
    case bugzillaCSV = "bugzilla-csv"
    /// BugSquasher's own NDJSON: one record per line.
    case bugsquasherNDJSON = "bugsquasher-ndjson"

    /// Whether it is a CSV export, read by its header row.
    public var isCSV: Bool { self == .jiraCSV || self == .bugzillaCSV }

    /// The formats' names, for messages: "jira-json, jira-csv, …".
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}
