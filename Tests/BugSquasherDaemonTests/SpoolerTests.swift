import BugSquasherImport
import BugSquasherProtocol
import CompressNIO
import Foundation
import NIOCore
import Testing

@testable import BugSquasherDaemon

@Suite("Upload spooler")
struct SpoolerTests {
    /// A one-byte upload is read as it is.
    @Test("a gzip upload arriving one byte at a time is recognized and inflated")
    func gzipOneByteAtATime() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let records = (1...20).map { #"{"key":"SP-\#($0)","title":"spooled \#($0)","status":"Open"}"# }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var plain = ByteBuffer(string: records.joined(separator: "\n") + "\n")
        let compressed = Array(try plain.compress(with: .gzip()).readableBytesView)
        #expect(compressed.starts(with: [0x1F, 0x8B]))

        let spooler = try Spooler(jobID: "gz", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        for byte in compressed { try await spooler.append([byte]) }
        let (format, _) = try await spooler.finish()
        #expect(format == .bugsquasherNDJSON)
        let spooled = try String(contentsOfFile: await spooler.path, encoding: .utf8)
        #expect(spooled.split(separator: "\n").count == records.count, "\(spooled.prefix(200))")

        // The one byte held back is still read: an unfinished JSON array, not an empty upload.
        let single = try Spooler(jobID: "one", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        try await single.append(Array("[".utf8))
        let error = await #expect(throws: DaemonError.self) { _ = try await single.finish() }
        #expect(error?.message.contains("empty") == false, "\(String(describing: error))")
    }

    /// What it held up to the cut is not imported as if it were the whole input.
    @Test("a gzip upload cut short or without its trailer fails with the reason")
    func truncatedGzip() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let records = (1...2_000).map {
            #"{"key":"TG-\#($0)","title":"record \#($0) of a file cut short","status":"Open"}"#
        }
        var plain = ByteBuffer(string: records.joined(separator: "\n") + "\n")
        let compressed = Array(try plain.compress(with: .gzip()).readableBytesView)
        // The whole file; without its 8-byte trailer; cut in the middle.
        for (name, bytes, whole) in [
            ("whole", compressed, true), ("trailer", Array(compressed.dropLast(8)), false),
            ("half", Array(compressed.prefix(compressed.count / 2)), false),
        ] {
            let spooler = try Spooler(jobID: name, directory: directory, format: nil, maximumRecordBytes: 1 << 20)
            for start in stride(from: 0, to: bytes.count, by: 1_000) {
                try await spooler.append(Array(bytes[start..<min(bytes.count, start + 1_000)]))
            }
            if whole {
                _ = try await spooler.finish()
            } else {
                let error = await #expect(throws: DaemonError.self, "\(name)") { _ = try await spooler.finish() }
                #expect(error?.message.contains("gzip data is incomplete") == true, "\(String(describing: error))")
            }
        }
    }

    /// Zero padding after the last member is ignored and other bytes after one are refused; none of these
    /// cases spins.
    @Test("concatenated gzip members inflate one after the other, as gzip -d reads them", .timeLimit(.minutes(1)))
    func concatenatedGzip() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        func member(_ range: ClosedRange<Int>) throws -> [UInt8] {
            var plain = ByteBuffer(
                string: range.map { #"{"key":"CG-\#($0)","title":"member record \#($0)","status":"Open"}"# }.joined(
                    separator: "\n") + "\n")
            return Array(try plain.compress(with: .gzip()).readableBytesView)
        }
        let first = try member(1...1_500)
        let second = try member(1_501...3_000)
        let third = try member(3_001...3_003)
        let cases: [(String, [UInt8], Int?)] = [
            ("three members", first + second + third, 3_003),
            ("padded", first + [UInt8](repeating: 0, count: 512), 1_500),
            ("garbage after", first + Array("garbage\n".utf8), nil),
            ("one stray byte after", first + [0x1F], nil),
        ]
        for (name, bytes, lines) in cases {
            // Pieces that split members and their headers anywhere, one byte at the end.
            for piece in [1_000, 7] where name != "three members" || piece == 1_000 {
                let spooler = try Spooler(
                    jobID: "\(name.replacingOccurrences(of: " ", with: "-"))-\(piece)", directory: directory,
                    format: nil, maximumRecordBytes: 1 << 20)
                let outcome: Result<Int64, DaemonError>
                do {
                    for start in stride(from: 0, to: bytes.count, by: piece) {
                        try await spooler.append(Array(bytes[start..<min(bytes.count, start + piece)]))
                    }
                    outcome = .success(try await spooler.finish().1)
                } catch let error as DaemonError {
                    outcome = .failure(error)
                }
                if let lines {
                    let spooled = try String(contentsOfFile: await spooler.path, encoding: .utf8)
                    #expect(spooled.split(separator: "\n").count == lines, "\(name), pieces of \(piece)")
                    #expect(spooled.contains(#""key":"CG-\#(lines)""#), "\(name)")
                } else {
                    guard case .failure(let error) = outcome else {
                        Issue.record("\(name): accepted")
                        continue
                    }
                    #expect(error.message.contains("not another gzip member"), "\(name): \(error.message)")
                }
            }
        }
    }

    /// Instead of importing the rows before it and losing the rest.
    @Test("a CSV upload with an unclosed quoted field fails, naming the line")
    func unterminatedCSV() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spooler = try Spooler(jobID: "csv", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        try await spooler.append(
            Array("Summary,Issue key,Status\nFine,CSV-1,Open\n\"Unterminated quote,CSV-2,Open\nLater,CSV-3,Open\n".utf8)
        )
        let error = await #expect(throws: DaemonError.self) { _ = try await spooler.finish() }
        #expect(error?.message.contains("line 3") == true, "\(String(describing: error))")
    }

    /// Cut after a complete issue, it must not pass for one broken NDJSON record; the key is looked for
    /// only at the top level.
    @Test("a one-line Jira search response cut short is refused as truncated")
    func searchResponseCutShort() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let issue =
            #"{"key":"CUT-1","fields":{"summary":"an issue","description":"mentions \"issues\": [ in a string","issuetype":{"name":"Bug"},"status":{"name":"Open"},"project":{"key":"CUT"}}}"#
        let spooler = try Spooler(jobID: "cut", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        try await spooler.append(
            Array(#"{"startAt":0,"maxResults":2,"total":2,"issues":["#.utf8) + Array(issue.utf8) + Array(",".utf8)
                + Array(issue.utf8))
        let error = await #expect(throws: DaemonError.self) { _ = try await spooler.finish() }
        #expect(
            error?.message.contains("is not closed (the input is truncated)") == true, "\(String(describing: error))")

        #expect(FormatSniffer.opensIssuesArray(Array(#" { "expand": "names", "issues" : [ {"#.utf8)))
        // Not at the top level, not an array, or inside a string: not a search response.
        #expect(!FormatSniffer.opensIssuesArray(Array(#"{"fields":{"issues":[1]}}"#.utf8)))
        #expect(!FormatSniffer.opensIssuesArray(Array(#"{"issues":3,"key":"A"}"#.utf8)))
        #expect(!FormatSniffer.opensIssuesArray(Array(issue.utf8)))
        #expect(!FormatSniffer.opensIssuesArray(Array(#"{"key":"issues","x":["#.utf8)))
    }

    /// An oversized element is spooled as a reject; a bare element (an older spool) reads as one.
    @Test("a JSON array's elements are spooled as they came, with line and position")
    func spooledElements() throws {
        var output: [UInt8] = []
        let element = Array(#"{"key":"E-1","fields":{"summary":"\"}\" at the end"}}"#.utf8)
        SpooledElement.append(element, line: 7, issue: 3, to: &output)
        SpooledElement.appendReject(#"record is longer than 1024 bytes ("quoted")"#, line: 9, issue: 4, to: &output)
        let lines = output.split(separator: 0x0A).map(Array.init)
        #expect(lines.count == 2)
        try lines[0].withUnsafeBufferPointer { bytes in
            let read = try #require(try SpooledElement(bytes))
            #expect(read.line == 7 && read.issue == 3)
            guard case .issue(let range) = read.content else {
                Issue.record("not an issue: \(read.content)")
                return
            }
            #expect(Array(bytes[range]) == element)
        }
        try lines[1].withUnsafeBufferPointer { bytes in
            let read = try #require(try SpooledElement(bytes))
            #expect(read.line == 9 && read.issue == 4)
            guard case .reject(let reason) = read.content else {
                Issue.record("not a reject: \(read.content)")
                return
            }
            #expect(reason == #"record is longer than 1024 bytes ("quoted")"#)
        }
        try Array(#"{"_line":5,"_reject":"record is longer than 1024 bytes"}"#.utf8).withUnsafeBufferPointer { bytes in
            let read = try #require(try SpooledElement(bytes))
            #expect(read.line == 5 && read.issue == nil)
        }
        // (Sizes in the free-space refusal: a small file system's reserve is not "0 MiB".)
        #expect(Spooler.mebibytes(300_000) == "0.3 MiB" && Spooler.mebibytes(12 << 20) == "12 MiB")
        let bare = try element.withUnsafeBufferPointer { try SpooledElement($0) }
        #expect(bare == nil)
        #expect(throws: ImportError.self) {
            try Array(#"{"_line":5,"what":1}"#.utf8).withUnsafeBufferPointer { _ = try SpooledElement($0) }
        }
    }

    /// With or without a byte order mark; UTF-8 with a mark is read.
    @Test("UTF-16 and UTF-32 input is named with the iconv command that converts it")
    func wideEncodings() async throws {
        let text = #"{"key":"U-1","title":"t","status":"Open","project":{"key":"U"}}"# + "\n"
        let cases: [(String.Encoding, String)] = [
            (.utf16LittleEndian, "UTF-16LE"), (.utf16BigEndian, "UTF-16BE"), (.utf16, "UTF-16LE"),
            (.utf32LittleEndian, "UTF-32LE"), (.utf32BigEndian, "UTF-32BE"),
        ]
        for (encoding, name) in cases {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "bs-spool-\(UUID().uuidString)"
            ).path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let spooler = try Spooler(jobID: "wide", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
            let bytes = try #require(text.data(using: encoding))
            let error = await #expect(throws: DaemonError.self) {
                try await spooler.append(Array(bytes))
                _ = try await spooler.finish()
            }
            #expect(
                error?.message.contains("The input is \(name)") == true
                    && error?.message.contains("iconv -f \(name) -t UTF-8") == true,
                "\(name): \(String(describing: error))")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spooler = try Spooler(jobID: "bom", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        try await spooler.append([0xEF, 0xBB, 0xBF] + Array(text.utf8))
        #expect(try await spooler.finish().0 == .bugsquasherNDJSON)
    }

    /// Jira and Bugzilla exports separated by semicolons, tabs or vertical bars; the command converts them
    /// to commas.
    @Test("CSV exports with other separators are named with a command that converts them")
    func otherSeparatorsNamed() async throws {
        let cases: [(String, String, String)] = [
            (
                "Issue key;Summary;Status\nS-1;one;Open\n", "Jira CSV export whose fields are separated by semicolons",
                #"delimiter=";""#
            ),
            (
                "\"Issue key\"\t\"Summary\"\r\nS-1\tone\r\n", "Jira CSV export whose fields are separated by tabs",
                #"delimiter="\t""#
            ),
            (
                "bug_id|short_desc\n1|one\n", "Bugzilla CSV export whose fields are separated by vertical bars",
                #"delimiter="|""#
            ),
        ]
        for (text, named, command) in cases {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "bs-spool-\(UUID().uuidString)"
            ).path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let spooler = try Spooler(
                jobID: "separated", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
            let error = await #expect(throws: DaemonError.self) {
                try await spooler.append(Array(text.utf8))
                _ = try await spooler.finish()
            }
            #expect(
                error?.message.contains(named) == true && error?.message.contains(command) == true,
                "\(String(describing: error))")
        }
        // A header with a semicolon inside a column name is still read as comma-separated.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spooler = try Spooler(jobID: "commas", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        try await spooler.append(Array("Issue key,Summary,\"Notes; more\"\nS-1,one,x\n".utf8))
        #expect(try await spooler.finish().0 == .jiraCSV)
    }

    /// Spools `text` as one upload; returns the format and the spool's lines, or throws the failure.
    private func spool(_ text: String, format: ImportFormat? = nil, columns: CSVColumnMapping = CSVColumnMapping())
        async throws -> (ImportFormat, [String])
    {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spooler = try Spooler(
            jobID: "csv", directory: directory, format: format, columns: columns, maximumRecordBytes: 1 << 20)
        try await spooler.append(Array(text.utf8))
        let (detected, _) = try await spooler.finish()
        return (
            detected,
            try String(contentsOfFile: await spooler.path, encoding: .utf8).split(separator: "\n").map(String.init)
        )
    }

    /// Taking the declared format as it is lets the header's own problem be named; a CSV without a mapping
    /// is told how to give one.
    @Test("a declared CSV format is taken as it is; any CSV is read with a column mapping")
    func declaredCSVFormatAndMappings() async throws {
        let noKey = "Issue id,Summary,Status,Created\n101,Crash,Open,2020-01-02 17:14:21+00:00\n"
        for format in [ImportFormat.jiraCSV, nil] {
            let error = await #expect(throws: DaemonError.self) { try await spool(noKey, format: format) }
            #expect(
                error?.message.contains("no 'Issue key'") == true && error?.message.contains("--project KEY") == true,
                "\(String(describing: error))")
        }
        let (format, lines) = try await spool(noKey, columns: CSVColumnMapping(project: "TIMOB"))
        #expect(
            format == .jiraCSV && lines.count == 1 && lines[0].contains(#""key":"TIMOB-101""#)
                && lines[0].contains(#""created":"2020-01-02T17:14:21Z""#), "\(lines)")
        // Declared Bugzilla: the same file's IDs become BZ- keys.
        let (_, bugzilla) = try await spool(noKey, format: .bugzillaCSV)
        #expect(bugzilla.first?.contains(#""key":"BZ-101""#) == true, "\(bugzilla)")
        // A declared CSV format whose header lacks the key column says so, listing the columns.
        let declared = await #expect(throws: DaemonError.self) {
            try await spool("Title,State\nx,y\n", format: .jiraCSV)
        }
        #expect(
            declared?.message.contains("no column for the bug's key") == true
                && declared?.message.contains("Its columns are 'Title', 'State'.") == true,
            "\(String(describing: declared))")
        // Undeclared, a CSV of unknown columns is named as CSV, with its columns and --map.
        let unknown = await #expect(throws: DaemonError.self) {
            try await spool("Ticket,Headline,Opened\nA-1,x,2020-01-01\n")
        }
        #expect(
            unknown?.message.contains("looks like a CSV file") == true
                && unknown?.message.contains("'Ticket', 'Headline', 'Opened'") == true
                && unknown?.message.contains("--map key=COLUMN") == true, "\(String(describing: unknown))")
        let mapping = try CSVColumnMapping(parsing: ["key=Ticket", "summary=Headline", "created=Opened"])
        let (mapped, records) = try await spool("Ticket,Headline,Opened\nA-1,x,2020-01-01\n", columns: mapping)
        #expect(
            mapped == .jiraCSV && records.first?.contains(#""key":"A-1""#) == true
                && records.first?.contains(#""created":"2020-01-01T00:00:00Z""#) == true, "\(records)")
        // A mapping for JSON input is a mistake, not ignored.
        let json = await #expect(throws: DaemonError.self) {
            try await spool(#"{"key":"J-1","title":"t","status":"Open"}"# + "\n", columns: mapping)
        }
        #expect(
            json?.message.contains("--map and --project apply to CSV exports only") == true,
            "\(String(describing: json))")
    }

    /// bzip2, xz, zstd, zip and 7-Zip input, and gzip inside gzip, rather than a generic unsupported
    /// format.
    @Test("compressed and archived input is named with a command that unpacks it")
    func archivesNamed() async throws {
        let text = #"{"key":"A-1","title":"t","status":"Open","project":{"key":"A"}}"# + "\n"
        var plain = ByteBuffer(string: text)
        var once = try plain.compress(with: .gzip())
        let twice = Array(try once.compress(with: .gzip()).readableBytesView)
        let filler = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 37) }
        let cases: [([UInt8], String, String)] = [
            (Array("BZh91AY&SY".utf8) + filler, "bzip2-compressed", "bunzip2 -c FILE"),
            ([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00] + filler, "xz-compressed", "xz -dc FILE"),
            ([0x28, 0xB5, 0x2F, 0xFD] + filler, "zstd-compressed", "zstd -dc FILE"),
            ([0x50, 0x4B, 0x03, 0x04] + filler, "a zip archive", "unzip -p FILE"),
            ([0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C] + filler, "a 7-Zip archive", "7z x -so FILE"),
            (twice, "gzip-compressed, inside the gzip compression", "gunzip -c FILE"),
        ]
        for (bytes, kind, command) in cases {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "bs-spool-\(UUID().uuidString)"
            ).path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let spooler = try Spooler(jobID: "archive", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
            let error = await #expect(throws: DaemonError.self) {
                try await spooler.append(bytes)
                _ = try await spooler.finish()
            }
            #expect(
                error?.message.contains("The input is \(kind);") == true && error?.message.contains(command) == true,
                "\(kind): \(String(describing: error))")
        }
        // Text that starts like bzip2's name, without its block size, is still read as text.
        #expect(FormatSniffer.archiveKind(of: Array("BZh,title\n".utf8)) == nil)
    }

    /// It is cut to a few bytes over the limit, so an unending line costs no disk; it is still reported as
    /// too long, in its place.
    @Test("an NDJSON line over max_record_bytes is spooled cut, and read as too long")
    func oversizedLinesAreCut() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let limit = 4_096
        let good = { (n: Int) in Array(#"{"key":"CUT-\#(n)","title":"kept","status":"Open"}"#.utf8) }
        let spooler = try Spooler(jobID: "cut", directory: directory, format: nil, maximumRecordBytes: limit)
        try await spooler.append(good(1) + [0x0A])
        // 8 MiB of one line, in 64 KiB pieces, as a stream of zeros would arrive.
        let piece = [UInt8](repeating: UInt8(ascii: "x"), count: 64 * 1024)
        for _ in 0..<128 { try await spooler.append(piece) }
        try await spooler.append([0x0A])
        // A line exactly at the limit, ended by CRLF, is a record's length and stays whole; one
        // whose byte past the limit is a carriage return is still too long once cut.
        let atLimit = [UInt8](repeating: UInt8(ascii: " "), count: limit - good(3).count) + good(3)
        try await spooler.append(atLimit + [0x0D, 0x0A])
        try await spooler.append(
            [UInt8](repeating: UInt8(ascii: "y"), count: limit) + [0x0D] + Array("more".utf8) + [0x0A])
        try await spooler.append(good(5) + [0x0A])
        let (format, spooled) = try await spooler.finish()
        #expect(format == .bugsquasherNDJSON)
        #expect(spooled < 4 * Int64(limit), "spooled \(spooled) bytes")

        let reader = try OffsetLineReader(path: await spooler.path, maximumLineBytes: limit)
        var lines: [(Int, Bool, Int)] = []
        while let line = try reader.next() { lines.append((line.number, line.isOversized, line.bytes.count)) }
        #expect(lines.map(\.0) == [1, 2, 3, 4, 5])
        #expect(lines.map(\.1) == [false, true, false, true, false])
        #expect(lines[2].2 == limit)
    }
}
