import BugSquasherImport
import BugSquasherJSON
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
            created: Date(timeIntervalSince1970: 1_302_834_219), updated: nil,
            resolved: Date(timeIntervalSince1970: 1_302_900_000),
            project: ProjectRecord(key: "TIMOB", name: "Titanium"), components: ["Android", "iOS"],
            reporter: PersonRecord(name: "user-1", displayName: "User One"), assignee: nil,
            comments: [
                CommentRecord(
                    jiraID: "c1", body: "Seen again\u{0001}", author: PersonRecord(name: "user-2"),
                    created: Date(timeIntervalSince1970: 1_302_834_300))
            ]
        )
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let json = try encoder.encode(record)
        let decoded = try json.withUnsafeBytes { try BugRecord(json: $0.bindMemory(to: UInt8.self)) }
        #expect(decoded == record)
    }

    /// A quote, backslash, control character or non-ASCII byte.
    @Test("special bytes are found wherever they fall in a long string's 8-byte words")
    func longStrings() throws {
        let plain = "Steps to reproduce: open the app, rotate the device. "
        for position in 0..<24 {
            let prefix = String(plain.prefix(position))
            for (inside, expected) in [("\\\"", "\""), ("\\\\", "\\"), ("\\n", "\n"), ("é", "é"), ("🐞", "🐞"), ("", "")]
            {
                let text = prefix + inside + plain
                let json = "\"" + text + "\""
                let read = try Array(json.utf8).withUnsafeBufferPointer { bytes in
                    var reader = JSONReader(bytes)
                    return try reader.string()
                }
                #expect(read == prefix + expected + plain, "at \(position): \(json)")
            }
            // A raw control character is refused, at its offset.
            let broken = Array(("\"" + prefix + "\u{1}" + plain + "\"").utf8)
            #expect(throws: JSONReader.Failure.self) {
                try broken.withUnsafeBufferPointer { bytes in
                    var reader = JSONReader(bytes)
                    return try reader.string()
                }
            }
            // Invalid UTF-8 after a long ASCII run is refused, not repaired.
            let invalid = Array(("\"" + prefix + plain).utf8) + [0xFF] + Array("\"".utf8)
            #expect(throws: JSONReader.Failure.self) {
                try invalid.withUnsafeBufferPointer { bytes in
                    var reader = JSONReader(bytes)
                    return try reader.string()
                }
            }
            // The same after an escape, in the runs copied between escapes; skipping refuses
            // what reading refuses.
            let escaped = Array(("\"" + prefix + "\\n" + plain).utf8)
            for bad: [UInt8] in [[0xFF], [0x01], Array("\\n".utf8) + [0xC3]] {
                let text = escaped + bad + Array((plain + "\"").utf8)
                #expect(throws: JSONReader.Failure.self, "\(bad) at \(position)") {
                    try text.withUnsafeBufferPointer { bytes in
                        var reader = JSONReader(bytes)
                        return try reader.string()
                    }
                }
                #expect(throws: JSONReader.Failure.self, "\(bad) at \(position), skipped") {
                    try text.withUnsafeBufferPointer { bytes in
                        var reader = JSONReader(bytes)
                        try reader.skip()
                    }
                }
            }
            // Unterminated: the scan stops at the end.
            let open = Array(("\"" + prefix + plain).utf8)
            #expect(throws: JSONReader.Failure.self) {
                try open.withUnsafeBufferPointer { bytes in
                    var reader = JSONReader(bytes)
                    return try reader.string()
                }
            }
        }
    }

    @Test("escapes, surrogate pairs, numbers as IDs, nulls and optional arrays")
    func lenientWhereSafe() throws {
        let record = try decode(
            #"""
            { "key" : "K-1", "jiraID": 123, "title": "a\u00e9\ud83d\udc1e\/", "status": "Open",
              "project": {"key": "K"}, "details": null, "labels": null }
            """#)
        #expect(record.title == "aé🐞/")
        #expect(record.jiraID == "123")
        #expect(record.labels.isEmpty && record.components.isEmpty && record.comments.isEmpty)
        #expect(record.details == nil)
    }

    @Test(
        "bad input says what and where",
        arguments: [
            (#"{"key":"K-1","title":"t","status":"Open"}"#, "missing field 'project'"),
            (#"{"title":"t","status":"Open","project":{"key":"K"}}"#, "missing field 'key'"),
            (#"{"key":"K-1","title":42,"status":"Open","project":{"key":"K"}}"#, "field 'title': expected a string"),
            (
                #"{"key":"K-1","title":"t","status":"Open","project":{"key":"K"},"created":"yesterday"}"#,
                "not an ISO 8601 date"
            ),
            (
                #"{"key":"K-1","title":"t","status":"Open","project":{"key":"K"}} trailing"#,
                "unexpected text after the JSON value"
            ),
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

    @Test(
        "unknown or repeated fields and a blank title or status are refused",
        arguments: [
            (
                #"{"key":"K-1","titel":"t","project":{"key":"K"}}"#,
                "a bug record has no field 'titel' (did you mean 'title'?); its fields are key, jiraID, title,"
            ),
            (#"{"key":"K-1","Status":"Open","project":{"key":"K"}}"#, "no field 'Status' (did you mean 'status'?)"),
            (
                #"{"key":"K-1","extra":{"deep":[1,2.5e3,true]},"project":{"key":"K"}}"#,
                "a bug record has no field 'extra'; its fields are"
            ),
            (
                #"{"key":"JRA-9","fields":{"summary":"s"}}"#,
                "a bug record has no field 'fields' (a Jira issue's field: this input is read as bugsquasher-ndjson"
            ),
            (
                #"{"key":"K-1","project":{"key":"K","nmae":"x"}}"#,
                "a project has no field 'nmae' (did you mean 'name'?)"
            ),
            (
                #"{"key":"K-1","project":{"key":"K"},"reporter":{"name":"u","display":"U"}}"#,
                "a person has no field 'display'"
            ),
            (
                #"{"key":"K-1","project":{"key":"K"},"comments":[{"jiraID":"1","body":"b","auther":null}]}"#,
                "(did you mean 'author'?)"
            ),
            (
                #"{"key":"K-1",""# + String(repeating: "x", count: 100_000) + #"":1,"project":{"key":"K"}}"#,
                "a bug record has no field '" + String(repeating: "x", count: 64) + "…'; its"
            ),
            (#"{"key":"K-1","title":"a","title":"b","project":{"key":"K"}}"#, "field 'title' appears twice"),
            (#"{"key":"K-1","key":"K-2","project":{"key":"K"}}"#, "field 'key' appears twice"),
            (#"{"key":"K-1","project":{"key":"K"},"project":{"key":"L"}}"#, "field 'project' appears twice"),
            (#"{"key":"K-1","project":{"key":"K"},"comments":[],"comments":[]}"#, "field 'comments' appears twice"),
            (#"{"key":"K-1","project":{"key":"K","name":null,"name":"P"}}"#, "field 'project.name' appears twice"),
            (
                #"{"key":"K-1","project":{"key":"K"},"comments":[{"jiraID":"1","body":"b","body":"c"}]}"#,
                "field 'comments[].body' appears twice"
            ),
            (
                #"{"key":"K-1","title":"  ","project":{"key":"K"}}"#,
                "field 'title' is blank. Give it a value, or leave the field out"
            ),
            (#"{"key":"K-1","status":"","project":{"key":"K"}}"#, "field 'status' is blank"),
        ])
    func strictFields(input: String, expected: String) {
        #expect {
            try decode(input)
        } throws: { error in
            "\(error)".contains(expected)
        }
    }

    @Test("nesting deeper than the limit is refused without exhausting the stack")
    func depthLimit() {
        let deep =
            #"{"key":"K-1","x":"# + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
            + "}"
        #expect {
            try decode(deep)
        } throws: { error in
            "\(error)".contains("nested deeper than \(JSONReader.maximumDepth) levels")
        }
    }
}
