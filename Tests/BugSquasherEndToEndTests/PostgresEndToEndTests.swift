import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Synchronization
import Testing

/// squasherd with `store = postgresql://…`, on the server scripts/test.sh starts.
@Suite("End to end: squasherd on PostgreSQL", .serialized, .dropsPostgresSchemas)
struct PostgresEndToEndTests {
    /// The store line of a configuration: a schema of its own on the test server; `nil` when
    /// no server was given.
    private func storeLine() -> String? {
        TestPostgres.url(schemaPrefix: "e2e").map { "store = \($0)\n" }
    }

    /// Runs `sql` on the test server with psql, as its superuser (``TestPostgres/psql(_:)``).
    private func psql(_ sql: String) async throws -> [String]? { try await TestPostgres.psql(sql) }

    /// A store URL (a schema of its own) whose server's socket is looked for in `directory`, made
    /// here: a daemon given it reaches the server only while ``SocketLink/link`` is there, made
    /// with ``SocketLink/make()`` and removed to put the server out of that daemon's reach alone.
    /// `nil`, said, when the test server is not on a Unix socket.
    private func serverThroughLink(in directory: String) throws -> (url: String, link: SocketLink)? {
        guard let server = TestPostgres.server, var components = URLComponents(string: server),
            let socketDirectory = components.queryItems?.first(where: { $0.name == "host" })?.value,
            socketDirectory.hasPrefix("/")
        else {
            print("skipped: BUGSQUASHER_POSTGRES_URL is not set to a Unix socket (scripts/test.sh starts a server)")
            return nil
        }
        let socket = ".s.PGSQL.\(components.queryItems?.first(where: { $0.name == "port" })?.value ?? "5432")"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        components.queryItems =
            (components.queryItems ?? []).filter { $0.name != "host" } + [
                URLQueryItem(name: "host", value: directory),
                URLQueryItem(name: "schema", value: TestPostgres.newSchema(prefix: "e2e")),
            ]
        return (components.string!, SocketLink(link: "\(directory)/\(socket)", target: "\(socketDirectory)/\(socket)"))
    }

    /// A link to the test server's socket, in a directory a daemon looks for it in.
    private struct SocketLink {
        let link: String
        let target: String
        func make() throws { try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target) }
        func remove() throws { try FileManager.default.removeItem(atPath: link) }
    }

    /// Starts an import of 4,000 records (keys `prefix`-1 …) through `daemon` and returns its job
    /// once it has imported some: a job running, for a test to interrupt.
    private func runningImport(on daemon: TestDaemon, prefix: String, title: String) async throws -> String {
        let records = try daemon.writeRecords("\(prefix).ndjson", count: 4_000, prefix: prefix, title: title)
        let job = try #require(try await daemon.ctl(["import", records.path]).last)
        _ = try await poll(for: .seconds(60)) {
            try daemon.status().activeJob.flatMap { $0.imported > 0 ? $0 : nil }
        }
        return job
    }

    /// The same behaviour as on SQLite: an import through squasherd, a subscriber refreshed by an
    /// edit, and the store still there after a restart.
    @Test("squasherd imports, edits and feeds subscribers from a PostgreSQL store")
    func importEditSubscribe() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(configuration: store) { squasherd in
            let records = try squasherd.writeRecords("pg.ndjson", count: 50, prefix: "PG", title: "on postgres")
            let imported = try await squasherd.ctl(["import", records.path, "--wait"])
            #expect(imported.joined().contains("50 read, 50 imported, 0 rejected"), "\(imported)")
            let subscriber = try squasherd.startSubscriber("subscriber", keys: ["PG-7"])
            _ = try await subscriber.waitForLine { $0.contains(#""event":"ready""#) }
            try await squasherd.ctl(["update", "PG-7", "title=edited"])
            _ = try await subscriber.waitForLine { $0.contains(#""event":"refresh""#) && $0.contains("edited") }
            subscriber.signal(SIGTERM)
            _ = try await subscriber.waitForExit()
            #expect(try await squasherd.stop() == 0)
            try await squasherd.restart()
            let status = try squasherd.status()
            #expect(status.bugs == 50)
            #expect(try squasherd.ids(of: "Bug", where: #"title == "edited""#).count == 1)
        }
    }

    /// Two daemons on one database, as on two hosts: a save through either reaches the other's
    /// subscribers, once, in token order.
    @Test("a subscriber on one daemon sees the saves made through another")
    func savesCrossDaemons() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(configuration: store) { first in
            try await withDaemon(configuration: store) { second in
                let records = try first.writeRecords("both.ndjson", count: 20, prefix: "X", title: "shared")
                try await first.ctl(["import", records.path, "--wait"])
                #expect(try second.status().bugs == 20)
                let subscriber = try second.startSubscriber("subscriber on the second", keys: ["X-3"])
                _ = try await subscriber.waitForLine { $0.contains(#""event":"ready""#) }
                try await first.ctl(["update", "X-3", "title=through the first"])
                _ = try await subscriber.waitForLine(timeout: .seconds(10)) {
                    $0.contains(#""event":"refresh""#) && $0.contains("through the first")
                }
                // The watch follows both daemons' saves, in token order.
                let watch = try second.startCtl("watch on the second", ["watch"])
                let subscribed = try await watch.waitForLine { $0.hasPrefix("subscribed at token") }.line
                let token = try #require(Int(subscribed.split(separator: " ").last ?? ""))
                try await first.ctl(["update", "X-4", "title=watched"])
                try await second.ctl(["update", "X-5", "title=watched too"])
                _ = try await watch.waitForLine(timeout: .seconds(10)) { $0.hasPrefix("token \(token + 2):") }
                #expect(
                    watch.output.filter { $0.hasPrefix("token ") }
                        == [
                            "token \(token + 1): 0 inserted, 1 updated, 0 deleted",
                            "token \(token + 2): 0 inserted, 1 updated, 0 deleted",
                        ],
                    "\(watch.output)")
                subscriber.signal(SIGTERM)
                watch.signal(SIGTERM)
                _ = try await subscriber.waitForExit()
                _ = try await watch.waitForExit()
            }
        }
    }

    /// Another daemon's import, in chunks of 1,250 (saves that reach this daemon without values),
    /// brings a subscriber waiting for two keys those two inserts, with their values, and no
    /// other: the server screens the chunks' inserts against the daemon's watches.
    @Test("a subscriber waiting for keys gets only their inserts from another daemon's import")
    func othersInsertsScreened() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(chunkSize: 1_250, configuration: store) { first in
            try await withDaemon(configuration: store) { second in
                let records = try first.writeRecords("many.ndjson", count: 2_500, prefix: "S", title: "imported")
                let last = try first.writeRecords("last.ndjson", count: 1, prefix: "END", title: "last")
                let received = Mutex<[WireObjectChange]>([])
                let subscribed = Mutex(false)
                let feed = Thread {
                    try? BlockingVarlinkClient(path: second.readSocket).stream(
                        "io.bugsquasher.Changes.Subscribe",
                        SubscribeParameters(
                            registeredOnly: true, includeValues: true, insertsOf: "Bug",
                            insertsMatching: #"key IN ("S-1500", "END-1")"#)
                    ) { reply in
                        let answer = try reply.parameters(SubscribeReply.self)
                        if answer.event == "subscribed" { subscribed.withLock { $0 = true } }
                        let inserted = answer.save?.inserted ?? []
                        received.withLock { $0 += inserted }
                        return !inserted.contains { $0.values?["key"] == .string("END-1") }
                    }
                }
                feed.start()
                let deadline = ContinuousClock.now + .seconds(10)
                while !subscribed.withLock({ $0 }), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await first.ctl(["import", records.path, "--wait"])
                try await first.ctl(["import", last.path, "--wait"])
                let arrived = ContinuousClock.now + .seconds(20)
                while !received.withLock({ $0.contains { $0.values?["key"] == .string("END-1") } }),
                    ContinuousClock.now < arrived
                {
                    try await Task.sleep(for: .milliseconds(20))
                }
                let keys = received.withLock { $0.map { $0.values?["key"] } }
                #expect(keys == [.string("S-1500"), .string("END-1")], "\(keys)")
                #expect(received.withLock { $0.first?.values?["title"] } == .string("imported 1500"))
            }
        }
    }

    /// A subscriber replaying the history (`since`) while another daemon prunes it: the saves
    /// not sent yet are gone, and the replay ends in a `resync` (historyExpired) instead of going
    /// on past them. The subscriber reads nothing until the pruning is done, so that the replay,
    /// larger than the socket's buffers, is still running then.
    @Test("a replay the history is pruned under ends in a resync, never skips", .timeLimit(.minutes(3)))
    func replayPrunedUnderneath() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(chunkSize: 250, configuration: store) { first in
            let since = try first.status().token
            let records = try first.writeRecords("many.ndjson", count: 10_000, prefix: "P", title: "pruned")
            try await first.ctl(["import", records.path, "--wait"])
            let newest = try first.status().token
            let subscribed = Mutex(false)
            let gate = DispatchSemaphore(value: 0)
            let reading = Task {
                try await onOwnThread { () -> [SubscribeReply] in
                    var replies: [SubscribeReply] = []
                    try BlockingVarlinkClient(path: first.readSocket).stream(
                        "io.bugsquasher.Changes.Subscribe", SubscribeParameters(since: since)
                    ) { reply in
                        let event = try reply.parameters(SubscribeReply.self)
                        if replies.isEmpty {
                            subscribed.withLock { $0 = true }
                            gate.wait()
                        }
                        replies.append(event)
                        return event.event != "resync" && event.token < newest
                    }
                    return replies
                }
            }
            #expect(
                try await poll(for: .seconds(30)) { subscribed.withLock { $0 } ? true : nil }
                    == true)
            // A daemon that keeps one save prunes the rest as it starts.
            try await withDaemon(configuration: store + "history_retention_saves = 1\n") { second in
                let pruned = try await poll(for: .seconds(30)) { () -> Bool? in
                    let error = try second.refusal("io.bugsquasher.Changes.History", HistoryParameters(after: since))
                    return error.name == "io.bugsquasher.Changes.HistoryExpired" ? true : nil
                }
                #expect(pruned == true)
            }
            gate.signal()
            let replies = try await reading.value
            let saves = replies.filter { $0.event == "save" }.map(\.token)
            #expect(saves == Array(since + 1..<since + 1 + Int64(saves.count)), "tokens \(saves)")
            #expect(Int64(saves.count) < newest - since, "the replay ended before the pruning")
            #expect(replies.last?.event == "resync" && replies.last?.reason == ResyncReason.historyExpired)
        }
    }

    /// A job belongs to the daemon that spooled its input: killed mid-import, that daemon resumes
    /// it at its next start; the other daemon, restarted meanwhile, neither runs nor fails it, and
    /// refuses to abort it, naming the owner. Both are listed in `status`.
    @Test("a daemon killed mid-import resumes its job; the other leaves it alone")
    func jobsBelongToTheirDaemon() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(chunkSize: 50, configuration: store) { first in
            try await withDaemon(configuration: store) { second in
                let (owner, other) = (try #require(first.status().daemon), try #require(second.status().daemon))
                #expect(owner != other)
                #expect(Set(try second.status().daemons?.map(\.id) ?? []) == [owner, other])
                let job = try await runningImport(on: first, prefix: "K", title: "killed")
                first.process.signal(SIGKILL)
                _ = try await first.process.waitForExit()
                // The other daemon, started again while the owner is down, leaves the job as it is.
                #expect(try await second.stop() == 0)
                try await second.restart()
                let stranded: JobReply = try await second.ctlJSON(["jobs", job, "--json"])
                #expect(stranded.job.state == .running && stranded.job.daemon == owner, "\(stranded.job)")
                #expect(try second.status().activeJob == nil)
                let refusal = try await second.ctlError(["abort", job], expectStatus: 2)
                #expect(refusal.contains("runs on daemon \(owner), not on this one (\(other))"), "\(refusal)")
                // Its owner resumes it.
                try await first.restart()
                let finished = try await poll(for: .seconds(120)) { () -> WireJob? in
                    let current = try second.call(
                        "io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self
                    ).job
                    return current.isFinal ? current : nil
                }
                #expect(finished?.state == .finished && finished?.imported == 4_000, "\(String(describing: finished))")
                #expect(try second.status().bugs == 4_000)
            }
        }
    }

    /// A host lost for good: its daemon stays listed as silent for a day, and its running
    /// import, spooled on that host, could never end. `forget` through another daemon takes it
    /// off the list and aborts the job; a daemon that answers, or this one, is refused. Should it
    /// come back, it is listed again and leaves the aborted job alone.
    @Test("a daemon gone for good is forgotten through another, and its jobs are aborted")
    func forgetLostDaemon() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(chunkSize: 50, configuration: store) { first in
            try await withDaemon(configuration: store) { second in
                let (lost, other) = (try #require(first.status().daemon), try #require(second.status().daemon))
                let job = try await runningImport(on: first, prefix: "L", title: "lost")
                let answering = try await second.ctlError(["forget", lost], expectStatus: 2)
                #expect(answering.contains("answers") && answering.contains("Stop it first"), "\(answering)")
                #expect(try await second.ctlError(["forget", other], expectStatus: 2).contains("is this one"))
                let refusedAbort = try await second.ctlError(["abort", job], expectStatus: 2)
                #expect(refusedAbort.contains("squasherctl forget \(lost)"), "\(refusedAbort)")
                first.process.signal(SIGKILL)
                _ = try await first.process.waitForExit()
                // Silent once no heartbeat came for 10 s.
                _ = try await poll(for: .seconds(60)) { () -> Bool? in
                    let daemon = try second.status().daemons?.first { $0.id == lost }
                    return (daemon?.silentSeconds ?? 0) > 10.5 ? true : nil
                }
                let forgot = try await second.ctl(["forget", lost]).joined(separator: "\n")
                #expect(
                    forgot.hasPrefix("forgot daemon \(lost) on ") && forgot.hasSuffix("; aborted its jobs: \(job)"),
                    "\(forgot)")
                #expect(try second.status().daemons?.map(\.id) == [other])
                let aborted = try second.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self).job
                #expect(aborted.state == .aborted && aborted.error?.contains("was forgotten") == true, "\(aborted)")
                #expect(try await second.ctlError(["forget", lost], expectStatus: 2).contains("no daemon \(lost)"))
                // Back after all: listed again, and the job stays aborted.
                try await first.restart()
                #expect(Set(try second.status().daemons?.map(\.id) ?? []) == [lost, other])
                #expect(try first.status().activeJob == nil)
                let after = try first.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self).job
                #expect(after.state == .aborted, "\(after)")
            }
        }
    }

    /// A state directory copied from a running daemon (a cloned VM, a copied directory) carries
    /// its daemon ID: the copy finds that ID still heartbeating, takes one of its own, and leaves
    /// the other daemon's running import alone instead of failing it for want of its spool.
    @Test("a daemon on a copy of a running daemon's state directory takes an ID of its own")
    func copiedStateDirectory() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(chunkSize: 50, configuration: store) { first in
            try await withDaemon(configuration: store) { second in
                let owner = try #require(first.status().daemon)
                let job = try await runningImport(on: first, prefix: "C", title: "copied")
                #expect(try await second.stop() == 0)
                for file in ["daemon-id", "daemon-id.origin"] {
                    let (from, to) = (first.directory + "/state/" + file, second.directory + "/state/" + file)
                    try? FileManager.default.removeItem(atPath: to)
                    try FileManager.default.copyItem(atPath: from, toPath: to)
                }
                try await second.restart()
                #expect(second.process.errorOutput.contains("takes an ID of its own"), "\(second.process.errorOutput)")
                let renewed = try #require(second.status().daemon)
                #expect(renewed != owner)
                #expect(Set(try second.status().daemons?.map(\.id) ?? []) == [owner, renewed])
                let finished = try await poll(for: .seconds(120)) { () -> WireJob? in
                    let current = try first.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self)
                        .job
                    return current.isFinal ? current : nil
                }
                #expect(finished?.state == .finished && finished?.imported == 4_000, "\(String(describing: finished))")
                // Started again, it keeps the ID it took.
                #expect(try await second.stop() == 0)
                try await second.restart()
                #expect(try second.status().daemon == renewed)
            }
        }
    }

    /// Two daemons (two writer processes) committing at once, edits through both in parallel: the
    /// history has every token from the first to the last once, and a watcher on either daemon
    /// sees them in increasing order.
    /// Sixteen writers on their own connections, half through each daemon: edits that arrive
    /// together commit as one save (docs/DESIGN-NOTES.md, "Edits that arrive together commit
    /// together"), so the 160 edits take at most 160 tokens; none is lost, and the history and a
    /// subscriber see the tokens without a gap, in order.
    @Test("tokens stay gapless with two daemons committing at once")
    func gaplessAcrossDaemons() async throws {
        guard let store = storeLine() else { return }
        try await withDaemon(configuration: store) { first in
            try await withDaemon(configuration: store) { second in
                let (writers, edits) = (16, 10)
                let records = try first.writeRecords("w.ndjson", count: writers, prefix: "W", title: "written")
                try await first.ctl(["import", records.path, "--wait"])
                let ids = try (1...writers).map {
                    try #require(try first.ids(of: "Bug", where: #"key == "W-\#($0)""#).first)
                }
                let before = try first.rows(of: "Bug", where: #"key BEGINSWITH "W-""#)
                let start = try first.status().token
                let watch = try second.startCtl("watch", ["watch", "--json"])
                _ = try await watch.waitForLine { $0.contains(#""event":"subscribed""#) }
                let replies = try await withThrowingTaskGroup(of: [UpdateReply].self) { group in
                    for writer in 0..<writers {
                        group.addTask {
                            let daemon = writer % 2 == 0 ? first : second
                            return try await Task.detached {
                                try (1...edits).map { n in
                                    try daemon.call(
                                        "io.bugsquasher.Import.Update",
                                        UpdateParameters(id: ids[writer], values: ["title": .string("edit \(n)")]),
                                        as: UpdateReply.self, on: .write)
                                }
                            }.value
                        }
                    }
                    return try await group.reduce(into: []) { $0 += $1 }
                }
                let end = try second.status().token
                #expect(end > start && end <= start + Int64(writers * edits), "\(start) → \(end)")
                #expect(Set(replies.map(\.token)).count == Int(end - start))
                // Every edit applied, each a version of its own.
                let after = try second.rows(of: "Bug", where: #"key BEGINSWITH "W-""#)
                #expect(after.count == writers && after.allSatisfy { $0.values["title"] == .string("edit \(edits)") })
                let versions = Dictionary(uniqueKeysWithValues: before.map { ($0.id, $0.version) })
                #expect(after.allSatisfy { $0.version == versions[$0.id]! + Int64(edits) })
                var tokens: [Int64] = []
                var next = start
                while next < end {
                    let page = try second.call(
                        "io.bugsquasher.Changes.History", HistoryParameters(after: next), as: HistoryReply.self)
                    tokens += page.saves.map(\.token)
                    next = page.saves.last?.token ?? end
                }
                #expect(tokens == Array((start + 1)...end))
                // Each daemon counted its 80 edits, in at least one batch and at most one each.
                for daemon in [first, second] {
                    let text = try await daemon.ctl(["metrics"])
                    let (edited, batches) = (
                        Self.sample("squasherd_edits_total", in: text),
                        Self.sample("squasherd_edit_batches_total", in: text)
                    )
                    #expect(edited == Double(writers * edits / 2), "\(text)")
                    #expect((1...Double(writers * edits / 2)).contains(batches ?? 0), "\(text)")
                }
                _ = try await watch.waitForLine { $0.contains(#""token":\#(end)"#) && $0.contains(#""event":"save""#) }
                // The second daemon published every save up to `end` (its feed just sent it):
                // its metrics say so, with the database answering and both daemons attached.
                let text = try await second.ctl(["metrics"])
                #expect(Self.sample("squasherd_store_reachable", in: text) == 1, "\(text)")
                #expect(Self.sample("squasherd_history_behind_saves", in: text) == 0, "\(text)")
                #expect(Self.sample(#"squasherd_store_daemons{state="answering"}"#, in: text) == 2, "\(text)")
                #expect(Self.sample(#"squasherd_store_daemons{state="silent"}"#, in: text) == 0, "\(text)")
                #expect(Self.sample("squasherd_store_outages_total", in: text) == 0, "\(text)")
                // What only a store in a file has is not reported.
                #expect(
                    !text.contains { $0.contains("squasherd_store_size_bytes") || $0.contains("checkpoint") }, "\(text)"
                )
                watch.signal(SIGTERM)
                _ = try await watch.waitForExit()
                let seen = watch.output.compactMap { line in
                    (try? JSONDecoder().decode(SubscribeReply.self, from: Data(line.utf8))).flatMap {
                        $0.event == "save" ? $0.token : nil
                    }
                }
                #expect(zip(seen, seen.dropFirst()).allSatisfy(<) && seen.last == end, "\(seen)")
            }
        }
    }

    /// The value of one sample (a metric's name, with its labels if it has any) in the lines of
    /// `squasherctl metrics`.
    private static func sample(_ name: String, in lines: [String]) -> Double? {
        lines.first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// A daemon started before its database (at boot, on another host) waits for it, says so,
    /// and serves once it answers, instead of exiting and spending the restarts systemd allows;
    /// a stop asked for while it waits ends it at once, as no failure.
    @Test("squasherd started before its database waits for it, and serves once it answers")
    func waitsForTheDatabase() async throws {
        let directory = "/tmp/bse2e-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The daemon looks for the server's socket in a directory of its own, empty until the
        // server "comes up" there.
        guard let (url, socket) = try serverThroughLink(in: directory + "/pg") else { return }
        try "store = \(url)\nstore_wait = 120\n".write(
            toFile: directory + "/squasherd.conf", atomically: true, encoding: .utf8)
        func start() throws -> ChildProcess {
            try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: [
                    "--config", directory + "/squasherd.conf", "--state-directory", directory + "/state",
                    "--runtime-directory", directory + "/run",
                ])
        }
        let waiting = try start()
        try await waiting.waitForErrorOutput(containing: "waiting for PostgreSQL, which cannot be reached")
        // The missing socket is named, and what its absence means.
        #expect(
            waiting.errorOutput.contains(socket.link)
                && waiting.errorOutput.contains("no socket there: the server is not running"),
            "\(waiting.errorOutput)")
        // Asked to stop while it waits: it ends at once, with status 0.
        waiting.signal(SIGTERM)
        #expect(try await waiting.waitForExit(timeout: .seconds(10)) == 0)
        #expect(waiting.errorOutput.contains("stopped while waiting for the store"), "\(waiting.errorOutput)")

        let daemon = try start()
        try await daemon.waitForErrorOutput(containing: "waiting for PostgreSQL, which cannot be reached")
        #expect(daemon.exitStatus == nil)
        try socket.make()
        try await daemon.waitForErrorOutput(containing: "answers; starting")
        // It binds its sockets once the store is open.
        let bound = try await poll(for: .seconds(60)) {
            FileManager.default.fileExists(atPath: directory + "/run/squasherd.sock") ? true : nil
        }
        #expect(bound == true)
        let (code, status) = try await ChildProcess.squasherctlStatus(runtimeDirectory: directory + "/run")
        #expect(code == 0, "\(status.errorOutput)")
        daemon.signal(SIGTERM)
        #expect(try await daemon.waitForExit() == 0)
    }

    /// While squasherd cannot reach its database, a subscriber started is told so in words and
    /// exits 75 (try again later), as `get` and `list` do: squasherd answered, its store did not.
    /// An import followed then waits for the store, saying so, and ends with the job: the job
    /// goes on by itself.
    @Test("while the database is out of reach, subscribe exits 75 and a job's follower waits")
    func subscribeWhileUnreachable() async throws {
        let relay = "/tmp/bse2e-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: relay) }
        // The daemon reaches the server's socket through a link of its own, removed to put the
        // server out of its reach alone.
        guard try await psql("SELECT 1") != nil, let (url, socket) = try serverThroughLink(in: relay) else { return }
        try socket.make()
        try await withDaemon(configuration: "store = \(url)\n") { squasherd in
            let records = try squasherd.writeRecords("held.ndjson", count: 3, prefix: "HELD", title: "t")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let job = try await runningImport(on: squasherd, prefix: "AWAY", title: "t")
            try socket.remove()
            let ended = try await psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'squasherd[\(squasherd.process.pid)]'"
            )
            // Its sessions, the listener's among them.
            #expect((Int(ended?.first ?? "") ?? 0) >= 2, "\(String(describing: ended))")
            let subscriber = try squasherd.startCtl("subscriber", ["subscribe", "HELD-1"])
            #expect(try await subscriber.waitForExit(timeout: .seconds(30)) == 75, "\(subscriber.errorOutput)")
            #expect(subscriber.errorOutput.contains("cannot be reached"), "\(subscriber.errorOutput)")
            #expect(!subscriber.errorOutput.contains("(cause:"), "\(subscriber.errorOutput)")
            let follower = try squasherd.startCtl("follower", ["jobs", job, "--wait"])
            try await follower.waitForErrorOutput(containing: "squasherd cannot reach its store now")
            #expect(follower.exitStatus == nil, "\(follower.errorOutput)")
            try socket.make()
            #expect(try await follower.waitForExit(timeout: .seconds(120)) == 0, "\(follower.errorOutput)")
            #expect(
                follower.output.joined().contains("4000 read, 4000 imported, 0 rejected"), "\(follower.output)")
        }
    }

    /// A database that no longer holds the store a daemon opened — another store in its place,
    /// or none — would have the daemon hand out the new store's objects under the old one's IDs:
    /// it stops with status 1, saying what it found. Started again, it serves what the database
    /// holds now, and a watch that followed the old store is told that it is another.
    @Test("squasherd stops when its database holds another store, or none", .timeLimit(.minutes(2)))
    func storeReplacedUnderneath() async throws {
        guard let url = TestPostgres.url(schemaPrefix: "e2e"), try await psql("SELECT 1") != nil,
            let schema = URLComponents(string: url)?.queryItems?.first(where: { $0.name == "schema" })?.value
        else { return }
        try await withDaemon(configuration: "store = \(url)\n") { squasherd in
            let records = try squasherd.writeRecords("old.ndjson", count: 5, prefix: "OLD", title: "old")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let watch = try squasherd.startCtl("watch", ["watch"])
            _ = try await watch.waitForLine { $0.hasPrefix("subscribed at token") }
            let other = "00000000-0000-4000-8000-000000000001"
            _ = try await psql(
                "UPDATE \"\(schema)\".bs_metadata SET value = '\(other)' WHERE key = 'storeIdentifier'")
            #expect(try await squasherd.process.waitForExit(timeout: .seconds(30)) == 1)
            #expect(
                squasherd.process.errorOutput.contains("now holds another store (\(other))"),
                "\(squasherd.process.errorOutput.suffix(2000))")
            try await squasherd.restart()
            #expect(try squasherd.status().bugs == 5)
            #expect(try await watch.waitForExit(timeout: .seconds(30)) == 2)
            #expect(watch.errorOutput.contains("now serves another store (\(other))"), "\(watch.errorOutput)")
            _ = try await psql("DROP SCHEMA \"\(schema)\" CASCADE")
            #expect(try await squasherd.process.waitForExit(timeout: .seconds(30)) == 1)
            #expect(
                squasherd.process.errorOutput.contains("the store's tables are gone from the schema \(schema)"),
                "\(squasherd.process.errorOutput.suffix(2000))")
        }
    }

    @Test("a store line that is not a PostgreSQL URL is refused at start, naming the line")
    func badStoreLine() async throws {
        let directory = "/tmp/bse2e-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try "store = mysql://x@y/z\n".write(toFile: directory + "/squasherd.conf", atomically: true, encoding: .utf8)
        let daemon = try ChildProcess(
            name: "squasherd", executable: Products.squasherd,
            arguments: [
                "--config", directory + "/squasherd.conf", "--state-directory", directory + "/state",
                "--runtime-directory", directory + "/run",
            ])
        #expect(try await daemon.waitForExit() != 0)
        #expect(
            daemon.errorOutput.contains("squasherd.conf:1: 'mysql://x@y/z' is not a PostgreSQL URL"),
            "\(daemon.errorOutput)")
    }
}
