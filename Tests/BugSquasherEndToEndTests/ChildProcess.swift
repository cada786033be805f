import BugSquasherProtocol
import BugSquasherTransport
import CConcurrencyHook
import Foundation
import Synchronization
import Testing

/// Runs blocking work (a `BlockingVarlinkClient` waiting on squasherd) on a thread of its own,
/// off Swift's cooperative pool, which has a thread per core: work blocking one of those would
/// stall every test running beside it.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// A process the test started: its stdout as lines to wait on, its stderr kept for failure
/// messages. Every harness ends the processes it started, by PID, on success and on failure.
///
/// `@unchecked Sendable`: `Process` is not Sendable; this class only touches it through
/// thread-safe calls (`processIdentifier`, `isRunning`, `terminate`), and all mutable state is in
/// mutexes.
final class ChildProcess: @unchecked Sendable {
    let name: String
    private let process = Process()
    private let lines = Mutex<[String]>([])
    private let errors = Mutex<[String]>([])
    private let partial = Mutex<[UInt8]>([])
    private let exited = Mutex<Int32?>(nil)
    /// Both pipes reached end of file: everything the process wrote has been collected.
    private let drained = Mutex(0)

    init(
        name: String, executable: String, arguments: [String], environment: [String: String] = [:],
        stdin: FileHandle? = nil
    ) throws {
        self.name = name
        process.executableURL = URL(filePath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let out = try ChildPipe()
        let err = try ChildPipe()
        process.standardOutput = out.writing
        process.standardError = err.writing
        if let stdin { process.standardInput = stdin }
        // One blocking reader thread per pipe, until end of file: simple and reliable.
        let outHandle = out.reading
        let errHandle = err.reading
        Thread.detachNewThread { [weak self] in
            while true {
                let data = outHandle.availableData
                if data.isEmpty { break }
                self?.receive(data)
            }
            self?.drained.withLock { $0 += 1 }
        }
        Thread.detachNewThread { [weak self] in
            while true {
                let data = errHandle.availableData
                if data.isEmpty { break }
                self?.errors.withLock { $0.append(String(decoding: data, as: UTF8.self)) }
            }
            self?.drained.withLock { $0 += 1 }
        }
        process.terminationHandler = { [weak self] process in
            self?.exited.withLock { $0 = process.terminationStatus }
        }
        // The child has its own copies of the write ends now (or never started): the readers
        // see end of file once it exits.
        defer {
            try? out.writing.close()
            try? err.writing.close()
        }
        try process.run()
    }

    private func receive(_ data: Data) {
        guard !data.isEmpty else { return }
        let complete = partial.withLock { buffer -> [String] in
            // Only the new bytes are searched for line ends: a line of megabytes (a subscriber's
            // "ready" with 30,000 bugs) arrives in many reads, and searching it from its start
            // after each one is quadratic.
            guard data.contains(0x0A) else {
                buffer += data
                return []
            }
            buffer += data
            var out: [String] = []
            while let newline = buffer.firstIndex(of: 0x0A) {
                out.append(String(decoding: buffer[..<newline], as: UTF8.self))
                buffer.removeSubrange(...newline)
            }
            return out
        }
        if !complete.isEmpty { lines.withLock { $0 += complete } }
    }

    var pid: Int32 { process.processIdentifier }
    var output: [String] { lines.withLock { $0 } }
    var errorOutput: String { errors.withLock { $0.joined() } }
    /// The exit status, once the process exited and its output was fully collected.
    ///
    /// Foundation's termination handler is the usual source; `waitid(WNOWAIT)` is asked too,
    /// because that handler is sometimes late on Linux (seen when another child execs).
    var exitStatus: Int32? {
        guard drained.withLock({ $0 }) >= 2 else { return nil }
        return exited.withLock({ $0 }) ?? childExitStatus(process.processIdentifier)
    }

    /// Waits (polling the collected output every few milliseconds, bounded by `timeout`) for an
    /// output line that satisfies `predicate`, starting at line `from`.
    func waitForLine(from start: Int = 0, timeout: Duration = .seconds(60), _ predicate: (String) -> Bool) async throws
        -> (index: Int, line: String)
    {
        let found = try await poll(for: timeout) { () throws -> (index: Int, line: String)? in
            let current = output
            if start < current.count {
                for index in start..<current.count where predicate(current[index]) { return (index, current[index]) }
            }
            if exitStatus != nil, output.count == current.count {
                throw HarnessError(
                    "\(name) exited with status \(exitStatus!) before printing the expected line.\nstderr:\n\(errorOutput.suffix(3000))"
                )
            }
            return nil
        }
        if let found { return found }
        throw HarnessError(
            "\(name) did not print the expected line within \(timeout).\nstdout:\n\(output.suffix(20).joined(separator: "\n"))\nstderr:\n\(errorOutput.suffix(3000))"
        )
    }

    /// Waits until the process's stderr contains `text` (a log line of a daemon); throws when
    /// it exits first or the time runs out.
    func waitForErrorOutput(containing text: String, timeout: Duration = .seconds(60)) async throws {
        let logged = try await poll(for: timeout) { () throws -> Bool? in
            if errorOutput.contains(text) { return true }
            if let status = exitStatus {
                throw HarnessError("\(name) exited with \(status):\n\(errorOutput.suffix(3000))")
            }
            return nil
        }
        if logged != nil { return }
        throw HarnessError("\(name) did not log '\(text)' within \(timeout):\n\(errorOutput.suffix(3000))")
    }

    /// Sends a signal to this process (by PID).
    func signal(_ signal: Int32) {
        if process.isRunning { kill(process.processIdentifier, signal) }
    }

    /// Waits for the process to exit (bounded) and returns its status.
    func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
        if let status = try await poll(for: timeout, { exitStatus }) { return status }
        throw HarnessError(
            "\(name) (pid \(pid)) did not exit within \(timeout) (exited: \(exited.withLock { $0 }.map(String.init) ?? "no"), pipes at end of file: \(drained.withLock { $0 }) of 2)."
        )
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// A child's exit status (128 + the signal when a signal ended it), `nil` while it runs; the
/// child stays a zombie for Foundation to reap.
///
/// Tests wait for children through this, never with `Process.waitUntilExit()`: that blocks a
/// thread of the concurrency pool (two on this machine) until Foundation's process-monitor thread
/// notices the exit, and that thread itself blocks in `waitpid` on a child that closed the
/// descriptor Foundation watches (`systemd-socket-activate` closes every other descriptor before
/// it execs squasherd) until that child exits. Two such waits in parallel tests deadlocked the
/// suite: the test that would end the socket-activated daemon had no thread left to run on.
func childExitStatus(_ pid: pid_t) -> Int32? {
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info._sifields._sigchld.si_pid != 0 else {
        return nil
    }
    let code = info._sifields._sigchld.si_status
    return info.si_code == CLD_EXITED ? code : 128 + code
}

/// Calls `check` every 10 ms until it returns a value or `timeout` has passed, and once more
/// after that: a test task starved of pool threads past its deadline (tests beside it blocking
/// the pool) must not fail what happened in time. `nil` when the time ran out.
func poll<T>(for timeout: Duration, _ check: () throws -> T?) async throws -> T? {
    let deadline = ContinuousClock.now + timeout
    while true {
        if let value = try check() { return value }
        guard ContinuousClock.now < deadline else { return nil }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Waits (polling, bounded) for a child started with `Process` to exit; see ``childExitStatus(_:)``.
/// Once Foundation has reaped the child, its status comes from `Process`.
func waitForChild(_ process: Process, timeout: Duration = .seconds(30)) async throws -> Int32 {
    let status = try await poll(for: timeout) {
        process.isRunning ? childExitStatus(process.processIdentifier) : process.terminationStatus
    }
    if let status { return status }
    throw HarnessError("pid \(process.processIdentifier) did not exit within \(timeout).")
}

/// A pipe for a child's standard input or output whose two ends are closed on `exec`, so that
/// only the child it is handed to holds a copy.
///
/// Foundation's `Pipe` makes inheritable descriptors, and corelibs Foundation's `Process.run()`
/// keeps its other descriptors out of the child by closing those open when it *lists* them,
/// just before it spawns. A `Pipe` that another test made in that moment went into that child
/// too: when the child was a daemon of another test, it held the pipe's write end for as long
/// as it ran, and the reader of a short-lived process (an `sqlite3` that had long exited)
/// waited 30 s for an end of file. The child gets its end through `dup2`, which does not copy
/// the close-on-exec flag; the process that made the pipe closes that end once the child is
/// started.
struct ChildPipe {
    /// The end to read from.
    let reading: FileHandle
    /// The end to write to.
    let writing: FileHandle

    init() throws {
        var descriptors: [Int32] = [-1, -1]
        guard bugsquasher_pipe2(&descriptors, O_CLOEXEC) == 0 else {
            throw HarnessError("pipe2: \(String(cString: strerror(errno)))")
        }
        reading = FileHandle(fileDescriptor: descriptors[0], closeOnDealloc: true)
        writing = FileHandle(fileDescriptor: descriptors[1], closeOnDealloc: true)
    }
}

/// A harness failure with what was seen.
struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Paths of the built products and of the shared data.
enum Products {
    /// The directory holding the test binary, where SwiftPM also puts the executables.
    static let directory: String = {
        let binary = URL(filePath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var url = binary.deletingLastPathComponent()
        // xctest bundles on Linux: .build/debug/XPackageTests.xctest is the binary itself.
        while !FileManager.default.fileExists(atPath: url.appendingPathComponent("squasherd").path), url.path != "/" {
            url = url.deletingLastPathComponent()
        }
        return url.path
    }()

    static var squasherd: String { directory + "/squasherd" }
    static var squasherctl: String { directory + "/squasherctl" }

    /// The package root.
    static let packageRoot = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `../shared/data/titanium-jira-sample.ndjson`, when present.
    static var realSample: String? {
        let path = packageRoot.appendingPathComponent("../shared/data/titanium-jira-sample.ndjson").standardizedFileURL
            .path
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }
}

/// A squasherd on a temporary directory, with squasherctl to drive it.
final class DaemonHarness: Sendable {
    let directory: String
    let daemon: ChildProcess

    /// Starts squasherd; `configuration` is the text of a configuration file to pass it;
    /// `launcher` is a command that execs it in its own place (such as
    /// `prlimit --nofile=64:4096 --`), so that the PID is still squasherd's.
    init(chunkSize: Int = 100, configuration: String? = nil, extraArguments: [String] = [], launcher: [String] = [])
        async throws
    {
        // Short paths: Unix socket paths are limited to 107 bytes.
        directory = "/tmp/bse2e-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var arguments = extraArguments
        if let configuration {
            try configuration.write(toFile: directory + "/squasherd.conf", atomically: true, encoding: .utf8)
            arguments += ["--config", directory + "/squasherd.conf"]
        }
        let command =
            launcher + [
                Products.squasherd, "--state-directory", directory + "/state", "--runtime-directory",
                directory + "/run", "--chunk-size", "\(chunkSize)",
            ] + arguments
        daemon = try ChildProcess(name: "squasherd", executable: command[0], arguments: Array(command.dropFirst()))
        try await waitForDaemonLog("ready")
    }

    var readSocket: String { directory + "/run/squasherd.sock" }
    var writeSocket: String { directory + "/run/squasherd-write.sock" }

    /// Waits for a daemon log line (stderr) containing `text`.
    func waitForDaemonLog(_ text: String, timeout: Duration = .seconds(60)) async throws {
        try await daemon.waitForErrorOutput(containing: text, timeout: timeout)
    }

    /// Writes `count` BugSquasher NDJSON records, keys `PREFIX-1`… in project `PREFIX`, to a file
    /// in the harness's directory; returns its path and the records.
    func writeRecords(_ name: String, count: Int, prefix: String, title: String) throws -> (
        path: String, records: [String]
    ) {
        let records = (1...count).map {
            #"{"key":"\#(prefix)-\#($0)","title":"\#(title) \#($0)","status":"Open","project":{"key":"\#(prefix)"}}"#
        }
        let path = directory + "/" + name
        try (records.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return (path, records)
    }

    /// Runs squasherctl to completion; returns its stdout lines, throwing on another exit status.
    @discardableResult
    func ctl(_ arguments: [String], expectStatus: Int32 = 0) async throws -> [String] {
        try await ctlProcess(arguments, expectStatus: expectStatus).output
    }

    /// Runs squasherctl, which must fail with `expectStatus`; returns what it wrote to stderr.
    func ctlError(_ arguments: [String], expectStatus: Int32) async throws -> String {
        try await ctlProcess(arguments, expectStatus: expectStatus).errorOutput
    }

    /// Runs squasherctl, which must end with `expectStatus`; returns the process, its output read.
    func ctlProcess(_ arguments: [String], expectStatus: Int32) async throws -> ChildProcess {
        let process = try ChildProcess(
            name: "squasherctl \(arguments.first ?? "")", executable: Products.squasherctl, arguments: arguments,
            environment: ["SQUASHERD_RUNTIME_DIRECTORY": directory + "/run"])
        let status = try await process.waitForExit(timeout: .seconds(120))
        guard status == expectStatus else {
            throw HarnessError(
                "squasherctl \(arguments.joined(separator: " ")) exited with \(status), expected \(expectStatus):\n\(process.errorOutput)"
            )
        }
        return process
    }

    /// Starts a long-running squasherctl (subscribe, watch).
    func startCtl(_ name: String, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            name: name, executable: Products.squasherctl, arguments: arguments,
            environment: ["SQUASHERD_RUNTIME_DIRECTORY": directory + "/run"])
    }

    /// Stops the daemon with SIGTERM and returns its exit status.
    func stop() async throws -> Int32 {
        daemon.signal(SIGTERM)
        return try await daemon.waitForExit()
    }

    deinit {
        daemon.signal(SIGKILL)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Waits until squasherd on `readSocket` counts `count` subscribers and job followers together, for
/// instance a `jobs --wait` that has started watching; fails when `process` exits first or after
/// 30 s. A bounded poll: nothing announces that a watch has started.
func waitForSubscriptions(_ count: Int, on readSocket: String, startedBy process: ChildProcess) async throws {
    let deadline = ContinuousClock.now + .seconds(30)
    func connected() throws -> Int {
        let status = try BlockingVarlinkClient(path: readSocket).call(
            "io.bugsquasher.Jobs.Status", Empty(), as: StatusReply.self)
        return status.subscribers + (status.jobFollowers ?? 0)
    }
    while try connected() < count {
        guard ContinuousClock.now < deadline, process.exitStatus == nil else {
            throw HarnessError("\(process.name) did not start watching: \(process.errorOutput)")
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}
