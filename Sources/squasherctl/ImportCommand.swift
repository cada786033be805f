import ArgumentParser
import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation

/// `squasherctl import FILE|-`: uploads a file (or stdin) the user can read; squasherd never
/// needs access to it.
struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract:
            "Import a bug export (Jira JSON/CSV, Bugzilla CSV, BugSquasher NDJSON; gzip too) from a file or stdin.",
        discussion:
            "Without --wait, prints the job ID and returns once the upload is queued. The formats, the CSV column names each field is read from, and BugSquasher's own NDJSON records are described in docs/IMPORTS.md."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The file to import, or - for standard input.")
    var file: String

    @Option(help: "\(ImportFormat.names) (default: detected; a CSV format given is taken as it is).")
    var format: String?

    @Option(
        name: .customLong("map"),
        help: ArgumentHelp(
            "For a CSV export: read FIELD from the column named COLUMN (repeatable), e.g. --map key=\"Issue id\" --map created=Opened.",
            discussion:
                "Fields: \(CSVColumnMapping.Field.names). Fields not mapped are read from the columns Jira's and Bugzilla's exports name them by.",
            valueName: "FIELD=COLUMN"
        )
    )
    var columns: [String] = []

    @Option(
        help: ArgumentHelp("For a CSV export: the project of every bug; numeric IDs become KEY-<id>.", valueName: "KEY")
    )
    var project: String?

    @Option(parsing: .unconditional, help: "Records per chunk (default: the daemon's).")
    var chunkSize: Int?

    @Option(help: "The job's name (default: the file name).")
    var name: String?

    @Flag(
        help:
            "Show progress (a bar on a terminal, a line every 10 s in a log) and wait for the job's summary; across a restart of squasherd it reconnects and goes on waiting (for up to 5 minutes without squasherd)."
    )
    var wait = false

    func validate() throws {
        if let chunkSize, !ImportChunkSize.allowed.contains(chunkSize) {
            throw ValidationError(
                "--chunk-size must be between \(ImportChunkSize.allowed.lowerBound) and \(ImportChunkSize.allowed.upperBound)."
            )
        }
        if let format, ImportFormat(rawValue: format) == nil {
            throw ValidationError(
                "Unknown --format '\(format)'; use one of \(ImportFormat.names), or leave it out to detect the format.")
        }
        if let name, name.trimmingCharacters(in: .whitespaces).isEmpty {
            throw ValidationError(
                "--name is empty; give the job a name, or leave --name out to name it after the file.")
        }
        let mapping: CSVColumnMapping
        do { mapping = try CSVColumnMapping(parsing: columns, project: project) } catch let error as ImportError {
            throw ValidationError(error.message)
        }
        if !mapping.isEmpty, let format, let known = ImportFormat(rawValue: format),
            ![.jiraCSV, .bugzillaCSV].contains(known)
        {
            throw ValidationError(
                "--map and --project describe the columns of a CSV export; a \(format) file's fields have fixed names. Leave them out, or give the CSV format."
            )
        }
    }

    /// The columns mapped, by field name, as `Import.Begin` takes them; `nil` for none.
    private var mappedColumns: [String: String]? {
        guard let mapping = try? CSVColumnMapping(parsing: columns), !mapping.columns.isEmpty else { return nil }
        return Dictionary(uniqueKeysWithValues: mapping.columns.map { ($0.key.rawValue, $0.value) })
    }

    func run() throws {
        let (input, size) = try openInput()
        let progress = ProgressBar.onStandardError(shown: wait)
        let job: String = try withClient(sockets.write) { client in
            let job = try client.call(
                "io.bugsquasher.Import.Begin",
                BeginImportParameters(
                    name: name ?? (file == "-" ? "stdin" : (file as NSString).lastPathComponent), format: format,
                    chunkSize: chunkSize, columns: mappedColumns, project: project), as: JobParameter.self
            ).job
            // The file goes over the connection itself (Upload with upgrade), in chunks of a
            // length and the bytes, without base64 or a reply per piece; the zero length commits.
            let reply = try client.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: job)) { connection in
                try upload(input, size: size, to: connection, progress: progress)
            }
            guard reply.job == job else {
                throw TransportError(
                    .unexpectedReply, "squasherd committed job \(reply.job) instead of \(job).", path: client.path)
            }
            return job
        }
        progress.clear()
        guard wait else {
            print(job)
            return
        }
        try JobFollower(socket: sockets.read, progress: progress).follow(job, reachedDaemon: true)
    }

    /// The input to upload, and its size when it is a regular file (0 otherwise); refuses a
    /// directory, a file that cannot be read, and a closed standard input.
    private func openInput() throws -> (input: FileHandle, size: Int64) {
        let input: FileHandle
        var size: Int64 = 0
        if file == "-" {
            guard !StandardStreams.inputWasClosed else {
                printError(
                    "squasherctl: standard input is closed, so there is no export to read from it; pipe the export in (… | squasherctl import -), or give the file's path."
                )
                throw ExitCode.validationFailure
            }
            input = .standardInput
        } else {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), isDirectory.boolValue {
                printError("squasherctl: \(file) is a directory; give the export file itself.")
                throw ExitCode.validationFailure
            }
            guard let handle = FileHandle(forReadingAtPath: file) else {
                printError(
                    "squasherctl: cannot read \(file): \(FileManager.default.fileExists(atPath: file) ? "permission denied" : "no such file")."
                )
                throw ExitCode.validationFailure
            }
            input = handle
            var status = stat()
            if fstat(handle.fileDescriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG {
                size = Int64(status.st_size)
            }
        }
        return (input, size)
    }

    /// Sends the input over an upgraded `Import.Upload` connection, in chunks of a length and
    /// the bytes, and ends it with a zero length; returns squasherd's reply.
    private func upload(
        _ input: FileHandle, size: Int64, to connection: BlockingVarlinkClient.UpgradedConnection,
        progress: ProgressBar
    ) throws -> UploadReply {
        var sent: Int64 = 0
        var chunk = [UInt8](repeating: 0, count: 4 + 1 << 20)
        while true {
            let count = try chunk.withUnsafeMutableBytes {
                try fill(
                    UnsafeMutableRawBufferPointer(rebasing: $0[4...]), from: input.fileDescriptor,
                    for: connection)
            }
            if count == 0 && sent < size {
                // Ending here would import a part of the file as if it were all of it.
                // Without the end of the upload, squasherd abandons it.
                printError(
                    "squasherctl: \(file) shrank while it was read (it ended after \(sent) of the \(size) bytes it had when opened): it is being written or truncated. Nothing was imported; import it again once it is complete."
                )
                throw Exit.failed
            }
            chunk.replaceSubrange(0..<4, with: UploadFraming.header(count))
            try chunk.withUnsafeBytes {
                try connection.send(UnsafeRawBufferPointer(rebasing: $0[..<(4 + count)]))
            }
            if count == 0 { break }
            sent += Int64(count)
            progress.show(label: "uploading", done: sent, total: size, unit: "bytes")
        }
        return try connection.receiveReply().parameters(UploadReply.self)
    }
}

/// `squasherctl abort JOB`: stops an import job that is uploading, queued or running.
struct AbortCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abort",
        abstract: "Stop an import job (needs the write socket).",
        discussion:
            "A queued job is dropped. A running job stops after the chunk it is saving, which commits whole: the records imported before stay in the store. Returns once the job has stopped."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The job ID (squasherctl jobs lists them).")
    var job: String

    func validate() throws {
        if job.trimmingCharacters(in: .whitespaces).isEmpty {
            throw ValidationError("The job ID is empty; squasherctl jobs lists the recent ones.")
        }
    }

    func run() throws {
        try withClient(sockets.write) { client in
            _ = try client.call("io.bugsquasher.Import.Abort", JobParameter(job: job), as: Empty.self)
            let ended = try client.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self).job
            print(
                "job \(ended.id) \(ended.state.rawValue): \(ended.recordsRead) read, \(ended.imported) imported, \(ended.rejected) rejected"
            )
        }
    }
}

/// Reads from `fd` what it has, up to `buffer`'s size; returns the bytes read (0 at the end).
/// The first bytes are waited for, watching `connection` meanwhile; more only while they are
/// there already. A file fills the buffer; a slow pipe's bytes go out as they come, so that an
/// upload fed steadily is never taken for idle (`upload_idle_timeout`).
private func fill(
    _ buffer: UnsafeMutableRawBufferPointer, from fd: CInt, for connection: BlockingVarlinkClient.UpgradedConnection
) throws -> Int {
    var filled = 0
    while filled < buffer.count, try connection.inputReady(fd, wait: filled == 0) {
        let n = read(fd, buffer.baseAddress! + filled, buffer.count - filled)
        if n < 0 && errno == EINTR { continue }
        guard n >= 0 else {
            // An input that cannot be read to its end is an unreadable input file, as one that
            // cannot be opened is (a usage error, 64).
            printError(
                "squasherctl: reading the input failed: \(String(cString: strerror(errno))). The upload is abandoned and nothing was imported; check the file (or what feeds the pipe) and import it again."
            )
            throw ExitCode.validationFailure
        }
        if n == 0 { break }
        filled += n
    }
    return filled
}
