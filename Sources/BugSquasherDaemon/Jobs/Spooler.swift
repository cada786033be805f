import BugSquasherGzip
import BugSquasherImport
import BugSquasherProtocol
import BugSquasherSQLite
import CConcurrencyHook
import Foundation

/// Receives an upload and writes it to the job's spool file in a form the import runner reads
/// line by line from any byte offset: gzip is inflated, JSON arrays and search responses become
/// one issue per line, CSV rows become records (or rejects) with their original line numbers.
/// Memory holds one chunk of input and one record, however large the upload.
actor Spooler {
    let jobID: String
    let path: String
    private let declared: ImportFormat?
    /// The columns a user mapped, for a CSV export.
    private let columns: CSVColumnMapping
    private let maximumRecordBytes: Int
    private let handle: FileHandle
    /// Writes the spool file beside the inflating and splitting done here.
    private let writer: SpoolWriter
    private var output: [UInt8] = []
    /// The bytes handed to the writer so far.
    private(set) var bytesWritten: Int64 = 0
    private let directory: String
    private var sniffed: [UInt8] = []
    private var sniffedLines = 0
    private var decided = false
    private var gzip: GzipInflater?
    /// Where inflated bytes go, a window at a time (a small, highly compressed upload cannot
    /// inflate into memory all at once).
    private var gzipWindow: [UInt8] = []
    /// Where the gzip members end, and whether the data ended whole.
    private var members = GzipMembers()
    /// The first bytes, held until there are two of them to tell gzip (`1F 8B`) from the rest:
    /// an upload may arrive one byte at a time. `nil` once told.
    private var leadingBytes: [UInt8]? = []
    private var format: ImportFormat?
    private var splitter: JSONArraySplitter?
    private var csv: CSVParser?
    private var mapper: CSVBugMapper?
    private var failure: DaemonError?
    /// The bytes of the NDJSON line being spooled, so far (see ``passThrough(_:)``).
    private var lineBytes = 0
    /// Why the upload was abandoned (aborted, or idle too long), once it was.
    private var abandonment: String?

    /// Creates the spool file.
    init(
        jobID: String, directory: String, format: ImportFormat?, columns: CSVColumnMapping = CSVColumnMapping(),
        maximumRecordBytes: Int
    ) throws {
        self.jobID = jobID
        self.path = Self.path(job: jobID, in: directory)
        self.declared = format
        self.columns = columns
        self.maximumRecordBytes = maximumRecordBytes
        self.directory = directory
        do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw DaemonError(
                "Cannot create the spool directory \(directory): \(Self.reason(error)).", unavailable: true)
        }
        guard FileManager.default.createFile(atPath: path, contents: nil) else {
            let why = SQLiteStore.whyNotWritable(path)
            throw DaemonError("Cannot create the spool file: \(why.problem).", advice: why.advice, unavailable: true)
        }
        guard let handle = FileHandle(forWritingAtPath: path) else {
            let why = SQLiteStore.whyNotWritable(path)
            throw DaemonError(
                "Cannot open the spool file for writing: \(why.problem).", advice: why.advice, unavailable: true)
        }
        self.handle = handle
        self.writer = SpoolWriter(handle: handle, path: path, directory: directory)
    }

    /// How a spool file's name ends.
    static let fileExtension = ".spool"

    /// The spool file of `job`'s upload in `directory`: what the import runner reads, and what
    /// an abort, a failure or the start-up sweep removes.
    static func path(job: String, in directory: String) -> String {
        directory + "/" + job + fileExtension
    }

    /// The format, once known.
    var detectedFormat: ImportFormat? { format }

    /// For a CSV export whose header was read: which column each field is read from, and the
    /// columns nothing reads.
    var columnsRead: String? { mapper?.columnsRead }

    /// Takes the next bytes of the upload.
    ///
    /// - Throws: ``DaemonError`` when the input is not what it claims to be; the job fails.
    func append(_ bytes: [UInt8]) throws {
        if let abandonment { throw UploadAbandoned(message: abandonment) }
        if let failure { throw failure }
        var bytes = bytes
        do {
            if let held = leadingBytes {
                bytes = held + bytes
                guard bytes.count >= 2 else {
                    leadingBytes = bytes
                    return
                }
                leadingBytes = nil
                if bytes.starts(with: [0x1F, 0x8B]) {
                    gzipWindow = [UInt8](repeating: 0, count: 256 * 1024)
                    gzip = GzipInflater()
                }
            }
            if let gzip {
                try inflate(bytes[...], with: gzip)
            } else {
                try consume(bytes)
            }
            try flush(force: false)
        } catch let error as DaemonError {
            failure = error
            throw error
        } catch {
            let failed =
                gzip != nil
                ? DaemonError(
                    "The input is not valid gzip data (\(error)).",
                    advice: "Upload the file as it is, or decompress it first.")
                : DaemonError("The input could not be read: \(error).")
            failure = failed
            throw failed
        }
    }

    /// Inflates `bytes` and consumes what they inflate to. Concatenated gzip members inflate one
    /// after the other, as `gzip -d` reads them; zero bytes after a member are padding; anything
    /// else after one is refused.
    private func inflate(_ bytes: ArraySlice<UInt8>, with gzip: GzipInflater) throws {
        var rest = bytes
        while !rest.isEmpty {
            guard members.memberEnded else {
                let taken = try inflateMember(rest, with: gzip)
                // (Never seen: the inflater takes input while it has room to write.)
                guard taken > 0 || members.memberEnded else { throw GzipError.stalled }
                rest = rest.dropFirst(taken)
                continue
            }
            let (taken, after) = members.afterMember(Array(rest))
            rest = rest.dropFirst(taken)
            switch after {
            case .needMore: return
            case .notGzip: throw Self.trailingData
            case .nextMember(let start):
                gzip.startMember()
                _ = try inflateMember(start[...], with: gzip)
            }
        }
    }

    /// Inflates from `bytes` until they are used up and nothing more comes out, or the member
    /// ends; returns how many bytes it took.
    private func inflateMember(_ bytes: ArraySlice<UInt8>, with gzip: GzipInflater) throws -> Int {
        var taken = 0
        var windowFilled = false
        while (taken < bytes.count || windowFilled) && !members.memberEnded {
            let step = try bytes[(bytes.startIndex + taken)...].withUnsafeBytes { input in
                try gzipWindow.withUnsafeMutableBytes { try gzip.inflate(input, into: $0) }
            }
            taken += step.consumed
            windowFilled = step.produced == gzipWindow.count
            members.inflated(step.produced, memberEnded: step.memberEnded)
            if step.produced > 0 {
                if decided, splitter == nil, csv == nil {
                    // NDJSON, the common case: lines go from the window to the output.
                    gzipWindow.withUnsafeBufferPointer {
                        passThrough(UnsafeBufferPointer(rebasing: $0[..<step.produced]))
                    }
                } else {
                    try consume(Array(gzipWindow[..<step.produced]))
                }
                try flush(force: false)
            } else if step.consumed == 0, !step.memberEnded {
                break
            }
        }
        return taken
    }

    private static let trailingData = DaemonError(
        "The gzip data is followed by bytes that are not another gzip member (the file was appended to, or is not one gzip file). Nothing was imported.",
        advice: "`gzip -t` checks a file."
    )

    /// Ends the upload; returns the format and the spooled size.
    func finish() throws -> (ImportFormat, Int64) {
        if let abandonment { throw UploadAbandoned(message: abandonment) }
        if let failure { throw failure }
        if let held = leadingBytes, !held.isEmpty {
            // A one-byte upload: not gzip.
            leadingBytes = nil
            try consume(held)
        }
        if !decided {
            // A short input (one line, or no newline at all) is decided only now; what was
            // sniffed still has to reach the spool.
            try decide(final: true)
            let pending = sniffed
            sniffed = []
            if format != nil { try route(pending) }
        }
        if gzip != nil {
            switch members.end() {
            case .whole: break
            case .trailingData: throw Self.trailingData
            case .incomplete(let inflatedBytes):
                throw DaemonError(
                    "The gzip data is incomplete: it does not end with the gzip trailer for the \(inflatedBytes) bytes it inflates to (a truncated download or copy? `gzip -t` checks a file). Nothing was imported.",
                    advice: "Submit the whole file."
                )
            }
        }
        guard let format else { throw DaemonError("The upload was empty: there is nothing to import.") }
        if let splitter {
            do { try splitter.finish() } catch {
                throw DaemonError("The input is not a complete \(format.rawValue) document: \(error.description).")
            }
        }
        if var csv {
            for record in csv.finish() { try spool(record) }
            self.csv = csv
        }
        try flush(force: true)
        try writer.drain()
        // On disk before the job is queued: the store records the job as committed, and a
        // power loss must not leave a queued job whose input the page cache held.
        do { try handle.synchronize() } catch {
            throw DaemonError(
                "Could not write the spooled upload to disk: \(Self.reason(error)). Nothing was imported.",
                advice: "Check the disk of \(directory), then submit the file again.",
                unavailable: true)
        }
        try handle.close()
        return (format, bytesWritten)
    }

    /// Abandons the upload and removes the spool file; bytes that still arrive for it are
    /// refused with `reason`.
    func discard(reason: String) {
        guard abandonment == nil else { return }
        abandonment = reason
        writer.settle()
        try? handle.close()
        try? FileManager.default.removeItem(atPath: path)
    }

    // MARK: Formats

    private func consume(_ bytes: [UInt8]) throws {
        if !decided {
            sniffed += bytes
            sniffedLines += bytes.lazy.filter { $0 == 0x0A }.count
            // Two lines: a broken first record must not make NDJSON look like a pretty-printed
            // document (the second line tells them apart).
            guard sniffed.count >= maximumRecordBytes || sniffedLines >= 2 else { return }
            try decide(final: false)
            let pending = sniffed
            sniffed = []
            try route(pending)
            return
        }
        try route(bytes)
    }

    private func route(_ bytes: [UInt8]) throws {
        if var splitter {
            let elements: [JSONArraySplitter.Element]
            do { elements = try splitter.feed(bytes) } catch {
                throw DaemonError("The input is not valid \(format?.rawValue ?? "JSON"): \(error.description).")
            }
            self.splitter = splitter
            for element in elements {
                switch element {
                case .value(let value, let number, let line):
                    SpooledElement.append(value, line: line, issue: number, to: &output)
                case .oversized(let number, let line):
                    SpooledElement.appendReject(
                        Self.tooLong(maximumRecordBytes), line: line, issue: number, to: &output)
                }
            }
        } else if var csv {
            let records = csv.feed(bytes)
            self.csv = csv
            for record in records { try spool(record) }
        } else {
            passThrough(bytes)
        }
    }

    /// Spools NDJSON as it came, line for line, except that a line longer than a record may be
    /// keeps only its first `maximumRecordBytes + 2` bytes and its newline: the import runner
    /// rejects it as too long all the same (two bytes over, so that a carriage return it ends on
    /// cannot bring it back under), and an unending line (`cat /dev/zero`) costs no disk.
    private func passThrough(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { passThrough($0) }
    }

    private func passThrough(_ buffer: UnsafeBufferPointer<UInt8>) {
        let kept = maximumRecordBytes + 2
        guard let base = buffer.baseAddress else { return }
        var start = 0
        while start < buffer.count {
            let newline = memchr(base + start, 0x0A, buffer.count - start).map {
                UnsafePointer($0.assumingMemoryBound(to: UInt8.self)) - base
            }
            let end = newline ?? buffer.count
            let take = min(end - start, max(0, kept - lineBytes))
            output.append(contentsOf: UnsafeBufferPointer(start: base + start, count: take))
            if let newline {
                output.append(0x0A)
                lineBytes = 0
                start = newline + 1
            } else {
                lineBytes = min(kept, lineBytes + end - start)
                start = end
            }
        }
    }

    private func spool(_ record: CSVParser.Record) throws {
        let envelope: SpoolEnvelope
        switch record {
        case .oversized(let line):
            envelope = SpoolEnvelope(_line: line, record: nil, _reject: Self.tooLong(maximumRecordBytes))
        case .malformed(let line, let reason):
            guard mapper != nil else {
                throw DaemonError(
                    "The CSV header on line \(line) cannot be read: its \(reason). Nothing was imported.",
                    advice: "Fix the header and submit the file again."
                )
            }
            envelope = SpoolEnvelope(_line: line, record: nil, _reject: reason)
        case .unterminated(let line):
            // Every row after it was read as part of one field: none of them can be trusted.
            throw DaemonError(
                "The CSV has a quoted field opened on line \(line) that is never closed, so every line after it was read as that one field. Nothing was imported.",
                advice: "Fix the quoting (a quote inside a quoted field is written \"\") and submit the file again."
            )
        case .fields(let fields, let line):
            guard let mapper else {
                let flavor = format == .bugzillaCSV ? CSVBugMapper.Flavor.bugzilla : .jira
                do { mapper = try CSVBugMapper(header: fields, flavor: flavor, mapping: columns) } catch {
                    let refusal = error as? ImportError
                    throw DaemonError(
                        "\(refusal?.statement ?? "\(error)") Nothing was imported.", advice: refusal?.advice ?? "")
                }
                return
            }
            do {
                envelope = SpoolEnvelope(_line: line, record: try mapper.record(fields, line: line), _reject: nil)
            } catch {
                envelope = SpoolEnvelope(
                    _line: line, record: nil, _reject: "\((error as? ImportError)?.message ?? "\(error)")")
            }
        }
        output += try RecordCoding.encoder().encode(envelope)
        output.append(0x0A)
    }

    /// Decides the format from the first bytes (or checks the declared one against them), with
    /// ``FormatSniffer``.
    private func decide(final: Bool) throws {
        decided = true
        let decision: FormatSniffer.Decision?
        do {
            decision = try FormatSniffer(declared: declared, columns: columns, maximumRecordBytes: maximumRecordBytes)
                .decide(sniffed, final: final, insideGzip: gzip != nil)
        } catch {
            throw DaemonError(error.statement, advice: error.advice)
        }
        // A UTF-8 byte order mark is not part of the data, and the sniffer left it out.
        if sniffed.starts(with: [0xEF, 0xBB, 0xBF]) { sniffed.removeFirst(3) }
        guard let decision else { return }
        format = decision.format
        if let layout = decision.layout {
            splitter = JSONArraySplitter(layout: layout, maximumElementBytes: maximumRecordBytes)
        }
        if decision.format.isCSV { csv = CSVParser(maximumRecordBytes: maximumRecordBytes) }
    }

    /// Hands the spooled output to the writer once a quarter MiB has gathered (`force`: any).
    private func flush(force: Bool) throws {
        guard force ? !output.isEmpty : output.count >= Self.bufferBytes else { return }
        try checkFreeSpace(for: Int64(output.count))
        // Handed over whole: the writer empties it and gives it back (see SpoolWriter.write).
        var full = writer.spareBuffer()
        swap(&full, &output)
        let count = full.count
        try writer.write(consume full)
        bytesWritten += Int64(count)
        output.reserveCapacity(Self.bufferBytes + Self.bufferBytes / 2)
    }

    /// How many bytes of output are handed to the writer at a time.
    private static let bufferBytes = 256 * 1024

    /// The free space an upload leaves on the state directory's file system for the store and the
    /// rest of the machine: a tenth of its size, at most 1 GiB.
    static func reserve(fileSystemBytes: Int64) -> Int64 { min(1 << 30, fileSystemBytes / 10) }

    /// Stops an upload before its spool file fills the disk, before each write of `bytes` (a
    /// quarter MiB at a time; `statvfs` costs a microsecond): a small gzip file can inflate to
    /// gigabytes (8.7 MB of gzip-compressed blank lines spool 1.9 GB).
    private func checkFreeSpace(for bytes: Int64) throws {
        var status = statvfs()
        guard statvfs(directory, &status) == 0 else { return }
        let blockSize = Int64(status.f_frsize)
        let free = Int64(status.f_bavail) * blockSize
        let reserve = Self.reserve(fileSystemBytes: Int64(status.f_blocks) * blockSize)
        guard free - bytes < reserve else { return }
        let inflation =
            gzip != nil && bytesWritten > 0
            ? " (gzip data inflated to \(Self.mebibytes(Int64(members.inflatedBytes))) so far)" : ""
        throw DaemonError(
            "The upload was stopped after spooling \(Self.mebibytes(Int64(bytesWritten)))\(inflation): the file system of \(directory) has \(Self.mebibytes(free)) free, and spooling on would leave less than the \(Self.mebibytes(reserve)) squasherd keeps free for the store. Nothing was imported.",
            advice: "Free space there, or import the file in parts.",
            unavailable: true)
    }

    /// What a failed file write says to a person: the system's reason ("No space left on
    /// device"), not Foundation's error dump.
    static func reason(_ error: any Error) -> String {
        let error = error as NSError
        if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return error.domain == NSPOSIXErrorDomain
            ? String(cString: strerror(Int32(error.code))) : error.localizedDescription
    }

    /// Bytes as MiB, with a decimal below 10 MiB: a small file system's reserve is not "0 MiB".
    static func mebibytes(_ bytes: Int64) -> String {
        bytes >= 10 << 20 ? "\(bytes >> 20) MiB" : String(format: "%.1f MiB", Double(bytes) / 1_048_576)
    }
}

extension Spooler {
    /// The reject reason of a record longer than `limit` bytes.
    static func tooLong(_ limit: Int) -> String {
        "record is longer than \(limit) bytes (max_record_bytes); raise max_record_bytes in squasherd's configuration to import it, or fix the record"
    }
}

/// Bytes for an upload that was abandoned (aborted, or idle too long): its job has ended already.
struct UploadAbandoned: Error {
    /// Why it was abandoned.
    var message: String
}
