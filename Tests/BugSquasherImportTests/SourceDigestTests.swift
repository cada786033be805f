import BugSquasherImport
import Foundation
import Testing

/// The digests kept on bugs must not change between runs, builds or machines: a store written by
/// one daemon is re-imported by the next.
@Suite("Source digests")
struct SourceDigestTests {
    private func digest(_ text: String, seed: UInt64 = SourceDigest.seed(["jira-json", "1"])) -> Int64 {
        Array(text.utf8).withUnsafeBufferPointer { SourceDigest.of($0, seed: seed) }
    }

    private func key(_ text: String) -> String? {
        Array(text.utf8).withUnsafeBufferPointer { SourceDigest.key(ofJSONObject: $0) }
    }

    @Test("a digest is stable, and moves with any byte, the length and the seed")
    func stable() {
        let line = #"{"id":"91906","key":"ALOY-1","fields":{"summary":"logger.js failing"}}"#
        // Fixed values: a change here would make every stored digest stale.
        #expect(digest(line) == digest(line))
        #expect(digest(line) == Self.expected)
        #expect(digest(line.replacingOccurrences(of: "failing", with: "failinG")) != digest(line))
        #expect(digest(line + " ") != digest(line))
        #expect(digest("") != digest(" "))
        #expect(digest(line, seed: SourceDigest.seed(["bugsquasher-ndjson", "1"])) != digest(line))
    }

    /// `digest` of the line in ``stable()`` under the jira-json seed, as this code computes it today.
    static let expected: Int64 = -3_077_060_816_925_141_823

    @Test("the key is read from the top level only, without decoding the rest")
    func keys() {
        #expect(key(#"{"id":"1","key":"ALOY-1","fields":{"key":"inner"}}"#) == "ALOY-1")
        #expect(key(#"{"fields":{"key":"inner"},"key":"LAST-2"}"#) == "LAST-2")
        #expect(key(#"{"fields":{"key":"inner"}}"#) == nil)
        #expect(key(#"{"key":42}"#) == nil)
        #expect(key(#"[{"key":"A-1"}]"#) == nil)
        #expect(key("{not json") == nil)
        #expect(key(#"{"key":"A\u002D1"}"#) == "A-1")
    }
}
