import BugSquasherImport
import Foundation

/// Decoding alone, for profiling the decoder: every line of an uncompressed Jira NDJSON file,
/// read into memory before the clock starts, decoded with ``JiraIssueDecoder`` as squasherd's
/// importer decodes a spooled line.
struct DecodeOnly {
    let path: String

    /// Decodes every line; returns the seconds it took and how many issues decoded.
    func run() throws -> (seconds: Double, issues: Int) {
        let data = try [UInt8](Data(contentsOf: URL(filePath: path)))
        let decoder = JiraIssueDecoder()
        var issues = 0
        let started = ContinuousClock.now
        try data.withUnsafeBufferPointer { bytes in
            var start = 0
            var number = 0
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
                number += 1
                if end > start {
                    _ = try decoder.decode(bytes: UnsafeBufferPointer(rebasing: bytes[start..<end]), line: number)
                    issues += 1
                }
                start = end + 1
            }
        }
        return ((ContinuousClock.now - started) / .seconds(1), issues)
    }
}
