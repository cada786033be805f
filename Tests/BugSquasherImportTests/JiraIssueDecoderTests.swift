import BugSquasherGraph
import BugSquasherImport
import Foundation
import Testing

@Suite struct JiraIssueDecoderTests {
    private let decoder = JiraIssueDecoder()

    /// An issue with the quirks of the real data: no description, no components, no summary,
    /// a null resolution, the priority "None", a label with a space, a comment without body or
    /// author, a comment without ID, and null dates.
    private let quirky = #"""
        {"id":"4242","key":"TIMOB-7","fields":{
          "issuetype":{"name":"Story"},
          "project":{"id":"1","key":"TIMOB","name":"Titanium SDK/CLI"},
          "resolution":null, "resolutiondate":null,
          "created":"2011-04-15T02:23:39.000+0000", "updated":"2011-04-16T10:00:00.000+0000",
          "priority":{"name":"None","id":"10000"},
          "labels":["ios","needs triage","ios"],
          "assignee":null,
          "status":{"name":"Open"},
          "reporter":{"name":"user-1a2b3c4d","key":"user-1a2b3c4d","displayName":"User One"},
          "environment":null,
          "comment":{"comments":[
            {"id":"100","author":{"name":"user-2b3c4d5e","displayName":"User Two"},"body":"Seen on iOS 5.","created":"2011-04-15T03:00:00.000+0000","updated":"2011-04-15T03:00:00.000+0000"},
            {"id":"101","created":"2011-04-15T04:00:00.000+0000","updated":null},
            null
          ],"maxResults":3,"total":5,"startAt":0}
        }}
        """#

    @Test func decodesAnIssueWithTheRealDataQuirks() throws {
        let record = try decoder.decode(Data(quirky.utf8))
        #expect(record.key == "TIMOB-7")
        #expect(record.jiraID == "4242")
        #expect(record.title == "TIMOB-7")  // no summary: the key stands in
        #expect(record.details == nil)
        #expect(record.status == "Open")
        #expect(record.resolution == nil)
        #expect(record.resolved == nil)
        #expect(record.priority == nil)  // the literal "None"
        #expect(record.type == "Story")
        #expect(record.labels == ["ios", "needs_triage"])
        #expect(record.created == ISO8601Date.parse("2011-04-15T02:23:39.000+0000"))
        #expect(record.updated == ISO8601Date.parse("2011-04-16T10:00:00.000+0000"))
        #expect(record.project == ProjectRecord(key: "TIMOB", name: "Titanium SDK/CLI"))
        #expect(record.components.isEmpty)
        #expect(record.reporter == PersonRecord(name: "user-1a2b3c4d", displayName: "User One"))
        #expect(record.assignee == nil)
        #expect(record.comments.count == 2)
        #expect(
            record.comments.first
                == CommentRecord(
                    jiraID: "100", body: "Seen on iOS 5.",
                    author: PersonRecord(name: "user-2b3c4d5e", displayName: "User Two"),
                    created: ISO8601Date.parse("2011-04-15T03:00:00.000+0000"),
                    updated: ISO8601Date.parse("2011-04-15T03:00:00.000+0000")
                ))
        #expect(record.comments.last?.body == "")
        #expect(record.comments.last?.author == nil)
        #expect(record.comments.last?.updated == nil)
    }

    @Test func decodesAMinimalIssue() throws {
        let record = try decoder.decode(
            Data(
                #"{"key":"ALOY-3","fields":{"summary":"Hi","components":[{"name":"Runtime"},{"name":"Runtime"}]}}"#.utf8
            ))
        #expect(record.title == "Hi")
        #expect(record.project.key == "ALOY")  // from the issue key when the project is missing
        #expect(record.components == ["Runtime"])
        #expect(record.comments.isEmpty)
        #expect(record.labels.isEmpty)
    }

    @Test func refusesAnIssueWithoutKey() {
        let error = #expect(throws: ImportError.self) {
            _ = try decoder.decode(Data(#"{"id":"1","fields":{"summary":"No key"}}"#.utf8), line: 12)
        }
        #expect(error?.code == .missingKey)
        #expect(error?.inputLine == 12)
        #expect(error?.message.contains("key") == true)
    }

    @Test("a line cut short is named as cut short, not as a field of the wrong shape")
    func namesATruncatedLine() {
        let error = #expect(throws: ImportError.self) {
            _ = try decoder.decode(Data(#"{"key":"A-1","fields":{"summ"#.utf8), line: 3)
        }
        #expect(error?.message.contains("the record is cut short") == true, "\(String(describing: error))")
        #expect(error?.inputLine == 3)
    }

    /// A BugSquasher record in a JSON array is detected as Jira's format; read as an issue with
    /// no fields it used to blank the bug's title and status.
    @Test func refusesAnIssueWithoutFields() {
        let error = #expect(throws: ImportError.self) {
            _ = try decoder.decode(
                Data(#"{"key":"ARR-1","title":"Crash","status":"Open","priority":"High"}"#.utf8), line: 3)
        }
        #expect(error?.code == .invalidRecord)
        #expect(error?.inputLine == 3)
        #expect(error?.message.contains("no \"fields\" object") == true)
        #expect(error?.message.contains("--format bugsquasher-ndjson") == true)
    }

    @Test("a comment without an id rejects the issue, naming it; null entries are skipped")
    func rejectsACommentWithoutID() throws {
        for comment in [#"{"body":"no id"}"#, #"{"id":"","body":"empty id"}"#] {
            let text = #"{"key":"C-1","fields":{"comment":{"comments":[{"id":"9001","body":"x"},"# + comment + "]}}}"
            let error = #expect(throws: ImportError.self) { _ = try decoder.decode(Data(text.utf8), line: 7) }
            #expect(error?.code == .invalidRecord)
            #expect(error?.inputLine == 7)
            #expect(error?.message.contains("comments[1] has no \"id\"") == true, "\(String(describing: error))")
        }
        let record = try decoder.decode(
            Data(#"{"key":"C-1","fields":{"comment":{"comments":[null,{"id":"9001","body":"x"}]}}}"#.utf8))
        #expect(record.comments.map(\.jiraID) == ["9001"])
    }

    @Test(arguments: [
        (#"{"key":"D-1","fields":{"created":"yesterday"}}"#, "fields.created"),
        (#"{"key":"D-1","fields":{"updated":"2011-02-30T10:00:00.000+0000"}}"#, "fields.updated"),
        (#"{"key":"D-1","fields":{"resolutiondate":"2011-13-01T10:00:00.000+0000"}}"#, "fields.resolutiondate"),
        (
            #"{"key":"D-1","fields":{"comment":{"comments":[{"id":"7","body":"x","created":"25:00"}]}}}"#,
            "comment 7.created"
        ),
        (#"{"key":"D-1","fields":{"comment":{"comments":[{"id":"8","updated":"never"}]}}}"#, "comment 8.updated"),
    ])
    func rejectsAnIssueWithAnUnreadableDate(_ text: String, field: String) {
        // Stored as no date, the value would be lost without a word.
        let error = #expect(throws: ImportError.self) { _ = try decoder.decode(Data(text.utf8), line: 5) }
        #expect(error?.code == .invalidRecord)
        #expect(error?.inputLine == 5)
        #expect(error?.message.contains("not a date") == true, "\(String(describing: error))")
        #expect(error?.message.contains("issue's \(field) holds") == true, "\(String(describing: error))")
    }

    @Test("a person is named by account name, else by user key; without either there is none")
    func namesAPersonByNameElseKey() throws {
        let record = try decoder.decode(
            Data(
                #"""
                {"key":"P-1","fields":{"reporter":{"name":"","key":"JIRAUSER1","displayName":"Ann"},
                 "assignee":{"name":"","key":"","displayName":"Nobody"},
                 "comment":{"comments":[{"id":"1","author":{"name":"bob","key":"JIRAUSER2"}},
                                        {"id":"2","author":{"displayName":"Ghost"}}]}}}
                """#.utf8))
        #expect(record.reporter == PersonRecord(name: "JIRAUSER1", displayName: "Ann"))
        #expect(record.assignee == nil)
        #expect(record.comments.map(\.author) == [PersonRecord(name: "bob", displayName: nil), nil])
    }

    /// Escapes, U+0000 among them, read as written.
    @Test("a string that is not UTF-8 is refused with its position, not repaired")
    func refusesStringsThatAreNotUTF8() throws {
        // Latin-1 "é", a cut "é", a surrogate, junk
        for bytes: [UInt8] in [[0xE9], [0xC3], [0xED, 0xA0, 0x80], [0xFF, 0xFE]] {
            let data = Data(#"{"key":"U-1","fields":{"summary":"Caf"#.utf8) + Data(bytes) + Data(#""}}"#.utf8)
            let error = #expect(throws: ImportError.self) { _ = try decoder.decode(data, line: 9) }
            #expect(error?.code == .invalidJSON)
            #expect(error?.inputLine == 9)
            #expect(error?.message.contains("not valid UTF-8") == true, "\(String(describing: error))")
        }
        for lone in [#"\ud800y"#, #"x\udc00"#, #"\ud83d\u0041"#] {
            let error = #expect(throws: ImportError.self) {
                _ = try decoder.decode(Data(#"{"key":"U-2","fields":{"summary":"\#(lone)"}}"#.utf8), line: 4)
            }
            #expect(error?.message.contains("surrogate") == true, "\(lone): \(String(describing: error))")
        }
        let record = try decoder.decode(
            Data(
                #"{"key":"U-3","fields":{"summary":"Café \u00e9 \ud83d\ude00 😀","description":"log\n\u0000\u0000Oct 3"}}"#
                    .utf8))
        #expect(record.title == "Café é 😀 😀")
        #expect(record.details == "log\n\u{0}\u{0}Oct 3")
    }

    @Test func readsAnEmptyDateAsNone() throws {
        let record = try decoder.decode(Data(#"{"key":"D-2","fields":{"created":"","updated":null}}"#.utf8))
        #expect(record.created == nil)
        #expect(record.updated == nil)
    }

    @Test(arguments: [
        "[1,2,3]", "\"TIMOB-1\"", "42", "null", "{\"key\":", "not json at all",
        "{\"key\":\"A-1\",\"fields\":{\"labels\":\"x\"}}",
    ])
    func refusesInputThatIsNotAnIssueObject(_ text: String) {
        let error = #expect(throws: ImportError.self) {
            _ = try decoder.decode(Data(text.utf8), line: 3)
        }
        #expect(error?.code == .invalidJSON)
        #expect(error?.inputLine == 3)
    }

    @Test func decodesTheFirstIssuesOfTheRealSample() throws {
        guard let file = TestData.sampleFile() else { return }
        var records: [BugRecord] = []
        for (lineNumber, bytes) in try LineReader(path: file) {
            records.append(try decoder.decode(bytes, line: lineNumber))
            if records.count == 20 { break }
        }
        #expect(records.count == 20)
        let first = try #require(records.first)
        #expect(first.key == "ALOY-1")
        #expect(first.jiraID == "91906")
        #expect(first.title == "logger.js failing in Titanium runtime")
        #expect(first.status == "Closed")
        #expect(first.resolution == "Won't Fix")
        #expect(first.priority == "Medium")
        #expect(first.type == "Bug")
        #expect(first.project == ProjectRecord(key: "ALOY", name: "Alloy"))
        #expect(first.components == ["Runtime"])
        #expect(first.reporter?.name == "user-d4ddfb7d")
        #expect(first.assignee?.name == "user-d4ddfb7d")
        #expect(first.created == ISO8601Date.parse("2012-05-16T07:56:13.000+0000"))
        #expect(first.resolved == ISO8601Date.parse("2012-07-23T11:41:55.000+0000"))
        #expect(first.comments.map(\.jiraID) == ["194980", "208915"])
        #expect(records.allSatisfy { !$0.title.isEmpty && $0.created != nil && $0.updated != nil })
    }

    @Test func decodesTheWholeRealSample() throws {
        guard let file = TestData.sampleFile() else { return }
        let reader = try LineReader(path: file)
        var keys = Set<String>()
        for (lineNumber, bytes) in reader {
            let record = try decoder.decode(bytes, line: lineNumber)
            keys.insert(record.key)
            #expect(record.labels.allSatisfy { !$0.contains(" ") })
            #expect(record.priority != "None")
        }
        #expect(reader.error == nil)
        #expect(keys.count == 1_000)
    }
}
