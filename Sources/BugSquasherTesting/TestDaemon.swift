import Foundation
import Synchronization

/// Runs `body` against a squasherd of its own, on a fresh temporary directory (removed afterwards),
/// then stops it with SIGTERM: after success it must exit with status 0 within 30 s, or the test
/// fails (one that exited during `body` is the test's to check); after `body` threw, it gets SIGKILL if still running 10 s later. `configuration` is the
/// text of a file passed with `--config`; `launcher`, a command that execs squasherd in its place
/// (`prlimit --nofile=64:4096 --`), so that the PID is still squasherd's.
///
/// ```swift
/// try await withDaemon(chunkSize: 10) { squasherd in try await squasherd.ctl(["import", path, "--wait"]) }
/// ```
public func withDaemon<T>(
    chunkSize: Int = 100, configuration: String? = nil, extraArguments: [String] = [], launcher: [String] = [],
    _ body: (TestDaemon) async throws -> T
) async throws -> T {
    let daemon = try await TestDaemon(
        chunkSize: chunkSize, configuration: configuration, extraArguments: extraArguments, launcher: launcher)
    let result: T
    do {
        result = try await body(daemon)
    } catch {
        await daemon.stopAfterFailure()
        throw error
    }
    // A daemon that already exited was stopped or killed by the test, or stopped by itself as
    // the test expected: its status is the test's to check.
    let stoppedHere = daemon.process.exitStatus == nil
    let status = try await daemon.stop()
    daemon.removeDirectory()
    guard status == 0 || !stoppedHere else {
        throw HarnessError(
            "squasherd exited with status \(status) when stopped:\n\(daemon.process.errorOutput.suffix(3000))")
    }
    return result
}

/// A squasherd on a temporary directory, with squasherctl to drive it; see ``withDaemon(chunkSize:configuration:extraArguments:launcher:_:)``.
///
/// The directory's paths are short (`/tmp/bse2e-XXXXXXXX`): Unix socket paths are limited to
/// 107 bytes.
public final class TestDaemon: Sendable {
    /// The daemon's own directory: `state/` holds its store, `run/` its sockets.
    public let directory: String
    /// The squasherd process (after ``restart(stateDirectory:)``, the new one).
    public var process: ChildProcess { current.withLock { $0 } }
    private let current: Mutex<ChildProcess>
    /// squasherd's command line without its state directory: the launcher, the executable, the
    /// runtime directory, the chunk size and the caller's arguments.
    private let command: [String]

    /// Starts squasherd and waits until it logs that it is ready; prefer
    /// ``withDaemon(chunkSize:configuration:extraArguments:launcher:_:)``, which also stops it.
    public init(
        chunkSize: Int = 100, configuration: String? = nil, extraArguments: [String] = [], launcher: [String] = []
    )
        async throws
    {
        directory = "/tmp/bse2e-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var arguments = extraArguments
        if let configuration {
            try configuration.write(toFile: directory + "/squasherd.conf", atomically: true, encoding: .utf8)
            arguments += ["--config", directory + "/squasherd.conf"]
        }
        command =
            launcher + [
                Products.squasherd, "--runtime-directory", directory + "/run", "--chunk-size", "\(chunkSize)",
            ] + arguments
        current = Mutex(try Self.start(command, stateDirectory: directory + "/state"))
        do {
            try await waitForLog("ready")
        } catch {
            await stopAfterFailure()
            throw error
        }
    }

    /// Starts squasherd again on the same sockets and arguments, once the last one has exited
    /// (stopped, killed, or stopped by itself), and waits until it is ready; `stateDirectory`
    /// (below ``directory``) puts it on another store. ``withDaemon(chunkSize:configuration:extraArguments:launcher:_:)``
    /// stops the new one as it would have stopped the first.
    public func restart(stateDirectory: String = "state") async throws {
        guard let status = process.exitStatus else {
            throw HarnessError("restart() needs the running squasherd (pid \(process.pid)) stopped or killed first.")
        }
        let next = try Self.start(command, stateDirectory: directory + "/" + stateDirectory)
        current.withLock { $0 = next }
        do {
            try await waitForLog("ready")
        } catch {
            throw HarnessError("squasherd (the last one exited with \(status)) did not start again: \(error)")
        }
    }

    private static func start(_ command: [String], stateDirectory: String) throws -> ChildProcess {
        try ChildProcess(
            name: "squasherd", executable: command[0],
            arguments: Array(command.dropFirst()) + ["--state-directory", stateDirectory])
    }

    /// The read-only socket: fetches, the change feed, job status.
    public var readSocket: String { directory + "/run/squasherd.sock" }
    /// The write socket: imports and edits.
    public var writeSocket: String { directory + "/run/squasherd-write.sock" }
    /// The environment that points squasherctl at this daemon.
    public var environment: [String: String] { ["SQUASHERD_RUNTIME_DIRECTORY": directory + "/run"] }

    /// Waits for a log line (squasherd logs to standard error) containing `text`.
    public func waitForLog(_ text: String, timeout: Duration = .seconds(60)) async throws {
        try await process.waitForErrorOutput(containing: text, timeout: timeout)
    }

    /// Stops the daemon with SIGTERM and returns its exit status; once it has exited, returns
    /// that status again.
    @discardableResult
    public func stop() async throws -> Int32 {
        if let status = process.exitStatus { return status }
        process.signal(SIGTERM)
        return try await process.waitForExit()
    }

    /// Stops the daemon after a failed test: SIGTERM, then SIGKILL when it is still running
    /// after 10 s; removes the directory.
    func stopAfterFailure() async {
        process.signal(SIGTERM)
        if (try? await process.waitForExit(timeout: .seconds(10))) == nil {
            process.signal(SIGKILL)
            _ = try? await process.waitForExit(timeout: .seconds(10))
        }
        removeDirectory()
    }

    /// Removes the daemon's directory.
    func removeDirectory() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit {
        // Only a daemon started without withDaemon and never stopped gets here running.
        if process.exitStatus == nil {
            process.signal(SIGTERM)
        }
        removeDirectory()
    }
}
