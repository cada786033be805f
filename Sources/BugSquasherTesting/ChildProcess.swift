import CConcurrencyHook
public import Foundation
import Synchronization

/// Runs blocking work (a `BlockingVarlinkClient` waiting on squasherd) on a thread of its own,
/// off Swift's cooperative pool, which has a thread per core: work blocking one of those would
/// stall every test running beside it.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
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
public final class ChildProcess: @unchecked Sendable {
    /// The name failure messages give the process.
    public let name: String
    private let process = Process()
    private let lines = Mutex<[String]>([])
    private let errors = Mutex<[String]>([])
    private let partial = Mutex<[UInt8]>([])
    private let exited = Mutex<Int32?>(nil)
    /// Both pipes reached end of file: everything the process wrote has been collected.
    private let drained = Mutex(0)

    /// Starts `executable` with `arguments`, `environment` added to this process's own, and
    /// `stdin` as its standard input when given.
    public init(
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
            self?.exited.withLock { $0 = $0 ?? reapedStatus(process) }
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

    /// The process ID.
    public var pid: Int32 { process.processIdentifier }
    /// The complete lines written to standard output so far.
    public var output: [String] { lines.withLock { $0 } }
    /// Everything written to standard error so far.
    public var errorOutput: String { errors.withLock { $0.joined() } }
    /// The exit status, once the process exited and its output was fully collected.
    ///
    /// Foundation's termination handler is the usual source; `waitid(WNOWAIT)` is asked too,
    /// because that handler is sometimes late on Linux (seen when another child execs). The first
    /// status seen is kept: once Foundation has reaped the child, `waitid` finds nothing, and
    /// until its handler has run only `Process.terminationStatus` still knows the status.
    public var exitStatus: Int32? {
        guard drained.withLock({ $0 }) >= 2 else { return nil }
        return exited.withLock { known in
            if let known { return known }
            known = process.isRunning ? childExitStatus(process.processIdentifier) : reapedStatus(process)
            return known
        }
    }

    /// Waits (polling the collected output every few milliseconds, bounded by `timeout`) for an
    /// output line that satisfies `predicate`, starting at line `from`.
    public func waitForLine(from start: Int = 0, timeout: Duration = .seconds(60), _ predicate: (String) -> Bool)
        async throws
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
    public func waitForErrorOutput(containing text: String, timeout: Duration = .seconds(60)) async throws {
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
    public func signal(_ signal: Int32) {
        if process.isRunning { kill(process.processIdentifier, signal) }
    }

    /// Waits for the process to exit (bounded) and returns its status.
    public func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
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
public func childExitStatus(_ pid: pid_t) -> Int32? {
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info._sifields._sigchld.si_pid != 0 else {
        return nil
    }
    let code = info._sifields._sigchld.si_status
    return info.si_code == CLD_EXITED ? code : 128 + code
}

/// The status of a child Foundation has reaped, as ``childExitStatus(_:)`` gives it (128 + the
/// signal when a signal ended it; `Process` gives the bare signal).
private func reapedStatus(_ process: Process) -> Int32 {
    process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
}

/// Calls `check` every 10 ms until it returns a value or `timeout` has passed, and once more
/// after that: a test task starved of pool threads past its deadline (tests beside it blocking
/// the pool) must not fail what happened in time. `nil` when the time ran out.
public func poll<T>(for timeout: Duration, _ check: () throws -> T?) async throws -> T? {
    let deadline = ContinuousClock.now + timeout
    while true {
        if let value = try check() { return value }
        guard ContinuousClock.now < deadline else { return nil }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Waits (polling, bounded) for a child started with `Process` to exit; see ``childExitStatus(_:)``.
/// Once Foundation has reaped the child, its status comes from `Process`.
public func waitForChild(_ process: Process, timeout: Duration = .seconds(30)) async throws -> Int32 {
    let status = try await poll(for: timeout) {
        process.isRunning ? childExitStatus(process.processIdentifier) : reapedStatus(process)
    }
    if let status { return status }
    throw HarnessError("pid \(process.processIdentifier) did not exit within \(timeout).")
}

/// A pipe for a child's standard input or output whose two ends are closed on `exec`, so that
/// only the child it is handed to holds a copy: `Pipe`'s inheritable descriptors, made by another
/// test while `Process.run()` spawns, leak into that test's child, and a reader of the pipe then
/// waits for an end of file until that child exits. The child gets its end through `dup2`, which
/// does not copy the close-on-exec flag; the maker closes that end once the child is started.
public struct ChildPipe {
    /// The end to read from.
    public let reading: FileHandle
    /// The end to write to.
    public let writing: FileHandle

    /// Makes the pipe.
    public init() throws {
        var descriptors: [Int32] = [-1, -1]
        guard bugsquasher_pipe2(&descriptors, O_CLOEXEC) == 0 else {
            throw HarnessError("pipe2: \(String(cString: strerror(errno)))")
        }
        reading = FileHandle(fileDescriptor: descriptors[0], closeOnDealloc: true)
        writing = FileHandle(fileDescriptor: descriptors[1], closeOnDealloc: true)
    }
}

/// A failure of the testing kit (a process that did not start, print or exit in time), with
/// what was seen.
public struct HarnessError: Error, CustomStringConvertible {
    /// What happened, with the output that shows it.
    public var description: String
    /// Creates an error.
    public init(_ description: String) { self.description = description }
}

extension ChildProcess {
    /// `squasherctl status` (with `arguments`) against the squasherd whose sockets are in
    /// `runtimeDirectory`, run to its end: its exit status, and the process for its output.
    public static func squasherctlStatus(runtimeDirectory: String, _ arguments: [String] = []) async throws -> (
        status: Int32, process: ChildProcess
    ) {
        let process = try ChildProcess(
            name: "status", executable: Products.squasherctl, arguments: ["status"] + arguments,
            environment: ["SQUASHERD_RUNTIME_DIRECTORY": runtimeDirectory])
        return (try await process.waitForExit(), process)
    }
}
