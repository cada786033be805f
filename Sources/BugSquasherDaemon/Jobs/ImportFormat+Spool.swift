import BugSquasherImport
import BugSquasherJSON
import BugSquasherProtocol
import Foundation

extension ImportFormat {
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
}

/// A CSV row converted at upload time, as it is spooled.
struct SpoolEnvelope: Encodable, Sendable {
    var _line: Int
    var record: BugRecord?
    var _reject: String?

    init(_line: Int, record: BugRecord?, _reject: String?) {
        self._line = _line
        self.record = record
        self._reject = _reject
    }

    /// Reads a spooled envelope (written by ``RecordCoding/encoder()``).
    init(json bytes: UnsafeBufferPointer<UInt8>) throws {
        var reader = JSONReader(bytes)
        var line: Int?, record: BugRecord?, reject: String?
        do {
            try reader.object { reader, field in
                switch field {
                case "_line": line = try reader.integer()
                case "record": record = reader.null() ? nil : try BugRecord.read(from: &reader)
                case "_reject": reject = try reader.optionalString()
                default: try reader.skip()
                }
            }
            try reader.end()
        } catch let failure as JSONReader.Failure {
            throw ImportError(.invalidJSON, "damaged spool line: \(failure.description)")
        }
        guard let line else { throw ImportError(.invalidJSON, "damaged spool line: no '_line'") }
        self.init(_line: line, record: record, _reject: reject)
    }
}

/// The JSON coding of BugSquasher's own records (dates as ISO 8601).
enum RecordCoding {
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}
