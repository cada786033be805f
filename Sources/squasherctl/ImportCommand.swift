import ArgumentParser
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation

/// `squasherctl import FILE|-`: uploads a file (or stdin) the user can read; squasherd never
/// needs access to it.
struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a bug export (Jira JSON/CSV, Bugzilla CSV, BugSquasher NDJSON; gzip too) from a file or stdin.",
        discussion: "Without --wait, prints the job ID and returns once the upload is queued."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The file to import, or - for standard input.")
    var file: String

    @Option(help: "jira-json, jira-csv, bugzilla-csv or bugsquasher-ndjson (default: detected).")
    var format: String?

    @Option(parsing: .unconditional, help: "Records per chunk (default: the daemon's).")
    var chunkSize: Int?

    @Option(help: "The job's name (default: the file name).")
    var name: String?

    @Flag(help: "Show progress and wait for the job's summary; across a restart of squasherd it reconnects and goes on waiting (for up to 5 minutes without squasherd).")
    var wait = false

    func validate() throws {
        if let chunkSize, !(1...100_000).contains(chunkSize) {
            throw ValidationError("--chunk-size must be between 1 and 100000.")
        }
    }

    func run() throws {
        let input: FileHandle
        var size: Int64 = 0
        if file == "-" {
            input = .standardInput
        } else {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), isDirectory.boolValue {
                printError("squasherctl: \(file) is a directory; give the export file itself.")
                throw ExitCode.validationFailure
            }
            guard let handle = FileHandle(forReadingAtPath: file) else {
                printError("squasherctl: cannot read \(file): \(FileManager.default.fileExists(atPath: file) ? "permission denied" : "no such file").")
                throw ExitCode.validationFailure
            }
            input = handle
            size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int64) ?? 0
        }
        let progress = ProgressBar(enabled: wait && isatty(2) != 0)
        let job: String = try withClient(sockets.write) { client in
            let job = try client.call("io.bugsquasher.Import.Begin", BeginImportParameters(name: name ?? (file == "-" ? "stdin" : (file as NSString).lastPathComponent), format: format, chunkSize: chunkSize), as: JobParameter.self).job
            // The file goes over the connection itself (Upload with upgrade), in chunks of a
            // length and the bytes, without base64 or a reply per piece; the zero length commits.
            let reply = try client.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: job)) { connection in
                var sent: Int64 = 0
                var chunk = [UInt8](repeating: 0, count: 4 + 1 << 20)
                while true {
                    let count = try chunk.withUnsafeMutableBytes { try fill(UnsafeMutableRawBufferPointer(rebasing: $0[4...]), from: input.fileDescriptor) }
                    chunk.replaceSubrange(0..<4, with: UploadFraming.header(count))
                    try chunk.withUnsafeBytes { try connection.send(UnsafeRawBufferPointer(rebasing: $0[..<(4 + count)])) }
                    if count == 0 { break }
                    sent += Int64(count)
                    progress.show(label: "uploading", done: sent, total: size, unit: "bytes")
                }
                return try connection.receiveReply().parameters(UploadReply.self)
            }
            guard reply.job == job else { throw TransportError("squasherd committed job \(reply.job) instead of \(job).") }
            return job
        }
        progress.clear()
        guard wait else {
            print(job)
            return
        }
        try JobFollower(socket: sockets.read, progress: progress).follow(job)
    }
}

/// `squasherctl abort JOB`: stops an import job that is uploading, queued or running.
struct AbortCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abort",
        abstract: "Stop an import job (needs the write socket).",
        discussion: "A queued job is dropped. A running job stops after the chunk it is saving, which commits whole: the records imported before stay in the store. Returns once the job has stopped."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The job ID (squasherctl jobs lists them).")
    var job: String

    func run() throws {
        try withClient(sockets.write) { client in
            _ = try client.call("io.bugsquasher.Import.Abort", JobParameter(job: job), as: Empty.self)
            let ended = try client.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self).job
            print("job \(ended.id) \(ended.state): \(ended.recordsRead) read, \(ended.imported) imported, \(ended.rejected) rejected")
        }
    }
}

/// Follows an import job to its end with `Jobs.Watch`, showing progress, and prints its
/// summary. squasherd resumes a job by itself when it restarts, so a lost connection is not the
/// end: the follower reconnects and goes on watching (for up to ``patience``).
struct JobFollower {
    /// How long squasherd may stay unreachable before the follower gives up.
    static let patience: Duration = .seconds(300)

    let socket: String
    let progress: ProgressBar

    /// Watches `job` until it ends; throws ``Exit/failed`` unless it finished.
    func follow(_ job: String) throws {
        var final: WireJob?
        var first: (at: Date, job: WireJob)?
        var lostAt: ContinuousClock.Instant?
        // The store the job was followed in, and the one squasherd serves now.
        var (jobStore, servedStore): (String?, String?) = (nil, nil)
        while !(final?.isFinal ?? false) {
            do {
                let client = try BlockingVarlinkClient(path: socket)
                servedStore = try client.call("io.bugsquasher.Jobs.Status", Empty(), as: StatusReply.self).storeIdentifier
                if jobStore == nil { jobStore = servedStore }
                try client.stream("io.bugsquasher.Jobs.Watch", JobParameter(job: job)) { reply in
                    let current = try reply.parameters(JobReply.self).job
                    if lostAt != nil {
                        progress.clear()
                        printError("squasherctl: reconnected; job \(job) is \(current.state)")
                        lostAt = nil
                    }
                    final = current
                    if first == nil { first = (Date(), current) }
                    if let first { show(current, since: first) }
                    return true
                }
            } catch let error as VarlinkError {
                progress.clear()
                if error.name.hasSuffix(".JobNotFound"), let jobStore, let servedStore, servedStore != jobStore {
                    printError("squasherctl: squasherd came back serving another store (\(servedStore)), which has no job \(job); the job is in store \(jobStore). Was squasherd restarted with another state directory? Start it on that store again, and the job resumes there.")
                    throw Exit.notFound
                }
                throw refused(error)
            } catch let error as TransportError {
                // squasherd stopped or restarts: the job resumes when it is back.
                let reason = error.message.hasSuffix(".") ? String(error.message.dropLast()) : error.message
                let now = ContinuousClock.now
                if let lostAt, now - lostAt > Self.patience {
                    printError("squasherctl: squasherd has been unreachable for \(Self.patience.components.seconds) s (\(reason)); job \(job) resumes when it starts again. Follow it with: squasherctl jobs \(job) --wait")
                    throw Exit.unreachable
                }
                if lostAt == nil {
                    progress.clear()
                    printError("squasherctl: lost squasherd (\(reason)); job \(job) resumes when squasherd is back; waiting for it (Ctrl-C stops waiting, not the job)")
                    lostAt = now
                }
                Thread.sleep(forTimeInterval: 0.25)
            }
        }
        progress.clear()
        guard let job = final else { throw Exit.failed }
        print("job \(job.id) \(job.state): \(job.recordsRead) read, \(job.imported) imported, \(job.rejected) rejected")
        if let error = job.error { printError("squasherctl: \(error)") }
        if job.rejected > 0 { print("rejects: squasherctl jobs \(job.id) --rejects") }
        if job.state != "finished" { throw Exit.failed }
    }

    /// Shows `job`'s progress, with the rate and time left measured from `first`, the job as this
    /// follower first saw it (a job followed midway has done work before).
    private func show(_ job: WireJob, since first: (at: Date, job: WireJob)) {
        let elapsed = Date().timeIntervalSince(first.at)
        let rate = elapsed > 0 ? Double(job.recordsRead - first.job.recordsRead) / elapsed : 0
        let bytesDone = job.bytesDone - first.job.bytesDone
        var eta = ""
        if bytesDone > 0, job.bytesTotal > job.bytesDone, elapsed > 0 {
            let remaining = Int(elapsed * Double(job.bytesTotal - job.bytesDone) / Double(bytesDone))
            eta = String(format: ", ETA %d:%02d", remaining / 60, remaining % 60)
        }
        progress.show(label: "importing", done: job.bytesDone, total: job.bytesTotal, unit: "bytes", extra: "\(job.recordsRead) records, \(Int(rate))/s\(eta)")
    }
}

/// Reads from `fd` until `buffer` is full or the input ends; returns the bytes read (0 at the end).
private func fill(_ buffer: UnsafeMutableRawBufferPointer, from fd: CInt) throws -> Int {
    var filled = 0
    while filled < buffer.count {
        let n = read(fd, buffer.baseAddress! + filled, buffer.count - filled)
        if n < 0 && errno == EINTR { continue }
        guard n >= 0 else {
            printError("squasherctl: reading the input failed: \(String(cString: strerror(errno))); the upload is abandoned.")
            throw Exit.failed
        }
        if n == 0 { break }
        filled += n
    }
    return filled
}

/// A one-line progress bar on standard error (only on a terminal).
struct ProgressBar {
    let enabled: Bool

    func show(label: String, done: Int64, total: Int64, unit: String, extra: String = "") {
        guard enabled else { return }
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 0
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        FileHandle.standardError.write(Data("\r\(label) [\(bar)] \(Int(fraction * 100))% \(extra)\u{1B}[K".utf8))
    }

    func clear() {
        guard enabled else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}
