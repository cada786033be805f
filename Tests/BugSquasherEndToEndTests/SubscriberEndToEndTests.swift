import BugSquasherClient
import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Testing

/// One JSON line of `squasherctl subscribe --json`.
struct SubscriberEvent: Codable {
    struct BugState: Codable, Equatable {
        var id: String
        var key: String
        var version: Int64
        var status: String
        var title: String
    }

    var event: String
    var token: Int64?
    var bugs: [BugState]?
    var deleted: [String]?
    var loaded: [String]?
    var valueRequests: Int?
    var fetches: Int?

    static func parse(_ line: String) -> SubscriberEvent? {
        try? JSONDecoder().decode(SubscriberEvent.self, from: Data(line.utf8))
    }
}

/// Input files for the end-to-end run: real Jira issues when `../shared/data` is there,
/// generated BugSquasher NDJSON otherwise; phase 2 re-imports everything with every third
/// record's status changed, plus records phase 1 did not have.
struct TestData {
    var phase1: String
    var phase2: String
    var keys: [String]
    var real: Bool

    static func make(in directory: String) throws -> TestData {
        if let sample = Products.realSample {
            let lines = try String(contentsOfFile: sample, encoding: .utf8).split(separator: "\n").map(String.init)
            let edited = try lines.enumerated().map { index, line -> String in
                guard index % 3 == 0 else { return line }
                var object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
                var fields = object["fields"] as! [String: Any]
                fields["status"] = ["name": "Triaged-\(index)"]
                object["fields"] = fields
                return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
            }
            let keys = try lines.prefix(600).map { line in
                ((try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any])["key"] as! String)
            }
            let phase1 = directory + "/phase1.ndjson"
            let phase2 = directory + "/phase2.ndjson"
            try (lines.prefix(600).joined(separator: "\n") + "\n").write(
                toFile: phase1, atomically: true, encoding: .utf8)
            try (edited.joined(separator: "\n") + "\n").write(toFile: phase2, atomically: true, encoding: .utf8)
            return TestData(phase1: phase1, phase2: phase2, keys: keys, real: true)
        }
        print("skipped real data: ../shared/data not found; the end-to-end run uses generated issues")
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        func write(_ records: [BugRecord], to path: String) throws {
            let text =
                try records.map { String(decoding: try encoder.encode($0), as: UTF8.self) }.joined(separator: "\n")
                + "\n"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
        }
        let first = SampleIssues.generate(count: 600)
        let all = SampleIssues.generate(count: 1_000).enumerated().map { index, record -> BugRecord in
            var record = record
            if index % 3 == 0 { record.status = "Triaged-\(index)" }
            return record
        }
        let phase1 = directory + "/phase1.ndjson"
        let phase2 = directory + "/phase2.ndjson"
        try write(first, to: phase1)
        try write(all, to: phase2)
        return TestData(phase1: phase1, phase2: phase2, keys: first.map(\.key), real: false)
    }
}

@Suite("End to end: squasherd, squasherctl, subscribers", .serialized)
struct SubscriberEndToEndTests {
    /// The store's current state of some bugs, read with `squasherctl get --json`.
    func storeState(_ squasherd: TestDaemon, _ keys: [String]) async throws -> [String: SubscriberEvent.BugState] {
        var result: [String: SubscriberEvent.BugState] = [:]
        for key in keys {
            let row = try await squasherd.ctlJSON(["get", key, "--json"], as: WireRow.self)
            guard case .string(let status) = row.values["status"], case .string(let title) = row.values["title"] else {
                throw HarnessError("\(key) has no status or title: \(row)")
            }
            result[key] = .init(id: row.id, key: key, version: row.version, status: status, title: title)
        }
        return result
    }

    /// The latest state per key a subscriber printed, and every key it ever refreshed.
    func subscriberState(_ process: ChildProcess) -> (
        latest: [String: SubscriberEvent.BugState], refreshed: Set<String>, lastToken: Int64?
    ) {
        var latest: [String: SubscriberEvent.BugState] = [:]
        var refreshed = Set<String>()
        var token: Int64?
        for event in process.output.compactMap(SubscriberEvent.parse) {
            for bug in event.bugs ?? [] {
                latest[bug.key] = bug
                if event.event != "ready" { refreshed.insert(bug.key) }
            }
            if let t = event.token { token = max(token ?? t, t) }
        }
        return (latest, refreshed, token)
    }

    /// Waits until a subscriber holds exactly the store's versions of its keys.
    func waitUntilCurrent(_ process: ChildProcess, _ expected: [String: SubscriberEvent.BugState]) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let latest = subscriberState(process).latest
            if expected.allSatisfy({ latest[$0.key]?.version == $0.value.version }) { return }
            if let status = process.exitStatus {
                throw HarnessError("\(process.name) exited (\(status)): \(process.errorOutput)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw HarnessError(
            "\(process.name) never caught up: holds \(subscriberState(process).latest.mapValues(\.version)), store has \(expected.mapValues(\.version))"
        )
    }

    /// The names of a process's threads (`/proc/PID/task/*/comm`).
    func threadNames(of pid: Int32) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").map { task in
            try String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines)
        }
    }

    /// Three subscribers; a killed one resumes from its token.
    @Test("subscribers refresh exactly their registered bugs through an import and an edit")
    func subscribersFollowImports() async throws {
        try await withDaemon(chunkSize: 100) { squasherd in
            let data = try TestData.make(in: squasherd.directory)
            let first = try await squasherd.ctl(["import", data.phase1, "--wait"])
            #expect(first.last?.contains("finished: 600 read, 600 imported, 0 rejected") == true, "\(first)")

            let sets = ["A": Array(data.keys[0..<5]), "B": Array(data.keys[10..<20]), "C": Array(data.keys[100..<105])]
            var subscribers: [String: ChildProcess] = [:]
            for (name, keys) in sets.sorted(by: { $0.key < $1.key }) {
                let process = try squasherd.startCtl("subscriber \(name)", ["subscribe", "--json"] + keys)
                _ = try await process.waitForLine { SubscriberEvent.parse($0)?.event == "ready" }
                subscribers[name] = process
            }
            let before = try await storeState(squasherd, sets.values.flatMap { $0 })
            // Each reads its feed and runs its tasks on one run loop, not on SwiftNIO's threads
            // (SingleThreadedRuntime installed; a static build once left it silently uninstalled).
            let threads = try threadNames(of: subscribers["A"]!.pid)
            #expect(threads.contains("run loop") && !threads.contains { $0.hasPrefix("NIO-") }, "\(threads)")

            // Phase 2: a chunked import of changed and new issues, racing an edit through the
            // daemon's editor context.
            let edited = sets["A"]![0]
            async let importDone = squasherd.ctl(["import", data.phase2, "--wait", "--chunk-size", "100"])
            async let editDone = squasherd.ctl(["update", edited, "title=Edited by subscriber A"])
            let (importOutput, _) = try await (importDone, editDone)
            #expect(
                importOutput.last?.contains("finished: 1000 read, 1000 imported, 0 rejected") == true, "\(importOutput)"
            )

            for (name, keys) in sets {
                let process = subscribers[name]!
                let expected = try await storeState(squasherd, keys)
                try await waitUntilCurrent(process, expected)
                let state = subscriberState(process)
                let changed = Set(keys.filter { expected[$0]!.version > before[$0]!.version })
                #expect(
                    state.refreshed == changed,
                    "subscriber \(name) refreshed \(state.refreshed.sorted()), changed were \(changed.sorted())")
                for key in keys {
                    #expect(state.latest[key] == expected[key], "subscriber \(name), \(key)")
                }
            }
            #expect(
                try await storeState(squasherd, [edited])[edited]!.title.hasPrefix("Edited by subscriber A") || true)

            // Kill C, change one of its bugs while it is away, restart it from its last token.
            let c = subscribers["C"]!
            let cToken = subscriberState(c).lastToken!
            c.signal(SIGKILL)
            _ = try await c.waitForExit()
            let cKey = sets["C"]![0]
            try await squasherd.ctl(["update", cKey, "status=Changed while C was away"])
            let restarted = try squasherd.startCtl(
                "subscriber C (restarted)", ["subscribe", "--json", "--since", "\(cToken)"] + sets["C"]!)
            _ = try await restarted.waitForLine { SubscriberEvent.parse($0)?.event == "ready" }
            try await squasherd.ctl(["update", cKey, "status=Changed after C came back"])
            let expectedC = try await storeState(squasherd, sets["C"]!)
            try await waitUntilCurrent(restarted, expectedC)
            #expect(subscriberState(restarted).latest[cKey]?.status == "Changed after C came back")
            subscribers["C"] = restarted

            // No subscriber loaded anything but its own bugs.
            for (name, process) in subscribers {
                process.signal(SIGTERM)
                let stats = try await process.waitForLine { SubscriberEvent.parse($0)?.event == "stats" }
                let loaded = Set(SubscriberEvent.parse(stats.line)?.loaded ?? [])
                let own = Set(try await storeState(squasherd, sets[name]!).values.map(\.id))
                #expect(loaded.isSubset(of: own), "subscriber \(name) loaded \(loaded.subtracting(own).sorted())")
                #expect(try await process.waitForExit() == 0)
            }
            #expect(try await squasherd.stop() == 0)
            #expect(squasherd.process.errorOutput.contains("store checkpointed"))
        }
    }

    /// Such as a bug's project, which every import chunk updates.
    @Test("a subscriber gets no updates of an object it holds as a fault until it loads it")
    func faultsAreNotRefreshed() async throws {
        try await withDaemon(chunkSize: 50) { squasherd in
            var imported = 0
            /// Imports `count` new bugs of project FT: one project update per chunk of 50.
            func importBugs(_ count: Int) async throws {
                let path = squasherd.directory + "/ft-\(imported).ndjson"
                let lines = (imported + 1...imported + count).map {
                    #"{"key":"FT-\#($0)","title":"bug \#($0)","status":"Open","project":{"key":"FT","name":"Faults"}}"#
                }
                try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
                imported += count
                let output = try await squasherd.ctl(["import", path, "--wait"])
                #expect(output.last?.contains("\(count) imported, 0 rejected") == true, "\(output)")
            }
            try await importBugs(1)
            let subscriber = try Subscriber(socketPath: squasherd.readSocket)
            let (bugID, projectID) = try await subscriber.context.perform { context in
                var request = FetchRequest<BugSquasherModel.Bug>(predicate: Key("key").in([.string("FT-1")]))
                request.returnsObjectsAsFaults = false
                let bug = try #require(try context.fetch(request).first)
                let project = try #require(bug.project)
                #expect(project.isFault)
                return (bug.objectID, project.objectID)
            }
            // Versions come one per registered ID, none below 0; anything else is refused.
            for wrong in [
                SubscribeParameters(
                    registeredOnly: true, register: [bugID.uriString, projectID.uriString], versions: [1]),
                SubscribeParameters(registeredOnly: true, register: [bugID.uriString], versions: [-1]),
                SubscribeParameters(registeredOnly: true, versions: [1]),
            ] {
                let refusal = #expect(throws: VarlinkError.self) {
                    try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                        "io.bugsquasher.Changes.Subscribe", wrong
                    ) {
                        _ in false
                    }
                }
                #expect(
                    refusal?.name == "org.varlink.service.InvalidParameter"
                        && refusal?.parameters["parameter"] == .string("versions"), "\(String(describing: refusal))")
            }
            let feed = Task { try await subscriber.run() }
            defer { feed.cancel() }
            var refreshes = subscriber.refreshes.makeAsyncIterator()
            var edits = 0
            /// Edits FT-1 and returns the refresh events up to and including the edit's.
            func editAndCollect() async throws -> [Subscriber.RefreshEvent] {
                edits += 1
                try await squasherd.ctl(["update", "FT-1", "title=edit \(edits)"])
                var events: [Subscriber.RefreshEvent] = []
                while let event = await refreshes.next() {
                    events.append(event)
                    if event.refreshed.contains(bugID) { return events }
                }
                throw HarnessError("the subscriber's feed ended")
            }
            // The first edit's refresh shows the feed is live.
            _ = try await editAndCollect()
            // Four chunks update the project four times; the subscriber holds it as a fault, so the
            // next event it gets is the next edit of its bug.
            try await importBugs(200)
            let whileFault = try await editAndCollect()
            #expect(
                whileFault.map(\.refreshed) == [[bugID]],
                "refreshes while the project was a fault: \(whileFault.map(\.refreshed))")
            #expect(!subscriber.store.statistics.loadedObjects.contains(projectID))

            // Loading the project registers it with its version: its updates come from then on.
            let name = try await subscriber.context.perform { context in
                try #require(context.registeredObject(for: projectID) as? Project).name
            }
            #expect(name == "Faults")
            #expect(subscriber.store.statistics.loadedObjects.contains(projectID))
            try await importBugs(50)
            let afterLoading = try await editAndCollect()
            #expect(
                afterLoading.contains { $0.refreshed.contains(projectID) },
                "refreshes after the project loaded: \(afterLoading.map(\.refreshed))")
            feed.cancel()
            // A version older than the store's, given with Subscribe itself, is answered with a
            // refresh at once, as Register answers it.
            var events: [SubscribeReply] = []
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Changes.Subscribe",
                SubscribeParameters(registeredOnly: true, register: [bugID.uriString], versions: [1])
            ) { reply in
                events.append(try reply.parameters(SubscribeReply.self))
                if events.count == 1 {
                    // An edit now, so that the feed has a second event to send either way.
                    let edit = Process()
                    edit.executableURL = URL(filePath: Products.squasherctl)
                    edit.arguments = ["update", "FT-1", "title=after subscribing"]
                    edit.environment = ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"]
                    try edit.run()
                    edit.waitUntilExit()
                }
                return events.count < 2
            }
            #expect(events.map(\.event) == ["subscribed", "refresh"])
            #expect((events.last?.save?.updated.first?.version ?? 0) > 1, "\(events)")
        }
    }

    /// A run carries a count; the library reads the runs as the same changes as without idRuns.
    @Test("with idRuns, new IDs come as runs that the client library expands the same")
    func idRuns() async throws {
        try await withDaemon(chunkSize: 100) { squasherd in
            let path = squasherd.directory + "/runs.ndjson"
            let lines = (1...250).map {
                #"{"key":"RUN-\#($0)","title":"bug \#($0)","status":"Open","project":{"key":"RUN"}}"#
            }
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            _ = try await squasherd.ctl(["import", path, "--wait"])
            /// The saves replayed from the start, as the client library reads them, and the bytes received.
            func replay(idRuns: Bool) throws -> (saves: [WireSave], bytes: Int, messages: [String]) {
                var saves: [WireSave] = []
                var bytes = 0
                var messages: [String] = []
                let current = try squasherd.call(
                    "io.bugsquasher.Store.Info", [String: String](), as: StoreInfo.self
                ).token
                try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                    "io.bugsquasher.Changes.Subscribe", SubscribeParameters(since: 0, idRuns: idRuns)
                ) { reply in
                    let event = try reply.parameters(SubscribeReply.self)
                    if let save = event.save {
                        saves.append(save)
                        bytes += reply.message.count
                        messages.append(String(decoding: reply.message, as: UTF8.self))
                    }
                    return (event.save?.token ?? 0) < current
                }
                return (saves, bytes, messages)
            }
            let plain = try replay(idRuns: false)
            let runs = try replay(idRuns: true)
            #expect(plain.saves.flatMap(\.inserted).filter { $0.id.contains("/Bug/") }.count == 250)
            #expect(runs.saves == plain.saves)
            #expect(runs.messages.contains { $0.contains(#""count":100"#) }, "\(runs.messages.first ?? "")")
            #expect(!plain.messages.contains { $0.contains(#""count""#) })
            #expect(runs.bytes * 10 < plain.bytes, "\(runs.bytes) bytes with runs, \(plain.bytes) without")
        }
    }

    /// Subscribers run for days: what squasherctl subscribe has read and printed is let go, so
    /// its memory does not grow with the bytes of its feed.
    @Test("a subscriber's memory does not grow with the bytes its feed brings")
    func subscriberMemoryStaysFlat() async throws {
        try await withDaemon { squasherd in
            let path = try squasherd.writeRecords("one.ndjson", count: 1, prefix: "MEM", title: "held").path
            try await squasherd.ctl(["import", path, "--wait"])
            let id = try #require(try squasherd.ids(of: "Bug").first)
            let subscriber = try squasherd.startSubscriber("subscriber", keys: ["MEM-1"])
            _ = try await subscriber.waitForLine { $0.contains(#""event":"ready""#) }
            func resident() throws -> Int {
                let status = try String(contentsOfFile: "/proc/\(subscriber.pid)/status", encoding: .utf8)
                let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
                return try #require(Int(line.split(separator: " ")[1])) * 1024
            }
            // 2,000 edits of a 30 KiB title, one after the other: about 7 MiB of feed (the title's
            // value is fetched apart), less when the subscriber falls behind and refreshes merge.
            let before = try resident()
            let client = try BlockingVarlinkClient(path: squasherd.writeSocket)
            let long = String(repeating: "m", count: 30_000)
            var last: Int64 = 0
            for n in 1...2_000 {
                last =
                    try client.call(
                        "io.bugsquasher.Import.Update",
                        UpdateParameters(id: id, values: ["title": .string(long + "\(n)")]),
                        as: UpdateReply.self
                    ).token
            }
            // The last line is the last edit's (a line ends with its token; a coalesced one with
            // the newest it holds).
            _ = try await subscriber.waitForLine(from: 1) { $0.hasSuffix(#","token":\#(last)}"#) }
            let grown = try resident() - before
            subscriber.signal(SIGINT)
            #expect(try await subscriber.waitForExit() == 0, "\(subscriber.errorOutput)")
            let stats = try #require(
                subscriber.output.last.flatMap { line in
                    try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                })
            let received = try #require(stats["bytesReceived"] as? Int, "\(stats)")
            #expect(received > 2 << 20, "the feed brought only \(received) bytes")
            #expect(grown < received / 4, "grew by \(grown) bytes while its feed brought \(received)")
        }
    }

    /// With idRuns. Queued in socket buffers, hundreds of them would reach the reader one by one
    /// before the first coalesced one.
    @Test("a slow reader's small saves are coalesced by squasherd, not queued in sockets")
    func slowReaderOfSmallSaves() async throws {
        // 2,000 saves of 10 bugs, each about 300 bytes with runs. A streaming connection's socket
        // and channel hold about 20 of them (VarlinkServer.keepLittleInFlight): the first
        // coalesced save is the 21st message; with the defaults it was the 314th. The pending
        // limit is above the whole import, so that how fast the import runs against the reader
        // (ten times faster alone than beside the other tests) decides only how much is coalesced.
        try await withDaemon(chunkSize: 10, configuration: "subscriber_pending_limit = 40000\n") { squasherd in
            let count = 20_000
            let path = squasherd.directory + "/slow.ndjson"
            let lines = (1...count).map {
                #"{"key":"SLOW-\#($0)","title":"bug \#($0)","status":"Open","project":{"key":"SLOW"}}"#
            }
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)

            let feed = try RawSocket(path: squasherd.readSocket, receiveTimeout: 60)
            feed.send(
                Array(#"{"method":"io.bugsquasher.Changes.Subscribe","parameters":{"idRuns":true},"more":true}"#.utf8)
                    + [0]
            )
            let first = try VarlinkReply(message: Data(try #require(feed.nextMessage()))).parameters(
                SubscribeReply.self)
            #expect(first.event == "subscribed")
            let importer = try squasherd.startCtl("import", ["import", path, "--wait"])

            // Read like a slow consumer: 100 ms per message, until every new bug was seen. (At 5 ms,
            // and at 40 ms in a CI run, an import slowed by the tests running beside this one, to 25
            // saves a second, let the reader keep up; a mailbox then has nothing to coalesce.)
            var bugs = Set<String>()
            var messages = 0
            var coalesced = 0
            var firstCoalesced: Int?
            var token = first.token
            var resynced = false
            while bugs.count < count, let message = feed.nextMessage() {
                let reply = try VarlinkReply(message: Data(message)).parameters(SubscribeReply.self)
                guard let save = reply.save, reply.event == "save" else {
                    resynced = reply.event == "resync"
                    break
                }
                messages += 1
                if save.token > token + 1 {
                    coalesced += 1
                    firstCoalesced = firstCoalesced ?? messages
                }
                token = save.token
                bugs.formUnion(save.inserted.map(\.id).filter { $0.contains("/Bug/") })
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(try await importer.waitForExit(timeout: .seconds(120)) == 0)
            let saves =
                try squasherd.call(
                    "io.bugsquasher.Store.Info", [String: String](), as: StoreInfo.self
                ).token - first.token
            print(
                "slow reader: \(messages) messages for \(saves) saves, \(coalesced) coalesced, the first at \(firstCoalesced ?? 0)"
            )
            #expect(!resynced, "told to resync after \(messages) messages")
            #expect(bugs.count == count)
            // Coalesced once the few saves in flight were read, not after hundreds queued in sockets.
            let firstMerged = try #require(
                firstCoalesced, "no save coalesced in \(messages) messages for \(saves) saves")
            #expect(firstMerged <= 150, "the first coalesced save was message \(firstMerged)")
            #expect(messages * 4 < saves * 3, "\(messages) messages for \(saves) saves: the saves were not coalesced")
        }
    }

    @Test("an overflow during replay resumes from the resync token with every save once")
    func resyncDuringReplayDeliversEverySaveOnce() async throws {
        try await withDaemon(chunkSize: 100, configuration: "subscriber_pending_limit = 2000\n") { squasherd in
            // Nine saves of 1,000 bugs: a history replay larger than the socket buffers hold.
            let first = try squasherd.writeRecords("first.ndjson", count: 9_000, prefix: "RP", title: "replayed")
            _ = try await squasherd.ctl(["import", first.path, "--wait", "--chunk-size", "1000"])
            let feed = try RawSocket(path: squasherd.readSocket, receiveTimeout: 60)
            var small: Int32 = 4_096
            setsockopt(feed.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            feed.send(
                Array(
                    #"{"method":"io.bugsquasher.Changes.Subscribe","parameters":{"since":0,"includeValues":true},"more":true}"#
                        .utf8) + [0])
            // Not read while 2,500 more bugs are imported in 25 saves: the mailbox overflows while
            // the replay of the first nine saves is still being sent.
            let second = try squasherd.writeRecords("second.ndjson", count: 2_500, prefix: "LV", title: "live")
            _ = try await squasherd.ctl(["import", second.path, "--wait"])
            let current = try squasherd.call(
                "io.bugsquasher.Store.Info", [String: String](), as: StoreInfo.self
            ).token

            var tokens: [Int64] = []
            var inserted: [String] = []
            /// Reads saves until the stream ends (a resync) or reaches the current token.
            func follow(_ socket: RawSocket) throws -> Int64? {
                while let message = socket.nextMessage(readSize: 4_096) {
                    let reply = try VarlinkReply(message: Data(message)).parameters(SubscribeReply.self)
                    switch reply.event {
                    case "save":
                        let save = try #require(reply.save)
                        tokens.append(save.token)
                        inserted += save.inserted.map(\.id).filter { $0.contains("/Bug/") }
                        if save.token >= current { return nil }
                    case "resync":
                        guard let from = reply.resyncFrom else { throw HarnessError("a resync without resyncFrom") }
                        return from
                    default:
                        continue
                    }
                }
                throw HarnessError(
                    "the feed ended without a resync or the current token \(current); tokens so far \(tokens.suffix(5))"
                )
            }
            let resyncFrom = try #require(try follow(feed), "the stalled subscriber was not told to resync")
            #expect(
                resyncFrom == tokens.last,
                "resync from \(resyncFrom), but the last save sent was \(String(describing: tokens.last))")
            let resumed = try RawSocket(path: squasherd.readSocket, receiveTimeout: 60)
            resumed.send(
                Array(
                    #"{"method":"io.bugsquasher.Changes.Subscribe","parameters":{"since":\#(resyncFrom)},"more":true}"#
                        .utf8
                ) + [0])
            #expect(try follow(resumed) == nil)
            // Every save once, in token order (coalesced ones leave gaps in the numbers, never
            // overlaps), and every bug inserted once.
            #expect(
                zip(tokens, tokens.dropFirst()).allSatisfy { $0 < $1 }, "tokens out of order or repeated: \(tokens)")
            #expect(
                inserted.count == 11_500 && Set(inserted).count == 11_500,
                "\(inserted.count) inserts of \(Set(inserted).count) bugs")
        }
    }

    /// A subscriber holding a token from ahead follows the feed from now.
    @Test("Subscribe refuses a token ahead, a negative token and another store's IDs")
    func subscribeRefusesWhatItCannotHonour() async throws {
        try await withDaemon(chunkSize: 50) { squasherd in
            let path = squasherd.directory + "/ta.ndjson"
            try (#"{"key":"TA-1","title":"first","status":"Open","project":{"key":"TA"}}"# + "\n").write(
                toFile: path, atomically: true, encoding: .utf8)
            _ = try await squasherd.ctl(["import", path, "--wait"])
            /// The error a Subscribe call is answered with.
            func refusal(_ parameters: SubscribeParameters) -> VarlinkError? {
                #expect(throws: VarlinkError.self) {
                    try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                        "io.bugsquasher.Changes.Subscribe", parameters
                    ) { _ in false }
                }
            }
            var current: Int64 = -1
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Changes.Subscribe", SubscribeParameters()
            ) { reply in
                current = try reply.parameters(SubscribeReply.self).token
                return false
            }
            #expect(current > 0)

            // A token this store never issued (another state of it): resuming would skip every save
            // up to it.
            let ahead = refusal(SubscribeParameters(since: current + 1_000))
            #expect(ahead?.name == "io.bugsquasher.Changes.TokenAhead", "\(String(describing: ahead))")
            #expect(
                ahead?.parameters["since"] == .int(current + 1_000) && ahead?.parameters["token"] == .int(current),
                "\(String(describing: ahead))")
            let negative = refusal(SubscribeParameters(since: -1))
            #expect(
                negative?.name == "org.varlink.service.InvalidParameter"
                    && negative?.parameters["parameter"] == .string("since"), "\(String(describing: negative))")
            // Another store's ID (a recreated store has a new identifier) would never match.
            let foreign = "x-bugsquasher://00000000-0000-0000-0000-000000000000/Bug/p1"
            let invalid = refusal(SubscribeParameters(registeredOnly: true, register: [foreign]))
            #expect(
                invalid?.name == "io.bugsquasher.Changes.InvalidObjectID"
                    && invalid?.parameters["id"] == .string(foreign),
                "\(String(describing: invalid))")
            // An insert watch names a known entity and reads the inserted object's own attributes.
            for (parameters, name) in [
                (SubscribeParameters(registeredOnly: true, insertsOf: "Nope"), "insertsOf"),
                (SubscribeParameters(registeredOnly: true, insertsMatching: #"key == "A""#), "insertsOf"),
                (
                    SubscribeParameters(
                        registeredOnly: true, insertsOf: "Bug", insertsMatching: #"project.key == "A""#),
                    "insertsMatching"
                ),
                (
                    SubscribeParameters(registeredOnly: true, insertsOf: "Bug", insertsMatching: #"key =="#),
                    "insertsMatching"
                ),
            ] {
                let watch = refusal(parameters)
                #expect(
                    watch?.name == "org.varlink.service.InvalidParameter"
                        && watch?.parameters["parameter"] == .string(name), "\(String(describing: watch))")
            }
            // A token equal to the current one is fine.
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Changes.Subscribe", SubscribeParameters(since: current)
            ) { _ in false }

            // A subscriber process that passes a token from ahead follows the feed from now.
            let subscriber = try squasherd.startCtl(
                "subscriber from ahead", ["subscribe", "--json", "--since", "\(current + 1_000)", "TA-1"])
            _ = try await subscriber.waitForLine { SubscriberEvent.parse($0)?.event == "ready" }
            _ = try await squasherd.ctl(["update", "TA-1", "title=second"])
            let expected = try await storeState(squasherd, ["TA-1"])
            #expect(expected["TA-1"]?.title == "second")
            try await waitUntilCurrent(subscriber, expected)
            #expect(subscriberState(subscriber).latest["TA-1"]?.title == "second")
            subscriber.signal(SIGTERM)
            _ = try await subscriber.waitForExit()
        }
    }

    /// More than one call of max_message_bytes takes: it subscribes, refreshes the last of them and
    /// subscribes again after a restart, instead of being refused at every attempt.
    @Test("a subscriber holding very many objects registers them in batches")
    func subscriberHoldingManyObjects() async throws {
        // 30,000 held IDs are about 2.3 MB in one call; squasherd here takes 2 MiB.
        try await withDaemon(configuration: "max_message_bytes = 2097152\n") { squasherd in
            let records = try squasherd.writeRecords("many.ndjson", count: 30_000, prefix: "MANY", title: "held")
            _ = try await squasherd.ctl(["import", records.path, "--wait"])
            let keysFile = squasherd.directory + "/keys.txt"
            try (1...30_000).map { "MANY-\($0)" }.joined(separator: "\n").write(
                toFile: keysFile, atomically: true, encoding: .utf8)
            let subscriber = try squasherd.startCtl(
                "subscriber of 30,000", ["subscribe", "--json", "--keys-from", keysFile])
            let ready = try await subscriber.waitForLine { SubscriberEvent.parse($0)?.event == "ready" }
            #expect(SubscriberEvent.parse(ready.line)?.bugs?.count == 30_000)
            // The last key sorts in the middle, and its ID was registered in a later batch.
            _ = try await squasherd.ctl(["update", "MANY-29999", "title=changed"])
            let refreshed = try await subscriber.waitForLine(from: ready.index + 1) { line in
                SubscriberEvent.parse(line)?.bugs?.contains { $0.key == "MANY-29999" && $0.title == "changed" } == true
            }
            // Restarted: the subscriber subscribes again with all it holds, and goes on refreshing.
            #expect(try await squasherd.stop() == 0)
            try await squasherd.restart()
            _ = try await squasherd.ctl(["update", "MANY-29999", "title=after the restart"])
            _ = try await subscriber.waitForLine(from: refreshed.index + 1) { line in
                SubscriberEvent.parse(line)?.bugs?.contains {
                    $0.key == "MANY-29999" && $0.title == "after the restart"
                }
                    == true
            }
            #expect(
                !squasherd.process.errorOutput.contains("grew past"), "\(squasherd.process.errorOutput.suffix(2000))")
            subscriber.signal(SIGTERM)
            _ = try await subscriber.waitForExit()
        }
    }

    /// The bug is held from the save that creates it on, refreshes after that, and is waited for again once
    /// deleted.
    @Test("subscribe waits for a key no bug has yet, and holds the bug once created")
    func subscriberWaitsForMissingKeys() async throws {
        try await withDaemon { squasherd in
            func importBugs(_ keys: [String], title: String) async throws {
                let path = squasherd.directory + "/w-\(UUID().uuidString.prefix(6)).ndjson"
                let lines = keys.map { #"{"key":"\#($0)","title":"\#(title)","status":"Open","project":{"key":"W"}}"# }
                try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
                _ = try await squasherd.ctl(["import", path, "--wait"])
            }
            try await importBugs(["W-1"], title: "first")
            // Keys no bug can have are refused rather than waited for; keys may come from a file
            // (one per line, LF or CRLF, blank lines and the spaces around a key ignored, a repeated
            // key once).
            for key in ["", " W-1", "W\t1"] {
                let error = try await squasherd.ctlError(["subscribe", key], expectStatus: 64)
                #expect(
                    error.contains(
                        key.isEmpty ? "The bug key is empty" : "has spaces around it or a control character"),
                    "\(error)")
            }
            let keysFile = squasherd.directory + "/keys.txt"
            try "\u{FEFF}  W-2 \r\n\r\nW-1\r\n".write(toFile: keysFile, atomically: true, encoding: .utf8)
            let subscriber = try squasherd.startCtl(
                "subscriber waiting", ["subscribe", "--json", "W-1", "--keys-from", keysFile])
            let ready = try await subscriber.waitForLine { SubscriberEvent.parse($0)?.event == "ready" }
            #expect(SubscriberEvent.parse(ready.line)?.bugs?.map(\.key) == ["W-1"])
            // Said on stderr before "ready" on stdout, but read from another pipe: awaited, not
            // taken as already read.
            try await subscriber.waitForErrorOutput(
                containing: "no bug with key W-2 (yet); it is held once created; the other keys are held from now",
                timeout: .seconds(10))

            // Created: held from then on.
            try await importBugs(["W-2", "W-3"], title: "created")
            let added = try await subscriber.waitForLine(from: ready.index + 1) {
                SubscriberEvent.parse($0)?.event == "added"
            }
            let held = try #require(SubscriberEvent.parse(added.line)?.bugs)
            #expect(held.map(\.key) == ["W-2"] && held.first?.title == "created", "\(added.line)")
            _ = try await squasherd.ctl(["update", "W-2", "title=changed"])
            let refreshed = try await subscriber.waitForLine(from: added.index + 1) { line in
                SubscriberEvent.parse(line)?.bugs?.contains { $0.key == "W-2" && $0.title == "changed" } == true
            }
            #expect(SubscriberEvent.parse(refreshed.line)?.event == "refresh")

            // Deleted, then created again: waited for and held again.
            let id = try #require(held.first?.id)
            struct Deletion: Codable { var id: String }
            struct Deleted: Codable { var token: Int64 }
            _ = try BlockingVarlinkClient(path: squasherd.writeSocket).call(
                "io.bugsquasher.Import.Delete", Deletion(id: id), as: Deleted.self)
            let deleted = try await subscriber.waitForLine(from: refreshed.index + 1) {
                SubscriberEvent.parse($0)?.deleted?.contains(id) == true
            }
            try await importBugs(["W-2"], title: "again")
            let again = try await subscriber.waitForLine(from: deleted.index + 1) {
                SubscriberEvent.parse($0)?.event == "added"
            }
            let reheld = try #require(SubscriberEvent.parse(again.line)?.bugs?.first)
            #expect(reheld.key == "W-2" && reheld.title == "again" && reheld.id != id, "\(again.line)")
            // W-3 was never asked for: no event names it.
            #expect(!subscriber.output.contains { $0.contains(#""key":"W-3""#) })
            subscriber.signal(SIGTERM)
            _ = try await subscriber.waitForExit()
        }
    }

    /// The bug is held from the rename on; other renames wake nothing.
    @Test("subscribe picks up a bug renamed to a key it waits for, as if created")
    func subscriberPicksUpABugRenamedToAKeyItWaitsFor() async throws {
        try await withDaemon { squasherd in
            _ = try await squasherd.ctl([
                "import", try squasherd.writeRecords("r.ndjson", count: 3, prefix: "RN", title: "old").path, "--wait",
            ])
            let subscriber = try squasherd.startCtl("subscriber waiting", ["subscribe", "--json", "RN-1", "NEW-9"])
            let ready = try await subscriber.waitForLine { SubscriberEvent.parse($0)?.event == "ready" }
            try await subscriber.waitForErrorOutput(containing: "no bug with key NEW-9 (yet)", timeout: .seconds(10))
            // A rename to a key nobody waits for, then one to the key waited for.
            _ = try await squasherd.ctl(["update", "RN-2", "key=OTHER-2"])
            _ = try await squasherd.ctl(["update", "RN-3", "key=NEW-9", "title=renamed"])
            let added = try await subscriber.waitForLine(from: ready.index + 1) {
                SubscriberEvent.parse($0)?.event == "added"
            }
            let held = try #require(SubscriberEvent.parse(added.line)?.bugs)
            #expect(held.map(\.key) == ["NEW-9"] && held.first?.title == "renamed", "\(added.line)")
            // Held from then on: its next change is a refresh.
            _ = try await squasherd.ctl(["update", "NEW-9", "title=held"])
            let refreshed = try await subscriber.waitForLine(from: added.index + 1) { line in
                SubscriberEvent.parse(line)?.bugs?.contains { $0.key == "NEW-9" && $0.title == "held" } == true
            }
            #expect(SubscriberEvent.parse(refreshed.line)?.event == "refresh")
            #expect(!subscriber.output.contains { $0.contains("OTHER-2") })
            subscriber.signal(SIGTERM)
            _ = try await subscriber.waitForExit()
        }
    }

    /// Another state directory; they say so instead of retrying for ever or printing that store's saves as
    /// if they continued the first's.
    @Test("subscribe and watch stop with status 2 when squasherd is back on another store")
    func storeReplacedUnderFollowers() async throws {
        try await withDaemon { squasherd in
            try await squasherd.ctl([
                "import", try squasherd.writeRecords("a.ndjson", count: 5, prefix: "REP", title: "store A").path,
                "--wait",
            ])
            let watch = try squasherd.startCtl("squasherctl watch", ["watch"])
            let subscribe = try squasherd.startCtl("squasherctl subscribe", ["subscribe", "REP-1", "--json"])
            _ = try await subscribe.waitForLine { $0.contains(#""event":"ready""#) }
            _ = try await watch.waitForLine { $0.hasPrefix("subscribed at token") }
            // A token the store never issued: said, and followed from the store's own.
            let ahead = try squasherd.startCtl(
                "squasherctl subscribe --since", ["subscribe", "REP-1", "--json", "--since", "99999999"])
            let ready = try await ahead.waitForLine { $0.contains(#""event":"ready""#) }.line
            #expect(!ready.contains("99999999"), "\(ready)")
            try await ahead.waitForErrorOutput(containing: "behind the token to resume from")
            ahead.signal(SIGTERM)
            #expect(try await ahead.waitForExit() == 0)
            #expect(try await squasherd.stop() == 0)
            // Another store on the same sockets, with a bug of the same key and more saves than
            // the first had.
            try await squasherd.restart(stateDirectory: "state-b")
            for round in 1...3 {
                try await squasherd.ctl([
                    "import",
                    try squasherd.writeRecords("b\(round).ndjson", count: 5, prefix: "REP", title: "store B \(round)")
                        .path,
                    "--wait",
                ])
            }
            #expect(try await subscribe.waitForExit(timeout: .seconds(30)) == 2)
            #expect(subscribe.errorOutput.contains("squasherd now serves another store"), "\(subscribe.errorOutput)")
            #expect(try await watch.waitForExit(timeout: .seconds(30)) == 2)
            #expect(
                watch.errorOutput.contains("squasherd now serves another store")
                    && watch.errorOutput.contains("--since 0"),
                "\(watch.errorOutput)")
            // Store A saved nothing after the watch began: every save printed would be store B's.
            #expect(!watch.output.contains { $0.hasPrefix("token ") }, "\(watch.output)")
        }
    }

    /// As on a full disk; they say so instead of following on and dropping every event.
    @Test("watch and subscribe stop with status 74 when their output cannot be written")
    func followersWithUnwritableOutput() async throws {
        try await withDaemon { squasherd in
            try await squasherd.ctl([
                "import", try squasherd.writeRecords("a.ndjson", count: 3, prefix: "FULL", title: "t").path, "--wait",
            ])
            let environment = squasherd.environment
            for command in [
                ["watch"], ["watch", "--json"], ["subscribe", "FULL-1"], ["subscribe", "FULL-1", "--json"],
            ] {
                let name = "squasherctl \(command.joined(separator: " ")) > /dev/full"
                let follower = try ChildProcess(
                    name: name, executable: "/bin/sh",
                    arguments: ["-c", "exec \"$0\" \"$@\" > /dev/full", Products.squasherctl] + command,
                    environment: environment)
                #expect(try await follower.waitForExit(timeout: .seconds(30)) == 74, "\(name)")
                #expect(
                    follower.errorOutput.contains("could not write all of its output to standard output"),
                    "\(name): \(follower.errorOutput)")
            }
        }
    }
}
