import ArgumentParser
import BugSquasherClient
import BugSquasherGraph
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Synchronization

/// Follows an import job to its end with `Jobs.Watch`, showing progress, and prints its
/// summary. squasherd resumes a job by itself when it restarts, so a lost connection is not the
/// end: the follower reconnects and goes on watching (for up to ``patience``).
struct JobFollower {
    /// How long squasherd may stay unreachable before the follower gives up.
    static let patience: Duration = .seconds(300)

    let socket: Endpoint
    let progress: ProgressBar

    /// Watches `job` until it ends; throws ``Exit/failed`` unless it finished having imported
    /// something or read nothing (every record rejected is a failure). Ctrl-C stops the
    /// watching, not the job, and says so.
    ///
    /// - Parameter reachedDaemon: whether squasherd answered this command already (an import
    ///   that just uploaded the job). Otherwise a squasherd that cannot be reached at the first
    ///   try ends the command with ``Exit/unreachable``, as every other command does, rather
    ///   than waiting for it to come back.
    func follow(_ job: String, reachedDaemon: Bool = false) throws {
        let interrupt = Self.onInterrupt { [progress] in
            progress.clear()
            printError(
                "squasherctl: stopped waiting; job \(job) goes on in squasherd. Follow it with: squasherctl jobs \(job) --wait; stop it with: squasherctl abort \(job)"
            )
        }
        defer { interrupt.cancel() }
        var final: WireJob?
        var first: (at: Date, job: WireJob)?
        var lostAt: ContinuousClock.Instant?
        // The store the job was followed in, and the one squasherd serves now.
        var (jobStore, servedStore): (String?, String?) = (nil, nil)
        var reached = reachedDaemon
        // Why the job waits to resume, once said (until it goes on).
        var waitingSaid: String?
        while !(final?.isFinal ?? false) {
            do {
                let client = try socket.connect()
                reached = true
                servedStore = try client.call("io.bugsquasher.Jobs.Status", Empty(), as: StatusReply.self)
                    .storeIdentifier
                if jobStore == nil { jobStore = servedStore }
                try client.stream("io.bugsquasher.Jobs.Watch", JobParameter(job: job)) { reply in
                    let parameters = try reply.parameters(JobReply.self)
                    let current = parameters.job
                    sayWaiting(parameters.waiting, job: job, said: &waitingSaid)
                    if lostAt != nil {
                        progress.clear()
                        printError("squasherctl: reconnected; job \(job) is \(current.state.rawValue)")
                        lostAt = nil
                    }
                    final = current
                    if first == nil { first = (Date(), current) }
                    if let first { show(current, since: first) }
                    return true
                }
            } catch let error as VarlinkError where error.isStoreUnavailable {
                // squasherd is there, its store is not (a database restarting): the job waits for
                // it too, and goes on by itself.
                let reason = error.statement ?? error.description
                try waitForDaemon(
                    lost: "squasherd cannot reach its store now", reason: reason, job: job, lostAt: &lostAt,
                    givingUp: Exit.unavailable)
            } catch let error as VarlinkError {
                throw refusal(error, job: job, jobStore: jobStore, servedStore: servedStore)
            } catch let error as TransportError where !reached {
                printError("squasherctl: \(error.wordedForSquasherd.message)")
                throw Exit.unreachable
            } catch let error as TransportError {
                // squasherd stopped or restarts: the job resumes when it is back.
                try waitForDaemon(
                    lost: "lost squasherd", reason: error.wordedForSquasherd.message, job: job, lostAt: &lostAt)
            }
        }
        progress.clear()
        guard let job = final else { throw Exit.failed }
        try report(job)
    }

    /// Says once why `job` waits to resume (`waiting`), and that it goes on when a reply
    /// without it comes; `said` is the reason said last.
    private func sayWaiting(_ waiting: WireJobWait?, job: String, said: inout String?) {
        if let waiting, waiting.reason != said {
            progress.clear()
            printError(
                "squasherctl: job \(job) waits to resume since \(waiting.since): \(printable(waiting.reason, limit: 200)); squasherd goes on from its last committed chunk once the store takes writes (Ctrl-C stops waiting, not the job)"
            )
            said = waiting.reason
        } else if waiting == nil, said != nil {
            progress.clear()
            printError("squasherctl: job \(job) goes on")
            said = nil
        }
    }

    /// What ends the command when squasherd refused to watch `job`, said to the user: a job
    /// missing from another store than the one it was followed in is named as such.
    private func refusal(_ error: VarlinkError, job: String, jobStore: String?, servedStore: String?) -> ExitCode {
        progress.clear()
        if error.name.hasSuffix(".JobNotFound"), let jobStore, let servedStore, servedStore != jobStore {
            printError(
                "squasherctl: squasherd came back serving another store (\(servedStore)), which has no job \(job); the job is in store \(jobStore). Was squasherd restarted with another state directory? Start it on that store again, and the job resumes there."
            )
            return Exit.notFound
        }
        return refused(error)
    }

    /// Waits a moment for squasherd, or its store, to come back after following failed (`lost`
    /// says which, `reason` why), saying so once (`lostAt` is when it was lost); throws
    /// `givingUp` (``Exit/unreachable`` for squasherd, ``Exit/unavailable`` for its store) when
    /// it has been gone for longer than ``patience``.
    private func waitForDaemon(
        lost: String, reason: String, job: String, lostAt: inout ContinuousClock.Instant?,
        givingUp: ExitCode = Exit.unreachable
    ) throws {
        let reason = reason.hasSuffix(".") ? String(reason.dropLast()) : reason
        let now = ContinuousClock.now
        if let lostAt, now - lostAt > Self.patience {
            printError(
                "squasherctl: stopped waiting after \(Self.patience.components.seconds) s (\(reason)); job \(job) goes on when squasherd and its store are back. Follow it with: squasherctl jobs \(job) --wait"
            )
            throw givingUp
        }
        if lostAt == nil {
            progress.clear()
            printError(
                "squasherctl: \(lost) (\(reason)); job \(job) goes on when it is back; waiting for it (Ctrl-C stops waiting, not the job)"
            )
            lostAt = now
        }
        Thread.sleep(forTimeInterval: 0.25)
    }

    /// Prints the summary of a job that ended; throws ``Exit/failed`` unless it finished having
    /// imported something or read nothing.
    private func report(_ job: WireJob) throws {
        print(
            "job \(job.id) \(job.state.rawValue): \(job.recordsRead) read, \(job.imported) imported, \(job.rejected) rejected\(took(job))"
        )
        if let error = job.error { printError("squasherctl: \(printable(error))") }
        // What became of a CSV export's columns, the ones not imported included.
        if let columns = job.columns { print("columns: \(printable(columns))") }
        if job.rejected > 0 { print("rejects: squasherctl jobs \(job.id) --rejects") }
        if job.state != .finished { throw Exit.failed }
        if job.recordsRead == 0 {
            // Not a failure (an export of a quiet week is empty), but nothing to take for data.
            printError(
                "squasherctl: job \(job.id) read no record: the input held a header or an empty list only; nothing was imported."
            )
        }
        if job.imported == 0 && job.rejected > 0 {
            // A script must not take an import of nothing for a good one.
            printError(
                "squasherctl: every record of job \(job.id) was rejected; nothing was imported. The rejects say why.")
            throw Exit.failed
        }
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
        progress.show(
            label: "importing", done: job.bytesDone, total: job.bytesTotal, unit: "bytes",
            extra: "\(job.recordsRead) records, \(Int(rate))/s\(eta)")
    }
}

extension JobFollower {
    /// Runs `message` and exits with 130 (the shell's status for SIGINT) on Ctrl-C, until the
    /// returned source is cancelled; SIGINT's default action is restored then.
    static func onInterrupt(_ message: @escaping @Sendable () -> Void) -> any DispatchSourceSignal {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler {
            message()
            exit(128 + SIGINT)
        }
        source.setCancelHandler { signal(SIGINT, SIG_DFL) }
        source.resume()
        return source
    }
}

/// Progress on standard error: a bar redrawn in place on a terminal; elsewhere (a log file, a
/// pipe, a CI job) a plain line every ``lineInterval``, so that a long import's log shows that it
/// moves, while a short one prints its summary alone.
final class ProgressBar: Sendable {
    /// How progress is shown.
    enum Style {
        /// A bar redrawn in place, for a terminal.
        case bar
        /// A line now and then, for a log.
        case lines
        /// Nothing.
        case off
    }

    /// How long a log goes between two lines of progress: 10 s, or the seconds in
    /// `SQUASHERCTL_PROGRESS_INTERVAL` (0: a line for every update squasherd sends).
    static let lineInterval: Duration = {
        guard let text = ProcessInfo.processInfo.environment["SQUASHERCTL_PROGRESS_INTERVAL"],
            let seconds = Double(text), seconds >= 0, seconds.isFinite
        else { return .seconds(10) }
        return .milliseconds(Int64(seconds * 1000))
    }()

    let style: Style
    /// When the last line was written (or the progress began).
    private let lastLine = Mutex(ContinuousClock.now)

    init(style: Style) { self.style = style }

    /// The progress of standard error: a bar on a terminal, lines otherwise; nothing unless
    /// `shown`.
    static func onStandardError(shown: Bool = true) -> ProgressBar {
        ProgressBar(style: !shown ? .off : isatty(2) != 0 ? .bar : .lines)
    }

    func show(label: String, done: Int64, total: Int64, unit: String, extra: String = "") {
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 0
        switch style {
        case .off:
            return
        case .bar:
            let width = 30
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            FileHandle.standardError.write(
                Data("\r\(label) [\(bar)] \(Int(fraction * 100))% \(extra)\u{1B}[K".utf8))
        case .lines:
            let now = ContinuousClock.now
            let due = lastLine.withLock { last in
                guard now - last >= Self.lineInterval else { return false }
                last = now
                return true
            }
            guard due else { return }
            let amount = total > 0 ? "\(Int(fraction * 100))% (\(done) of \(total) \(unit))" : "\(done) \(unit)"
            FileHandle.standardError.write(Data("\(label): \(amount)\(extra.isEmpty ? "" : ", \(extra)")\n".utf8))
        }
    }

    /// Wipes the bar from a terminal's line before other output; lines stay.
    func clear() {
        guard case .bar = style else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}

/// How long `job` took, from its upload to its end, and its rate — ` in 12.3 s (81,300
/// records/s)`, ` in 0.05 s (40 records/s)` — or nothing while it runs. Under 10 s with
/// hundredths, so that the time shown and the rate agree.
func took(_ job: WireJob) -> String {
    guard let finished = job.finished.flatMap(ISO8601Date.parse), let created = ISO8601Date.parse(job.created) else {
        return ""
    }
    let seconds = max(finished.timeIntervalSince(created), 0.001)
    let rate = (Double(job.recordsRead) / seconds).rounded().formatted(.number.grouping(.automatic))
    return " in \(String(format: seconds < 10 ? "%.2f" : "%.1f", seconds)) s (\(rate) records/s)"
}
