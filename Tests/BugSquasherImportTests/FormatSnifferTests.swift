import BugSquasherImport
import Testing

/// Format detection from an upload's first bytes, without a spooler.
@Suite("Format sniffer")
struct FormatSnifferTests {
    let sniffer = FormatSniffer(declared: nil, maximumRecordBytes: 1 << 20)

    func decide(_ text: String, with sniffer: FormatSniffer? = nil, final: Bool = true) throws -> FormatSniffer
        .Decision?
    {
        try (sniffer ?? self.sniffer).decide(Array(text.utf8), final: final, insideGzip: false)
    }

    /// A JSON document is told by its layout.
    @Test("each format is told by its first bytes; a byte-order mark is not data")
    func formats() throws {
        #expect(try decide(#"{"key":"A-1","fields":{}}"# + "\n") == .init(format: .jiraJSON, layout: nil))
        #expect(try decide(#"{"key":"A-1","title":"t"}"# + "\n") == .init(format: .bugsquasherNDJSON, layout: nil))
        #expect(try decide(#"{"startAt":0,"issues":[]}"# + "\n") == .init(format: .jiraJSON, layout: .searchResponse))
        #expect(try decide(#"[{"key":"A-1"}]"#) == .init(format: .jiraJSON, layout: .array))
        #expect(try decide("\u{FEFF}Issue key,Summary\nA-1,x\n") == .init(format: .jiraCSV, layout: nil))
        #expect(try decide("bug_id,short_desc\n1,x\n") == .init(format: .bugzillaCSV, layout: nil))
        // Blank lines only: nothing to import once the upload has ended; refused before.
        #expect(try decide("\n \n") == nil)
        #expect(throws: ImportError.self) { try decide("\n\n", final: false) }
    }

    /// A mapping is refused for JSON.
    @Test("a declared CSV format is taken as it is; a mapping reads a CSV of any columns")
    func declaredAndMapped() throws {
        let declared = FormatSniffer(declared: .bugzillaCSV, maximumRecordBytes: 1 << 20)
        #expect(try decide("Issue id,Summary\n1,x\n", with: declared) == .init(format: .bugzillaCSV, layout: nil))
        let mapped = FormatSniffer(
            declared: nil, columns: CSVColumnMapping(columns: [.key: "Ticket"]), maximumRecordBytes: 1 << 20)
        #expect(try decide("Ticket,Title\nA-1,x\n", with: mapped) == .init(format: .jiraCSV, layout: nil))
        let json = #expect(throws: ImportError.self) { try decide(#"{"key":"A-1","title":"t"}"# + "\n", with: mapped) }
        #expect(json?.code == .unsupportedFormat && json?.message.contains("CSV exports only") == true)
    }

    @Test("what the input is instead is named, with a way to convert it")
    func refusals() throws {
        for (text, said) in [
            ("Ticket,Title\nA-1,x\n", "looks like a CSV file, but its header names no key column"),
            ("Issue key;Summary\nA-1;x\n", "separated by semicolons"),
            ("BZh91AY&SY", "bzip2-compressed"),
            ("hello world\n", "not a supported format"),
        ] {
            let error = #expect(throws: ImportError.self, "\(text)") { try decide(text) }
            #expect(error?.message.contains(said) == true, "\(String(describing: error))")
        }
        #expect(FormatSniffer.wideEncoding(of: [0x41, 0, 0x42, 0]) == "UTF-16LE")
    }
}
