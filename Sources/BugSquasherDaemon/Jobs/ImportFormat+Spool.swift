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
        var line: Int?
        var record: BugRecord?
        var reject: String?
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

/// An element of a JSON array (a Jira search response's `issues`), as it is spooled: one line,
/// `{"_line":L,"_issue":N,"issue":…}`, with the input line it starts on and its position in the
/// array, so that a reject names both (a compact export is one line); or
/// `{"_line":L,"_issue":N,"_reject":"…"}` for one that cannot be spooled. The element's bytes
/// are kept as they came: they are checked when the chunk is decoded, where a broken one is a
/// reject of its own. Spools written before the wrapper hold bare elements, and
/// `{"_line":N,"_reject":"…"}` lines, which read the same way.
struct SpooledElement {
    /// What the line carries.
    enum Content {
        /// The element's bytes, as a range of the line.
        case issue(Range<Int>)
        /// Why it was rejected when it was spooled.
        case reject(String)
    }

    /// The input line the element starts on.
    var line: Int
    /// Its position in the array; `nil` in spools written before the wrapper.
    var issue: Int?
    var content: Content

    private static let linePrefix = Array(#"{"_line":"#.utf8)
    private static let issueKey = Array(#","_issue":"#.utf8)
    private static let issueValueKey = Array(#","issue":"#.utf8)
    private static let rejectKey = Array(#","_reject":"#.utf8)

    /// Appends the spool line of an element.
    static func append(_ element: [UInt8], line: Int, issue: Int, to output: inout [UInt8]) {
        output += Array(#"{"_line":\#(line),"_issue":\#(issue),"issue":"#.utf8)
        output += element
        output += [UInt8(ascii: "}"), 0x0A]
    }

    /// Appends the spool line of an element rejected as it was spooled.
    static func appendReject(_ reason: String, line: Int, issue: Int, to output: inout [UInt8]) {
        output += Array(#"{"_line":\#(line),"_issue":\#(issue),"_reject":"#.utf8)
        output += (try? JSONEncoder().encode(reason)).map(Array.init) ?? Array(#""rejected""#.utf8)
        output += [UInt8(ascii: "}"), 0x0A]
    }

    /// Reads a spooled line; `nil` for a bare element.
    init?(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        var index = 0
        func consume(_ token: [UInt8]) -> Bool {
            guard bytes.count - index >= token.count, zip(bytes[index...], token).allSatisfy({ $0 == $1 }) else {
                return false
            }
            index += token.count
            return true
        }
        func integer() throws -> Int {
            let start = index
            var value = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]),
                index - start < 18
            {
                value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                index += 1
            }
            guard index > start else {
                throw ImportError(.invalidJSON, "damaged spool line: no number at byte \(index)")
            }
            return value
        }
        guard consume(Self.linePrefix) else { return nil }
        line = try integer()
        issue = consume(Self.issueKey) ? try integer() : nil
        // The wrapper's last byte closes it.
        let end = bytes.count - (bytes.last == UInt8(ascii: "}") ? 1 : 0)
        if consume(Self.issueValueKey), index <= end {
            content = .issue(index..<end)
        } else if consume(Self.rejectKey), index <= end {
            var reader = JSONReader(UnsafeBufferPointer(rebasing: bytes[index..<end]))
            do { content = .reject(try reader.string()) } catch {
                throw ImportError(.invalidJSON, "damaged spool line: \(error)")
            }
        } else {
            throw ImportError(.invalidJSON, "damaged spool line: neither an issue nor a reject after '_line'")
        }
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
