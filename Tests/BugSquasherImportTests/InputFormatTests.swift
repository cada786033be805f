import BugSquasherGraph
import BugSquasherImport
import Foundation
import Testing

@Suite("Input formats")
struct InputFormatTests {
    @Test("CSV: quotes, doubled quotes, embedded newlines and commas, records split across reads")
    func csvParser() {
        var parser = CSVParser(maximumRecordBytes: 1_000)
        let text = "a,b,c\n\"x, y\",\"he said \"\"hi\"\"\",\"multi\nline\"\r\n1,2,3"
        var records: [CSVParser.Record] = []
        for byte in Array(text.utf8) { records += parser.feed([byte]) }
        records += parser.finish()
        #expect(
            records == [
                .fields(["a", "b", "c"], line: 1),
                .fields(["x, y", "he said \"hi\"", "multi\nline"], line: 2),
                .fields(["1", "2", "3"], line: 4),
            ])
        var small = CSVParser(maximumRecordBytes: 8)
        #expect(
            small.feed(Array("short\n0123456789abcdef\nok\n".utf8)) == [
                .fields(["short"], line: 1), .oversized(line: 2), .fields(["ok"], line: 3),
            ])
        // A quote never closed swallows the rest of the input: reported, not returned as a row.
        var unterminated = CSVParser()
        #expect(unterminated.feed(Array("a,b\n\"open,1\nc,d\ne,f\n".utf8)) == [.fields(["a", "b"], line: 1)])
        #expect(unterminated.finish() == [.unterminated(line: 2)])
        // Lines that end with a lone CR (Excel's "CSV (Macintosh)"), and CRLF split between two
        // reads, each end one line.
        var classicMac = CSVParser()
        #expect(
            classicMac.feed(Array("Issue key,Summary\rCSV-15,cr only\rCSV-16,\"two\rlines\"\r".utf8)) == [
                .fields(["Issue key", "Summary"], line: 1), .fields(["CSV-15", "cr only"], line: 2),
                .fields(["CSV-16", "two\rlines"], line: 3),
            ])
        var split = CSVParser()
        #expect(split.feed(Array("a,b\r".utf8)) == [.fields(["a", "b"], line: 1)])
        #expect(split.feed(Array("\nc,d\r\n".utf8)) == [.fields(["c", "d"], line: 2)])
        #expect(split.finish() == [])
        // Text after a closing quote breaks the quoting: the record is reported, with the field,
        // and the next record parses as before; a closing quote at the end of the input is fine.
        var broken = CSVParser()
        let quoting = { (field: Int) in
            "field \(field) has text after its closing quote (a quote inside a quoted field is written \"\"), so which text belongs to which field is unclear; fix the quoting"
        }
        #expect(
            broken.feed(Array("a,b,c\n1,\"x\"y,3\n\"p\"\"q\",\"r\" ,s\n4,5,6\n\"t\"".utf8)) == [
                .fields(["a", "b", "c"], line: 1), .malformed(line: 2, reason: quoting(2)),
                .malformed(line: 3, reason: quoting(2)), .fields(["4", "5", "6"], line: 4),
            ])
        #expect(broken.finish() == [.fields(["t"], line: 5)])
        // Latin-1 bytes are not replaced: the record is refused, naming the field.
        var latin1 = CSVParser()
        #expect(
            latin1.feed([UInt8]("k,caf".utf8) + [0xE9] + [UInt8]("\nok,\"cr\u{e8}me\"\n".utf8)) == [
                .malformed(
                    line: 1,
                    reason: "field 2 is not valid UTF-8 (another encoding, such as Latin-1? convert the input to UTF-8)"
                ), .fields(["ok", "crème"], line: 2),
            ])
    }

    @Test("CSV exports map to records by header; dates in the trackers' formats")
    func csvMapping() throws {
        let jira = try CSVBugMapper(
            header: ["Summary", "Issue key", "Status", "Component/s", "Component/s", "Created", "Comment"],
            flavor: .jira)
        let record = try jira.record(
            ["Crash", "TIMOB-9", "Open", "Android", "iOS", "15/Apr/11 2:23 PM", "16/Apr/11 9:00 AM;user-1;Seen again"],
            line: 2)
        #expect(record.key == "TIMOB-9")
        #expect(record.project.key == "TIMOB")
        #expect(record.components == ["Android", "iOS"])
        #expect(record.created == TrackerDate.parse("2011-04-15T14:23:00Z"))
        #expect(record.comments.first?.author?.name == "user-1")
        #expect(throws: ImportError.self) {
            try jira.record(["Crash", "TIMOB-10", "Open", "", "", "yesterday", ""], line: 3)
        }
        #expect(throws: ImportError.self) { try CSVBugMapper(header: ["Summary", "Status"], flavor: .jira) }
        // A row with more or fewer fields than the header would put its values in the wrong
        // columns ("Crash, then hang" unquoted made the key "then hang"): it is rejected.
        for row in [["Crash", " then hang", "TIMOB-11", "Open", "", "", "", ""], ["Crash", "TIMOB-12", "Open"]] {
            let error = #expect(throws: ImportError.self) { try jira.record(row, line: 4) }
            #expect(error?.message.contains("the header has 7") == true, "\(String(describing: error))")
            #expect(error?.inputLine == 4)
        }
        // A column a record takes one value from, given twice: the same value (or one left
        // empty) is read; two different values are refused, naming the column. Repeated columns
        // the importer does not read (Jira's Sprint) are left alone.
        let twice = try CSVBugMapper(header: ["Issue key", "Summary", "Sprint", "Summary", "Sprint"], flavor: .jira)
        #expect(try twice.record(["T-1", "Crash", "S1", "Crash", "S2"], line: 2).title == "Crash")
        #expect(try twice.record(["T-2", "", "S1", "Hang", "S2"], line: 3).title == "Hang")
        let clash = #expect(throws: ImportError.self) {
            try twice.record(["T-3", "Crash", "S1", "Hang", "S1"], line: 4)
        }
        #expect(
            clash?.message.contains("Column 'summary' is in the header 2 times") == true
                && clash?.message.contains("'Crash', 'Hang'") == true, "\(String(describing: clash))")
        #expect(clash?.inputLine == 4)
        #expect(CSVBugMapper.detect(header: ["bug_id", "short_desc"]) == .bugzilla)
        let bugzilla = try CSVBugMapper(header: ["bug_id", "product", "short_desc", "changeddate"], flavor: .bugzilla)
        let bug = try bugzilla.record(["42", "Firefox OS", "Boom", "2011-04-15 02:23:39"], line: 2)
        #expect(bug.key == "BZ-42")
        #expect(bug.project.key == "FIREFOXOS")
        #expect(bug.updated == TrackerDate.parse("2011-04-15T02:23:39Z"))
        // Bugzilla reads 007 as bug 7: one bug, one key.
        #expect(try bugzilla.record(["007", "Firefox OS", "Boom", ""], line: 3).key == "BZ-7")
        for id in ["-5", "+5", "0", "000", "4.2", "", "0x7"] {
            #expect(throws: ImportError.self, "\(id)") {
                _ = try bugzilla.record([id, "Firefox OS", "Boom", "2011-04-15 02:23:39"], line: 3)
            }
        }
        #expect(
            try bugzilla.record(["99999999999999999999999", "Firefox OS", "Big", ""], line: 4).key
                == "BZ-99999999999999999999999")
    }

    /// Without a project it is refused, naming the columns.
    @Test("a Jira CSV with Issue id but no Issue key takes its keys from the project")
    func jiraCSVWithIssueIDOnly() throws {
        let header = ["Issue id", "Summary", "Status", "Created"]
        let mapper = try CSVBugMapper(header: header, flavor: .jira, mapping: CSVColumnMapping(project: "TIMOB"))
        let record = try mapper.record(["0123", "Crash", "Open", "15/Apr/11 2:23 PM"], line: 2)
        #expect(record.key == "TIMOB-123" && record.project.key == "TIMOB" && record.jiraID == "123")
        #expect(record.created == TrackerDate.parse("2011-04-15T14:23:00Z"))
        #expect(CSVBugMapper.detect(header: header) == .jira)
        let refused = #expect(throws: ImportError.self) { try CSVBugMapper(header: header, flavor: .jira) }
        #expect(
            refused?.message.contains("--project KEY") == true
                && refused?.message.contains("'Issue id', 'Summary', 'Status', 'Created'") == true,
            "\(String(describing: refused))")
        // A project key column makes keys too.
        let withProject = try CSVBugMapper(header: ["Issue id", "Project key", "Summary"], flavor: .jira)
        #expect(try withProject.record(["7", "MOB", "x"], line: 2).key == "MOB-7")
        let noKey = #expect(throws: ImportError.self) {
            try CSVBugMapper(header: ["Summary", "Status"], flavor: .jira)
        }
        #expect(
            noKey?.message.contains("Its columns are 'Summary', 'Status'.") == true
                && noKey?.message.contains("--map key=COLUMN") == true, "\(String(describing: noKey))")
    }

    /// In Bugzilla's forms, with and without an offset; a date that cannot be read rejects its row.
    @Test("a Bugzilla-derived CSV keeps its Created and Resolved dates")
    func bugzillaCSVDates() throws {
        let header = ["Issue id", "Summary", "Status", "Priority", "Resolution", "Created", "Resolved", "Description"]
        let mapper = try CSVBugMapper(header: header, flavor: .bugzilla)
        let record = try mapper.record(
            ["42", "Boom", "RESOLVED", "P2", "FIXED", "2020-01-02 17:14:21+00:00", "2020-01-05 08:00", "It crashed"],
            line: 2)
        #expect(
            record.key == "BZ-42" && record.title == "Boom" && record.status == "RESOLVED"
                && record.resolution == "FIXED" && record.details == "It crashed")
        #expect(record.created == ISO8601Date.parse("2020-01-02T17:14:21Z"))
        #expect(record.resolved == ISO8601Date.parse("2020-01-05T08:00:00Z"))
        #expect(!record.absent.contains(.created) && !record.absent.contains(.resolved))
        let bad = #expect(throws: ImportError.self) {
            try mapper.record(["43", "Boom", "NEW", "", "", "yesterday", "", ""], line: 3)
        }
        #expect(
            bad?.inputLine == 3 && bad?.message.contains("Column 'Created' holds 'yesterday'") == true,
            "\(String(describing: bad))")
        // Bugzilla's long column names, as its CSV export writes them.
        let long = try CSVBugMapper(
            header: [
                "Bug ID", "Product", "Component", "Assignee", "Status", "Resolution", "Summary", "Changed", "Opened",
            ], flavor: .bugzilla)
        let bug = try long.record(
            ["9", "Core", "DOM", "a@b.org", "NEW", "", "Hang", "2020-02-01 10:00:00", "2020-01-01 09:00:00 +0100"],
            line: 2)
        #expect(
            bug.key == "BZ-9" && bug.project.name == "Core" && bug.components == ["DOM"]
                && bug.assignee?.name == "a@b.org")
        #expect(
            bug.created == ISO8601Date.parse("2020-01-01T08:00:00Z")
                && bug.updated == ISO8601Date.parse("2020-02-01T10:00:00Z"))
        // With a project, Bugzilla's numbers become that project's keys.
        let projected = try CSVBugMapper(
            header: ["bug_id", "short_desc"], flavor: .bugzilla, mapping: CSVColumnMapping(project: "FF"))
        #expect(try projected.record(["5", "x"], line: 2).key == "FF-5")
    }

    /// Mapped fields come from their columns, the others under their usual names.
    @Test("a column mapping reads any CSV and tells what each column became")
    func columnMapping() throws {
        let mapping = try CSVColumnMapping(parsing: ["key=Ticket", "title=Headline", "created = Opened On"])
        #expect(mapping.columns == [.key: "Ticket", .summary: "Headline", .created: "Opened On"])
        let mapper = try CSVBugMapper(
            header: ["Ticket", "Headline", "Opened On", "Status", "Votes"], flavor: .jira, mapping: mapping)
        let record = try mapper.record(["APP-3", "Slow", "2021-03-04 05:06:07", "Open", "12"], line: 2)
        #expect(
            record.key == "APP-3" && record.title == "Slow" && record.project.key == "APP" && record.status == "Open")
        #expect(record.created == ISO8601Date.parse("2021-03-04T05:06:07Z"))
        #expect(
            mapper.columnsRead
                == #"key=Ticket summary=Headline status=Status created="Opened On"; not imported: Votes"#,
            "\(mapper.columnsRead)")
        // A mapped column the header does not have is named, with the header's columns.
        let missing = #expect(throws: ImportError.self) {
            try CSVBugMapper(header: ["Ticket", "Title"], flavor: .jira, mapping: mapping)
        }
        #expect(
            missing?.message.contains(
                "--map summary=Headline: the header has no column 'Headline'. Its columns are 'Ticket', 'Title'.")
                == true, "\(String(describing: missing))")
        // A numeric key needs a project; with one it becomes a key.
        let numeric = try CSVBugMapper(
            header: ["No", "Title"], flavor: .jira,
            mapping: CSVColumnMapping(parsing: ["key=No", "summary=Title"], project: "OPS"))
        #expect(try numeric.record(["17", "Disk full"], line: 2).key == "OPS-17")
        let unprefixed = try CSVBugMapper(
            header: ["No", "Title"], flavor: .jira, mapping: CSVColumnMapping(parsing: ["key=No"]))
        let noProject = #expect(throws: ImportError.self) { try unprefixed.record(["17", "Disk full"], line: 2) }
        #expect(
            noProject?.message.contains("--project KEY to import it as KEY-17") == true,
            "\(String(describing: noProject))")
        // What --map refuses, and why.
        for (pairs, project, said) in [
            (["key"], nil, "is not FIELD=COLUMN"), (["colour=Red"], nil, "there is no field 'colour'"),
            (["key="], nil, "names no column"),
            (["key=A", "key=B"], nil, "maps key twice"), ([], "9LIVES", "is not a project key"),
            ([], "A-B", "is not a project key"),
        ] as [([String], String?, String)] {
            let error = #expect(throws: ImportError.self, "\(pairs)") {
                try CSVColumnMapping(parsing: pairs, project: project)
            }
            #expect(error?.message.contains(said) == true, "\(String(describing: error))")
        }
    }

    @Test("JSON arrays and search responses split into one element per line, in any slices")
    func jsonSplitter() throws {
        let document =
            #"{"startAt":0,"names":["issues"],"issues":[{"key":"A-1","fields":{"x":[1,{"y":"]}"}]}},{"key":"A-2"}],"total":2}"#
        var splitter = JSONArraySplitter(layout: .searchResponse)
        var elements: [JSONArraySplitter.Element] = []
        for byte in Array(document.utf8) { elements += try splitter.feed([byte]) }
        try splitter.finish()
        #expect(
            elements == [
                .value(Array(#"{"key":"A-1","fields":{"x":[1,{"y":"]}"}]}}"#.utf8), number: 1, line: 1),
                .value(Array(#"{"key":"A-2"}"#.utf8), number: 2, line: 1),
            ])
        var array = JSONArraySplitter(layout: .array)
        let parts = try array.feed(Array("[\n {\"a\":\n 1},\n {\"b\":2}\n]".utf8))
        // Each with the input line it starts on.
        #expect(
            parts == [
                .value(Array(#"{"a":  1}"#.utf8), number: 1, line: 2),
                .value(Array(#"{"b":2}"#.utf8), number: 2, line: 4),
            ])
        var truncated = JSONArraySplitter(layout: .array)
        _ = try truncated.feed(Array(#"[{"a":1},{"b""#.utf8))
        #expect(throws: JSONArraySplitter.Failure.self) { try truncated.finish() }
        // Nothing is dropped silently after the document: trailing whitespace is fine, more text is not.
        var trailing = JSONArraySplitter(layout: .array)
        #expect(try trailing.feed(Array("[1,2]\n \n".utf8)).count == 2)
        #expect(throws: JSONArraySplitter.Failure.self) { _ = try trailing.feed(Array(#"{"key":"A-1"}"#.utf8)) }
        var afterResponse = JSONArraySplitter(layout: .searchResponse)
        #expect(throws: JSONArraySplitter.Failure.self) {
            _ = try afterResponse.feed(Array(#"{"issues":[{"key":"A-1"}]} {"issues":[]}"#.utf8))
        }
        // An empty element or a trailing comma is not JSON; nothing between two commas vanishes.
        for broken in [#"[{"a":1},,{"b":2}]"#, #"[,{"a":1}]"#, #"[{"a":1},]"#] {
            var array = JSONArraySplitter(layout: .array)
            #expect(throws: JSONArraySplitter.Failure.self, "\(broken)") {
                _ = try array.feed(Array(broken.utf8))
                try array.finish()
            }
        }
        // A missing comma would make two issues one element, rejected as one: the input is refused.
        for missing in [#"[{"a":1} {"b":2}]"#, #"[{"a":1}"b"]"#, #"[[1]\n[2]]"#, #"[{"a":1}\n{"b":2}]"#] {
            var array = JSONArraySplitter(layout: .array)
            let failure = #expect(throws: JSONArraySplitter.Failure.self, "\(missing)") {
                _ = try array.feed(Array(missing.utf8))
            }
            #expect(
                failure?.description.contains("a comma is missing after element 1 of the array") == true,
                "\(String(describing: failure))")
        }
        var separated = JSONArraySplitter(layout: .array)
        #expect(try separated.feed(Array(#"[ {"a":[1,{"b":2}]} , [3] ,"x"]"#.utf8)).count == 3)
        var twice = JSONArraySplitter(layout: .searchResponse)
        #expect(throws: JSONArraySplitter.Failure.self) {
            _ = try twice.feed(Array(#"{"issues":[{"key":"A-1"}],"issues":[{"key":"A-2"}]}"#.utf8))
        }
        var empty = JSONArraySplitter(layout: .array)
        #expect(try empty.feed(Array("[ ]".utf8)).isEmpty)
        try empty.finish()
        // A search response cut anywhere is refused, with where it was cut.
        for (cut, said) in [
            (#"{"startAt":0,"issues":[{"key":"A-1"}"#, "\"issues\" array of the Jira search response is not closed"),
            (#"{"startAt":0,"issues":[{"key":"A-1"}]"#, "not closed after its \"issues\" array"),
            (#"{"startAt":0,"total":1"#, "no \"issues\" array was found"),
        ] {
            var response = JSONArraySplitter(layout: .searchResponse)
            _ = try response.feed(Array(cut.utf8))
            let failure = #expect(throws: JSONArraySplitter.Failure.self) { try response.finish() }
            #expect(failure?.description.contains(said) == true, "\(cut): \(String(describing: failure))")
        }
    }

    @Test("the offset reader resumes exactly at a recorded offset and caps long lines")
    func offsetReader() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("offsets-\(UUID().uuidString)").path
        let long = String(repeating: "x", count: 200)
        try "one\ntwo\r\n\(long)\nthree".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let reader = try OffsetLineReader(path: path, maximumLineBytes: 100)
        let first = try #require(try reader.next())
        #expect(String(decoding: first.bytes, as: UTF8.self) == "one")
        let second = try #require(try reader.next())
        #expect(String(decoding: second.bytes, as: UTF8.self) == "two")
        let resumed = try OffsetLineReader(path: path, offset: second.endOffset, firstLine: 3, maximumLineBytes: 100)
        let third = try #require(try resumed.next())
        #expect(third.isOversized && third.number == 3)
        let fourth = try #require(try resumed.next())
        #expect(String(decoding: fourth.bytes, as: UTF8.self) == "three" && fourth.number == 4)
        #expect(try resumed.next() == nil)
    }
}
