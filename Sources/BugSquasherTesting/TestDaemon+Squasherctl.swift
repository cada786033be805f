import BugSquasherProtocol
import BugSquasherTransport
import Foundation

extension TestDaemon {
    /// Runs squasherctl to completion; returns its stdout lines, throwing on another exit status.
    @discardableResult
    public func ctl(_ arguments: [String], expectStatus: Int32 = 0) async throws -> [String] {
        try await ctlProcess(arguments, expectStatus: expectStatus).output
    }

    /// Runs squasherctl with `--json` among `arguments` and decodes its standard output as `T`
    /// (one JSON document).
    public func ctlJSON<T: Decodable>(_ arguments: [String], as type: T.Type = T.self) async throws -> T {
        let lines = try await ctl(arguments)
        do {
            return try JSONDecoder().decode(T.self, from: Data(lines.joined(separator: "\n").utf8))
        } catch {
            throw HarnessError(
                "squasherctl \(arguments.joined(separator: " ")) printed no \(T.self): \(error)\n\(lines)")
        }
    }

    /// Runs squasherctl, which must fail with `expectStatus`; returns what it wrote to stderr.
    public func ctlError(_ arguments: [String], expectStatus: Int32) async throws -> String {
        try await ctlProcess(arguments, expectStatus: expectStatus).errorOutput
    }

    /// Runs squasherctl, which must end with `expectStatus`; returns the process, its output read.
    public func ctlProcess(_ arguments: [String], expectStatus: Int32) async throws -> ChildProcess {
        let process = try ChildProcess(
            name: "squasherctl \(arguments.first ?? "")", executable: Products.squasherctl, arguments: arguments,
            environment: environment)
        let status = try await process.waitForExit(timeout: .seconds(120))
        guard status == expectStatus else {
            throw HarnessError(
                "squasherctl \(arguments.joined(separator: " ")) exited with \(status), expected \(expectStatus):\n\(process.errorOutput)"
            )
        }
        return process
    }

    /// Starts a long-running squasherctl (subscribe, watch, import --wait); `name` names it in
    /// failure messages.
    public func startCtl(_ name: String, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(name: name, executable: Products.squasherctl, arguments: arguments, environment: environment)
    }

    /// Starts `squasherctl subscribe --json` for `keys`, from `token` when given: a subscriber
    /// that prints one JSON line per event.
    public func startSubscriber(_ name: String, keys: [String], since token: Int64? = nil) throws -> ChildProcess {
        let since = token.map { ["--since", "\($0)"] } ?? []
        return try startCtl(name, ["subscribe", "--json"] + since + keys)
    }

    /// Writes `count` BugSquasher NDJSON records, keys `PREFIX-1`… in project `PREFIX`, to a file
    /// in the daemon's directory; returns its path and the records.
    public func writeRecords(_ name: String, count: Int, prefix: String, title: String) throws -> (
        path: String, records: [String]
    ) {
        let records = (1...count).map {
            #"{"key":"\#(prefix)-\#($0)","title":"\#(title) \#($0)","status":"Open","project":{"key":"\#(prefix)"}}"#
        }
        let path = directory + "/" + name
        try (records.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return (path, records)
    }

    /// Waits until squasherd counts `count` subscribers and job followers together; see
    /// ``waitForSubscriptions(_:on:startedBy:timeout:)``.
    public func waitForSubscriptions(
        _ count: Int, startedBy process: ChildProcess, timeout: Duration = .seconds(30)
    ) async throws {
        try await BugSquasherTesting.waitForSubscriptions(count, on: readSocket, startedBy: process, timeout: timeout)
    }
}

/// Waits until the squasherd on `readSocket` counts `count` subscribers and job followers
/// together (for instance a `jobs --wait` that has started watching); fails when `process` exits
/// first or after `timeout`. A bounded poll: nothing announces that a watch has started.
public func waitForSubscriptions(
    _ count: Int, on readSocket: String, startedBy process: ChildProcess, timeout: Duration = .seconds(30)
) async throws {
    let deadline = ContinuousClock.now + timeout
    func watchers() throws -> Int {
        let status = try BlockingVarlinkClient(path: readSocket).call(
            "io.bugsquasher.Jobs.Status", Empty(), as: StatusReply.self)
        return status.subscribers + (status.jobFollowers ?? 0)
    }
    while try watchers() < count {
        guard ContinuousClock.now < deadline, process.exitStatus == nil else {
            throw HarnessError("\(process.name) did not start watching: \(process.errorOutput)")
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}
