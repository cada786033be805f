import Foundation

/// Decides what an upload is from its first bytes — one of the ``ImportFormat``s, and for JSON
/// how its documents are split — or names what it is instead (another encoding, an archive, CSV
/// with other separators or unknown columns), with the command that converts it. A declared CSV
/// format is taken as it is. Pure: bytes in, a decision out; the daemon's spooler feeds it.
///
/// ```swift
/// let sniffer = FormatSniffer(declared: nil, columns: CSVColumnMapping(), maximumRecordBytes: 1 << 20)
/// let decision = try sniffer.decide(Array(firstBytes), final: false, insideGzip: false)
/// ```
public struct FormatSniffer: Sendable {
    /// What an upload is.
    public struct Decision: Sendable, Equatable {
        /// Its format.
        public var format: ImportFormat
        /// For a JSON array or search response, how its elements are split; `nil` for a format
        /// read line by line.
        public var layout: JSONArraySplitter.Layout?
        /// A decision.
        public init(format: ImportFormat, layout: JSONArraySplitter.Layout?) {
            self.format = format
            self.layout = layout
        }
    }

    /// The format the upload was declared as, if any.
    public let declared: ImportFormat?
    /// The columns a user mapped, for a CSV export.
    public let columns: CSVColumnMapping
    /// The longest record the import takes.
    public let maximumRecordBytes: Int

    /// A sniffer for one upload.
    public init(declared: ImportFormat?, columns: CSVColumnMapping = CSVColumnMapping(), maximumRecordBytes: Int) {
        self.declared = declared
        self.columns = columns
        self.maximumRecordBytes = maximumRecordBytes
    }

    private func refusal(_ statement: String, advice: String = "") -> ImportError {
        ImportError(.unsupportedFormat, statement, advice: advice)
    }

    /// Decides the format of an upload from its first bytes, or checks the declared one against
    /// them; `nil` for an upload of blank lines only that has ended (nothing to import).
    ///
    /// - Parameters:
    ///   - sniffed: the first bytes (inflated when gzip-compressed): at least two lines, or
    ///     ``maximumRecordBytes``, or all of them when `final` (the upload has ended).
    ///   - insideGzip: the bytes were inflated from gzip data (for messages).
    /// - Throws: ``ImportError`` (`unsupportedFormat`) saying what the input is, and how to convert it.
    public func decide(_ sniffed: [UInt8], final: Bool, insideGzip: Bool) throws(ImportError) -> Decision? {
        // A UTF-8 byte order mark (editors on Windows write one) is not part of the data.
        let sniffed = sniffed.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(sniffed.dropFirst(3)) : sniffed
        try refuseOtherEncodings(sniffed, insideGzip: insideGzip)
        guard let first = sniffed.first(where: { ![0x20, 0x0A, 0x0D, 0x09].contains($0) }) else {
            if final { return nil }
            throw refusal("The input starts with blank lines only; there is nothing to import.")
        }
        let firstLine = Array(Self.contentLines(sniffed, count: 1).first ?? [])
        if let declared, declared.isCSV, first != UInt8(ascii: "{"), first != UInt8(ascii: "[") {
            // A CSV export as declared: its header says what is wrong with it, if anything,
            // better than a guess at its format would.
            return Decision(format: declared, layout: nil)
        }
        let decision: Decision
        if first == UInt8(ascii: "[") {
            decision = Decision(format: declared == .bugsquasherNDJSON ? .bugsquasherNDJSON : .jiraJSON, layout: .array)
        } else if first == UInt8(ascii: "{") {
            // Nothing after the first line's content ends it (yet): one long line so far.
            let firstLineUnended = !sniffed.drop(while: { $0 != first }).contains(0x0A)
            decision = try detectObject(sniffed, firstLine: firstLine, unended: firstLineUnended)
        } else {
            decision = try Decision(format: detectCSV(sniffed, firstLine: firstLine, final: final), layout: nil)
        }
        try check(decision.format)
        return decision
    }

    /// Refuses text in a wider encoding than UTF-8, and archives or compressed files.
    private func refuseOtherEncodings(_ sniffed: [UInt8], insideGzip: Bool) throws(ImportError) {
        if let encoding = Self.wideEncoding(of: sniffed) {
            throw refusal(
                "The input is \(encoding) text; BugSquasher reads UTF-8 (and plain ASCII).",
                advice: "Convert it first, for instance: iconv -f \(encoding) -t UTF-8 FILE > FILE.utf8"
            )
        }
        if let (kind, decompress) = Self.archiveKind(of: sniffed) {
            let inside = insideGzip ? ", inside the gzip compression" : ""
            throw refusal(
                "The input is \(kind)\(inside); squasherd reads exports as they are or gzip-compressed (once).",
                advice: "Unpack it first, for instance: \(decompress) | squasherctl import -"
            )
        }
    }

    /// The format of input that starts with a JSON object: Jira issues, a search response or
    /// BugSquasher records, told from the first line's keys (or its first bytes, when that line
    /// is longer than a record may be).
    private func detectObject(
        _ sniffed: [UInt8], firstLine: [UInt8], unended firstLineUnended: Bool
    ) throws(ImportError) -> Decision {
        let object = try? JSONSerialization.jsonObject(with: Data(firstLine)) as? [String: Any]
        if let object, object["fields"] != nil {
            return Decision(format: .jiraJSON, layout: nil)
        } else if let object, object["issues"] != nil {
            return Decision(format: .jiraJSON, layout: .searchResponse)
        } else if let object, object["key"] != nil {
            return Decision(format: .bugsquasherNDJSON, layout: nil)
        } else if object == nil, firstLineUnended, sniffed.count >= maximumRecordBytes {
            // The first line is longer than a record may be: its first keys tell a search
            // response on one line from NDJSON whose first record is too long (a reject).
            let head = String(decoding: firstLine.prefix(4096), as: UTF8.self)
            if Self.opensIssuesArray(firstLine) {
                return Decision(format: .jiraJSON, layout: .searchResponse)
            } else {
                return Decision(
                    format: recordFormat(hasFields: head.contains("\"fields\""), hasKey: head.contains("\"key\"")),
                    layout: nil)
            }
        } else if object == nil, firstLineUnended, Self.opensIssuesArray(firstLine) {
            // A search response on one line, cut short: it must not pass for one broken
            // NDJSON record (a job that "finished" with one reject).
            return Decision(format: .jiraJSON, layout: .searchResponse)
        } else if object == nil, let record = Self.ndjsonWithBrokenFirstLine(firstLine, in: sniffed) {
            // NDJSON whose first record is broken: it becomes a reject, the others import.
            return Decision(
                format: recordFormat(hasFields: record["fields"] != nil, hasKey: record["key"] != nil), layout: nil)
        } else if object == nil {
            // A pretty-printed document: a Jira search response.
            return Decision(format: .jiraJSON, layout: .searchResponse)
        } else {
            throw refusal(
                "The input is JSON but neither Jira issues (no \"fields\"), a Jira search response (no \"issues\") nor BugSquasher records (no \"key\"). Supported formats: \(ImportFormat.names)."
            )
        }
    }

    /// The format of a CSV export, from its header (or the key column mapped); refuses input
    /// that is no export BugSquasher reads.
    private func detectCSV(_ sniffed: [UInt8], firstLine: [UInt8], final: Bool) throws(ImportError) -> ImportFormat {
        var probe = CSVParser(maximumRecordBytes: maximumRecordBytes)
        let header = (probe.feed(sniffed) + (final ? probe.finish() : [])).first
        let names: [String]? = if case .fields(let names, _)? = header { names } else { nil }
        // With the key column mapped, any CSV is read with Jira's defaults.
        let mapsKey = columns.columns[.key] != nil || columns.columns[.id] != nil
        guard let names, let flavor = CSVBugMapper.detect(header: names) ?? (mapsKey ? .jira : nil) else {
            throw csvRefusal(header: names, firstLine: firstLine)
        }
        return flavor == .jira ? .jiraCSV : .bugzillaCSV
    }

    /// Why input that is neither JSON nor a CSV export BugSquasher knows is refused: a known
    /// export with other separators, a CSV file without a known key column, or something else.
    private func csvRefusal(header names: [String]?, firstLine: [UInt8]) -> ImportError {
        if let (separator, flavor) = Self.headerWithOtherSeparator(firstLine) {
            return refusal(
                "The input looks like a \(flavor == .jira ? "Jira" : "Bugzilla") CSV export whose fields are separated by \(separator.name) rather than commas (as spreadsheet programs save CSV in some locales).",
                advice:
                    "BugSquasher reads comma-separated exports: export it again, save it as CSV with commas, or convert it, for instance: python3 -c 'import csv,sys; csv.writer(sys.stdout).writerows(csv.reader(sys.stdin, delimiter=\"\(separator.escaped)\"))' < FILE > FILE.csv"
            )
        }
        if let names, names.count >= 2, names.allSatisfy({ !$0.isEmpty && $0.count <= 100 }) {
            // A CSV header, if not one of an export the importer knows.
            let shown =
                names.prefix(40).map { "'\($0)'" }.joined(separator: ", ")
                + (names.count > 40 ? " and \(names.count - 40) more" : "")
            return refusal(
                "The input looks like a CSV file, but its header names no key column BugSquasher knows ('Issue key' or 'Issue id' of Jira, 'bug_id' or 'Bug ID' of Bugzilla). Its columns are \(shown).",
                advice:
                    "Name the key column with --map key=COLUMN (or numeric IDs with --map id=COLUMN --project KEY), and the others as needed (--map summary=COLUMN, --map created=COLUMN, …)."
            )
        }
        let preview = String(decoding: firstLine.prefix(60), as: UTF8.self).unicodeScalars.map {
            $0.value < 0x20 || $0.value == 0xFFFD ? "." : String($0)
        }.joined()
        return refusal(
            "The input is not a supported format: it is neither JSON nor a Jira or Bugzilla CSV export (it starts with \"\(preview)\"). Supported formats: \(ImportFormat.names)."
        )
    }

    /// Refuses a detected format other than the declared one, and `--map` or `--project` for a
    /// format that is not CSV.
    private func check(_ detected: ImportFormat) throws(ImportError) {
        if let declared, declared != detected {
            throw refusal(
                "The input was submitted as \(declared.rawValue) but looks like \(detected.rawValue).",
                advice: "Submit it with --format \(detected.rawValue), or check the file."
            )
        }
        if !columns.isEmpty, !detected.isCSV {
            throw refusal(
                "The input is \(detected.rawValue), whose fields have fixed names: --map and --project apply to CSV exports only.",
                advice: "Import it without them."
            )
        }
    }

    /// Whether `bytes` start a JSON object with an `issues` key whose value is an array: a Jira
    /// search response, as far as its first 64 KiB tell (a key of that name nested in an issue,
    /// or inside a string, does not count). The splitter that reads such a response decides.
    package static func opensIssuesArray(_ bytes: [UInt8]) -> Bool {
        var splitter = JSONArraySplitter(layout: .searchResponse)
        _ = try? splitter.feed(bytes.prefix(65_536))
        return splitter.foundArray
    }

    /// The separator and flavor of a Jira or Bugzilla CSV header whose fields are separated by
    /// semicolons, tabs or vertical bars instead of commas; `nil` when `firstLine` is no such header.
    private static func headerWithOtherSeparator(_ firstLine: [UInt8]) -> (
        separator: (name: String, escaped: String), flavor: CSVBugMapper.Flavor
    )? {
        let separators: [(byte: UInt8, name: String, escaped: String)] = [
            (UInt8(ascii: ";"), "semicolons", ";"), (UInt8(ascii: "\t"), "tabs", "\\t"),
            (UInt8(ascii: "|"), "vertical bars", "|"),
        ]
        for separator in separators where firstLine.contains(separator.byte) {
            let names = firstLine.split(separator: separator.byte, omittingEmptySubsequences: false).map {
                String(decoding: $0, as: UTF8.self).trimmingCharacters(
                    in: CharacterSet(charactersIn: "\"\r").union(.whitespaces))
            }
            if let flavor = CSVBugMapper.detect(header: names) { return ((separator.name, separator.escaped), flavor) }
        }
        return nil
    }

    /// When the first line does not parse: the record on the second line if that is a JSON
    /// object (or an empty one when the first line is a whole object by its braces), which
    /// makes the input NDJSON; `nil` for a pretty-printed document, whose second line is a key.
    private static func ndjsonWithBrokenFirstLine(_ firstLine: [UInt8], in sniffed: [UInt8]) -> [String: Any]? {
        let lines = contentLines(sniffed, count: 2)
        if lines.count > 1, let second = try? JSONSerialization.jsonObject(with: Data(lines[1])) as? [String: Any] {
            return second
        }
        guard firstLine.last(where: { ![0x20, 0x09, 0x0D].contains($0) }) == UInt8(ascii: "}") else { return nil }
        return String(decoding: firstLine, as: UTF8.self).contains("\"fields\"") ? ["fields": true] : [:]
    }

    /// The first `count` lines of `bytes` that hold more than whitespace: blank lines (CRLF ones
    /// too) before or between records are not records.
    package static func contentLines(_ bytes: [UInt8], count: Int) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        while lines.count < count, start < bytes.endIndex {
            let end = bytes[start...].firstIndex(of: 0x0A) ?? bytes.endIndex
            let line = bytes[start..<end]
            if line.contains(where: { ![0x20, 0x0D, 0x09].contains($0) }) { lines.append(line) }
            start = end + 1
        }
        return lines
    }

    /// The format of NDJSON whose first record cannot be parsed, from what it seems to hold: a
    /// Jira issue has `fields`; a record with neither `fields` nor `key` follows the declared format.
    private func recordFormat(hasFields: Bool, hasKey: Bool) -> ImportFormat {
        hasFields || (!hasKey && declared == .jiraJSON) ? .jiraJSON : .bugsquasherNDJSON
    }

    /// "UTF-16LE", "UTF-32BE", …, when the first bytes are text in a wider encoding than UTF-8:
    /// a byte order mark, or ASCII characters each followed (or preceded) by zero bytes.
    package static func wideEncoding(of bytes: [UInt8]) -> String? {
        if bytes.starts(with: [0xFF, 0xFE, 0, 0]) { return "UTF-32LE" }
        if bytes.starts(with: [0, 0, 0xFE, 0xFF]) { return "UTF-32BE" }
        if bytes.starts(with: [0xFF, 0xFE]) { return "UTF-16LE" }
        if bytes.starts(with: [0xFE, 0xFF]) { return "UTF-16BE" }
        guard bytes.count >= 4 else { return nil }
        switch (bytes[0] != 0, bytes[1] != 0, bytes[2] != 0, bytes[3] != 0) {
        case (true, false, false, false): return "UTF-32LE"
        case (false, false, false, true): return "UTF-32BE"
        case (true, false, true, false): return "UTF-16LE"
        case (false, true, false, true): return "UTF-16BE"
        default: return nil
        }
    }

    /// The kind of archive or compressed file `bytes` start like, and a command that unpacks it
    /// to standard output; `nil` for anything else.
    package static func archiveKind(of bytes: [UInt8]) -> (kind: String, decompress: String)? {
        let kinds: [(magic: [UInt8], kind: String, decompress: String)] = [
            ([0x1F, 0x8B], "gzip-compressed", "gunzip -c FILE"),
            ([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00], "xz-compressed", "xz -dc FILE"),
            ([0x28, 0xB5, 0x2F, 0xFD], "zstd-compressed", "zstd -dc FILE"),
            ([0x50, 0x4B, 0x03, 0x04], "a zip archive", "unzip -p FILE"),
            ([0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C], "a 7-Zip archive", "7z x -so FILE"),
        ]
        // bzip2: "BZh" and a block size of 1 to 9 (text may start with "BZh" too).
        if bytes.count > 3, bytes.starts(with: Array("BZh".utf8)), (0x31...0x39).contains(bytes[3]) {
            return ("bzip2-compressed", "bunzip2 -c FILE")
        }
        return kinds.first { bytes.starts(with: $0.magic) }.map { ($0.kind, $0.decompress) }
    }
}
