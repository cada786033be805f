import BugSquasherImport
import Foundation

/// The input formats an import accepts.
enum InputFormat: String, Sendable, CaseIterable {
    /// Jira REST JSON: one issue per line, a JSON array, or a search response with `issues`.
    case jiraJSON = "jira-json"
    /// A Jira CSV export.
    case jiraCSV = "jira-csv"
    /// A Bugzilla CSV export.
    case bugzillaCSV = "bugzilla-csv"
    /// BugSquasher's own NDJSON: one `BugRecord` per line.
    case bugsquasherNDJSON = "bugsquasher-ndjson"

    /// How the spool of a job in this format is read: each line a Jira issue, a `BugRecord`, or
    /// a CSV envelope (`{"_line": N, "record": …}` / `{"_line": N, "_reject": "…"}`).
    enum SpoolLines: Sendable { case jira, record, envelope }

    var spoolLines: SpoolLines {
        switch self {
        case .jiraJSON: .jira
        case .bugsquasherNDJSON: .record
        case .jiraCSV, .bugzillaCSV: .envelope
        }
    }

    /// The formats, for messages.
    static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}

/// A CSV row converted at upload time, as it is spooled.
struct SpoolEnvelope: Codable, Sendable {
    var _line: Int
    var record: BugRecord?
    var _reject: String?
}

/// The JSON coding of BugSquasher's own records (dates as ISO 8601).
enum RecordCoding {
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
