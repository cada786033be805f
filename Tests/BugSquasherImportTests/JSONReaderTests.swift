import BugSquasherJSON
import BugSquasherImport
import Foundation
import Testing

@Suite("Record JSON decoding")
struct JSONReaderTests {
    func decode(_ text: String) throws -> BugRecord {
        try Array(text.utf8).withUnsafeBufferPointer { try BugRecord(json: $0) }
    }

    @Test("what JSONEncoder writes for a record decodes back to the same record")
    func roundTrip() throws {
        let record = BugRecord(
            key: "TIMOB-7", jiraID: "10042", title: "Crash \"quoted\" \\ back/slash\n\ttab — ünïcødé 🐞", details: nil,
            status: "Open", resolution: "Fixed", priority: nil, type: "Bug", labels: ["a", "b"],
            created: Date(timeIntervalSince1970: 1_302_834_219), updated: nil, resolved: Date(timeIntervalSince1970: 1_302_900_000),
            project: ProjectRecord(key: "TIMOB", name: "Titanium"), components: ["Android", "iOS"],
            reporter: PersonRecord(name: "user-1", displayName: "User One"), assignee: nil,
            comments: [CommentRecord(jiraID: "c1", body: "Seen again\u{0001}", author: PersonRecord(name: "user-2"), created: Date(timeIntervalSince1970: 1_302_834_300))]
        )
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let json = try encoder.encode(record)
        let decoded = try json.withUnsafeBytes { try BugRecord(json: $0.bindMemory(to: UInt8.self)) }
        #expect(decoded == record)
    }

    @Test("escapes, surrogate pairs, numbers as IDs, nulls, unknown fields and optional arrays")
    func lenientWhereSafe() throws {
        let record = try decode(#"""
            { "key" : "K-1", "jiraID": 123, "title": "a\u00e9\ud83d\udc1e\/", "status": "Open", "extra": {"deep": [1, 2.5e3, true, false, null]},
              "project": {"key": "K"}, "details": null, "labels": null }
            """#)
        #expect(record.title == "aé🐞/")
        #expect(record.jiraID == "123")
        #expect(record.labels.isEmpty && record.components.isEmpty && record.comments.isEmpty)
        #expect(record.details == nil)
    }

    @Test("bad input says what and where", arguments: [
        (#"{"key":"K-1","title":"t","status":"Open"}"#, "missing field 'project'"),
        (#"{"title":"t","status":"Open","project":{"key":"K"}}"#, "missing field 'key'"),
        (#"{"key":"K-1","title":42,"status":"Open","project":{"key":"K"}}"#, "field 'title': expected a string"),
        (#"{"key":"K-1","title":"t","status":"Open","project":{"key":"K"},"created":"yesterday"}"#, "not an ISO 8601 date"),
        (#"{"key":"K-1","title":"t","status":"Open","project":{"key":"K"}} trailing"#, "unexpected text after the JSON value"),
        (#"{"key":"K-1","title":"t"#, "unterminated string"),
        (#"{"key":"K-1",}"#, "expected a string"),
        ("{\"key\":\"K-1\nx\"}", "control character"),
        (#"{"key":"K-1","x":[1,]}"#, "expected a value"),
        (#"{"key":"K-1","x":tru}"#, "invalid literal"),
        (#"{"key":"K-\u12"}"#, "invalid \\u escape"),
    ])
    func errors(input: String, expected: String) {
        #expect {
            try decode(input)
        } throws: { error in
            "\(error)".contains(expected)
        }
    }

    @Test("nesting deeper than the limit is refused without exhausting the stack")
    func depthLimit() {
        let deep = #"{"key":"K-1","x":"# + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}"
        #expect {
            try decode(deep)
        } throws: { error in
            "\(error)".contains("nested deeper than \(JSONReader.maximumDepth) levels")
        }
    }
}
