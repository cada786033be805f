import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Testing

@Suite("End to end: crash safety", .serialized)
struct CrashSafetyTests {
    /// Runs sqlite3 on the store (read-only) and returns its output lines.
    func sqlite(_ path: String, _ sql: String) async throws -> [String] {
        let process = try ChildProcess(
            name: "sqlite3", executable: "/usr/bin/sqlite3", arguments: ["-readonly", path, sql])
        #expect(try await process.waitForExit() == 0, "\(process.errorOutput)")
        return process.output
    }

    /// Two kill -9 and one SIGTERM at random points. The job resumes by itself (a `jobs --wait` rides out
    /// the restarts), the store is sound, the history has no gap, and a follower saw every change once.
    @Test("an import survives kill -9 and SIGTERM with every record imported once")
    func killDuringImport() async throws {
        let directory = "/tmp/bscrash-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // room for three kills 100–600 records apart even when the import outruns the test on a loaded machine
        let count = 12_000
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        var lines = try SampleIssues.generate(count: count).map {
            String(decoding: try encoder.encode($0), as: UTF8.self)
        }
        lines[99] = "{broken"  // one reject, so that imported + rejected = read is tested too
        try (lines.joined(separator: "\n") + "\n").write(
            toFile: directory + "/input.ndjson", atomically: true, encoding: .utf8)
        let arguments = [
            "--state-directory", directory + "/state", "--runtime-directory", directory + "/run", "--chunk-size", "50",
        ]
        let environment = ["SQUASHERD_RUNTIME_DIRECTORY": directory + "/run"]
        func startDaemon() async throws -> ChildProcess {
            let daemon = try ChildProcess(name: "squasherd", executable: Products.squasherd, arguments: arguments)
            let deadline = ContinuousClock.now + .seconds(60)
            while !daemon.errorOutput.contains(" ready"), ContinuousClock.now < deadline {
                if daemon.exitStatus != nil { throw HarnessError("squasherd exited: \(daemon.errorOutput)") }
                try await Task.sleep(for: .milliseconds(10))
            }
            return daemon
        }
        var daemon = try await startDaemon()
        // A follower on the change feed through the whole run, resuming with `since` after each
        // restart (squasherctl watch does that by itself).
        let follower = try ChildProcess(
            name: "watch", executable: Products.squasherctl, arguments: ["watch", "--json"], environment: environment)
        _ = try await follower.waitForLine { $0.contains(#""event":"subscribed""#) }
        // The job is begun first, so that a user waiting on it from the command line (it must
        // ride out every restart) watches before the import starts: its Jobs.Watch is the hub's
        // second subscription. Then the file is sent, as squasherctl import does.
        let write = try BlockingVarlinkClient(path: directory + "/run/squasherd-write.sock")
        let jobID = try write.call(
            "io.bugsquasher.Import.Begin", BeginImportParameters(name: "input.ndjson", format: nil, chunkSize: nil),
            as: JobParameter.self
        ).job
        let waiter = try ChildProcess(
            name: "jobs --wait", executable: Products.squasherctl, arguments: ["jobs", jobID, "--wait"],
            environment: environment)
        try await waitForSubscriptions(2, on: directory + "/run/squasherd.sock", startedBy: waiter)
        let file = [UInt8](try Data(contentsOf: URL(filePath: directory + "/input.ndjson")))
        let uploaded = try write.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: jobID)) { connection in
            for start in stride(from: 0, to: file.count, by: 1 << 20) {
                let piece = file[start..<min(start + (1 << 20), file.count)]
                try (UploadFraming.header(piece.count) + piece).withUnsafeBytes { try connection.send($0) }
            }
            try UploadFraming.header(0).withUnsafeBytes { try connection.send($0) }
            return try connection.receiveReply().parameters(UploadReply.self)
        }
        #expect(uploaded.bytes == Int64(file.count))

        var generator = SystemRandomNumberGenerator()
        for kill in 1...3 {
            // Follow the job's progress (one reply per commit) and strike a random 100–600
            // records after where it stood when the daemon came up, so that every kill lands
            // mid-import however fast the import runs.
            var start: Int64?
            var target: Int64 = 0
            var job: WireJob?
            try BlockingVarlinkClient(path: directory + "/run/squasherd.sock").stream(
                "io.bugsquasher.Jobs.Watch", JobParameter(job: jobID)
            ) { reply in
                let current = try reply.parameters(JobReply.self).job
                job = current
                if start == nil {
                    start = current.recordsRead
                    target = current.recordsRead + Int64.random(in: 100...600, using: &generator)
                }
                return current.recordsRead < target
            }
            #expect(
                job?.state == .running,
                "kill \(kill) came after the import ended (\(String(describing: job))); the test did not interrupt it")
            if kill == 2 {
                // SIGTERM mid-chunk: the chunk commits whole, the daemon exits 0, quickly.
                let asked = ContinuousClock.now
                daemon.signal(SIGTERM)
                let status = try? await daemon.waitForExit(timeout: .seconds(10))
                print("SIGTERM during the import: squasherd exited after \(ContinuousClock.now - asked)")
                // Its log says where a slow stop spent its time.
                #expect(
                    status == 0,
                    "squasherd did not exit 0 within 10 s of SIGTERM (\(status.map { "status \($0)" } ?? "still running")):\n\(daemon.errorOutput.suffix(3000))"
                )
                if status == nil { _ = try await daemon.waitForExit(timeout: .seconds(60)) }
            } else {
                daemon.signal(SIGKILL)
                _ = try await daemon.waitForExit()
            }
            daemon = try await startDaemon()
        }
        // The job resumes by itself after the last restart and finishes.
        let deadline = ContinuousClock.now + .seconds(120)
        var final: WireJob?
        while ContinuousClock.now < deadline {
            let status = try ChildProcess(
                name: "jobs", executable: Products.squasherctl, arguments: ["jobs", jobID, "--json"],
                environment: environment)
            _ = try await status.waitForExit()
            final = try? JSONDecoder().decode(JobReply.self, from: Data(status.output.joined().utf8)).job
            if final?.state == .finished { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let job = try #require(final, "squasherctl jobs \(jobID) --json printed no job")
        #expect(job.state == .finished, "\(job)")
        #expect(job.recordsRead == Int64(count))
        #expect(job.imported == Int64(count - 1))
        #expect(job.rejected == 1)
        // The waiter rode out the stops, reconnecting, and printed the job's summary.
        #expect(try await waiter.waitForExit() == 0, "\(waiter.errorOutput)")
        #expect(
            waiter.output.first?.hasPrefix(
                "job \(jobID) finished: \(count) read, \(count - 1) imported, 1 rejected in ") == true,
            "\(waiter.output)")
        // It watched before the first kill, so it lost squasherd at least once (kills closer
        // together than its 250 ms retry count once).
        #expect(
            waiter.errorOutput.contains("squasherctl: reconnected; job \(jobID) is running"), "\(waiter.errorOutput)")
        // The follower saw every committed change once, in token order. A follower that falls
        // more than eight saves behind gets them coalesced into one save with the newest token
        // (PROTOCOL.md, Backpressure), so the check is on changes: every object the import
        // inserted reached it as inserted exactly once, and tokens only grew, up to the last.
        let status = try ChildProcess(
            name: "status", executable: Products.squasherctl, arguments: ["status", "--json"], environment: environment)
        _ = try await status.waitForExit()
        let finalToken = try JSONDecoder().decode(StatusReply.self, from: Data(status.output.joined().utf8)).token
        _ = try await follower.waitForLine {
            $0.contains(#""token":\#(finalToken)"#) && $0.contains(#""event":"save""#)
        }
        follower.signal(SIGTERM)
        _ = try await follower.waitForExit()
        let saves = follower.output.compactMap { line -> WireSave? in
            guard let event = try? JSONDecoder().decode(SubscribeReply.self, from: Data(line.utf8)),
                event.event == "save"
            else { return nil }
            return event.save
        }
        let tokens = saves.map(\.token)
        #expect(
            tokens.last == finalToken && zip(tokens, tokens.dropFirst()).allSatisfy(<),
            "the follower's tokens went back or stopped short of \(finalToken): \(tokens); its messages: \(follower.errorOutput)"
        )
        var insertions: [String: Int] = [:]
        for save in saves {
            for change in save.inserted {
                insertions[change.id, default: 0] += 1
            }
        }
        func inserted(_ entity: String) -> Int { insertions.keys.count { $0.contains("/\(entity)/") } }
        #expect(
            insertions.values.allSatisfy { $0 == 1 },
            "objects inserted twice: \(insertions.filter { $0.value > 1 }.keys.prefix(10))")
        daemon.signal(SIGTERM)
        #expect(try await daemon.waitForExit() == 0)

        let store = directory + "/state/bugs.sqlite"
        #expect(try await sqlite(store, "PRAGMA integrity_check") == ["ok"])
        #expect(
            try await sqlite(store, "SELECT count(*), count(DISTINCT key) FROM Bug") == ["\(count - 1)|\(count - 1)"])
        #expect(try await sqlite(store, "SELECT count(*) FROM ImportReject") == ["1"])
        #expect(try await sqlite(store, "SELECT line FROM ImportReject") == ["100"])
        let history = try await sqlite(store, "SELECT count(*) = max(token) - min(token) + 1 FROM bs_history")
        #expect(history == ["1"], "the history has a gap")
        // Every comment once too.
        let comments = SampleIssues.generate(count: count).enumerated().filter { $0.offset != 99 }.reduce(0) {
            $0 + $1.element.comments.count
        }
        #expect(try await sqlite(store, "SELECT count(*) FROM Comment") == ["\(comments)"])
        #expect(
            inserted("Bug") == count - 1 && inserted("Comment") == comments,
            "the follower saw \(inserted("Bug")) bugs and \(inserted("Comment")) comments inserted; the store has \(count - 1) and \(comments)"
        )
    }
}
