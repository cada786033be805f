import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Testing

@Suite("End to end: disk and file faults", .serialized)
struct FaultTests {
    func directory() throws -> String {
        let path = "/tmp/bsfault-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Starts squasherd on a state directory and expects it to refuse, with `message` logged.
    func expectRefusal(state: String, run: String, _ message: String) async throws {
        let daemon = try ChildProcess(
            name: "squasherd", executable: Products.squasherd,
            arguments: ["--state-directory", state, "--runtime-directory", run])
        #expect(try await daemon.waitForExit() == 1)
        #expect(daemon.errorOutput.contains(message), "\(daemon.errorOutput)")
    }

    /// Starts squasherd on `state` with the squasherd's sockets, expects `count` bugs whose rows
    /// show `title`, and stops it (exit 0).
    func expectStart(state: String, squasherd: TestDaemon, listing count: Int, titled title: String) async throws {
        let daemon = try ChildProcess(
            name: "squasherd", executable: Products.squasherd,
            arguments: ["--state-directory", state, "--runtime-directory", squasherd.directory + "/run"])
        try await daemon.waitForErrorOutput(containing: "ready")
        let listed = try await squasherd.ctl(["list", "--limit", "1000"])
        #expect(listed.filter { $0.contains(title) }.count == count, "\(listed.suffix(3))")
        daemon.signal(SIGTERM)
        #expect(try await daemon.waitForExit() == 0, "\(daemon.errorOutput)")
    }

    /// Imports 300 bugs titled "survives the rm", deletes `files` from the state directory while
    /// squasherd runs, and expects it to stop with status 1, logging `message` (given the state
    /// directory), and to leave a rescued copy there; returns the directory and the copy's name.
    func deleteWhileRunning(
        _ files: [String], squasherd: TestDaemon, prefix: String, logging message: (String) -> String
    ) async throws -> (state: String, rescued: String) {
        let records = try squasherd.writeRecords("kept.ndjson", count: 300, prefix: prefix, title: "survives the rm")
        try await squasherd.ctl(["import", records.path, "--wait"])
        let state = squasherd.directory + "/state"
        for file in files { try? FileManager.default.removeItem(atPath: state + "/" + file) }
        #expect(try await squasherd.process.waitForExit(timeout: .seconds(30)) == 1)
        #expect(squasherd.process.errorOutput.contains(message(state)), "\(squasherd.process.errorOutput)")
        let rescued = try #require(
            try FileManager.default.contentsOfDirectory(atPath: state).first { $0.hasPrefix("bugs.sqlite.rescued-") })
        return (state, rescued)
    }

    /// A store that is not a database, a truncated or emptied store, an incompatible model, an unusable
    /// directory and unusable socket paths.
    @Test("stores and paths that cannot be trusted are refused with a reason")
    func untrustedStores() async throws {
        let base = try directory()
        defer { try? FileManager.default.removeItem(atPath: base) }

        try FileManager.default.createDirectory(atPath: base + "/garbage", withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8192).write(to: URL(filePath: base + "/garbage/bugs.sqlite"))
        try await expectRefusal(state: base + "/garbage", run: base + "/run1", "is not an SQLite database")

        // A real store, then cut in half.
        try await withDaemon { squasherd in
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            let text =
                try SampleIssues.generate(count: 3_000).map { String(decoding: try encoder.encode($0), as: UTF8.self) }
                .joined(separator: "\n") + "\n"
            try text.write(toFile: squasherd.directory + "/data.ndjson", atomically: true, encoding: .utf8)
            try await squasherd.ctl(["import", squasherd.directory + "/data.ndjson", "--wait"])
            #expect(try await squasherd.stop() == 0)
            let store = squasherd.directory + "/state/bugs.sqlite"
            let size = try FileManager.default.attributesOfItem(atPath: store)[.size] as! Int
            let handle = try #require(FileHandle(forUpdatingAtPath: store))
            try handle.truncate(atOffset: UInt64(size / 2))
            try handle.close()
            try await expectRefusal(
                state: squasherd.directory + "/state", run: squasherd.directory + "/run2", "Refusing to start")

            // A store written with another model.
            try FileManager.default.createDirectory(atPath: base + "/model", withIntermediateDirectories: true)
            let other = base + "/model/bugs.sqlite"
            let sqlite = try ChildProcess(
                name: "sqlite3", executable: "/usr/bin/sqlite3",
                arguments: [
                    other,
                    """
                    CREATE TABLE bs_metadata (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                    INSERT INTO bs_metadata VALUES ('storeIdentifier', '6F1C0D2E-0000-4000-8000-000000000001'), ('storeType', 'SQLite'),
                      ('modelVersionHash', '0000000000000000'), ('modelSchema', '[{"name":"Bug","attributes":[{"name":"key","type":"int64","isOptional":false,"defaultValue":{"int64":{"_0":0}}}],"relationships":[]}]');
                    """,
                ])
            #expect(try await sqlite.waitForExit() == 0, "\(sqlite.errorOutput)")
            try await expectRefusal(state: base + "/model", run: base + "/run3", "incompatible model")

            // A store file emptied while its write-ahead log still holds commits.
            try FileManager.default.createDirectory(atPath: base + "/emptied", withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: base + "/emptied/bugs.sqlite", contents: Data()))
            try Data(repeating: 0x37, count: 4096).write(to: URL(filePath: base + "/emptied/bugs.sqlite-wal"))
            try await expectRefusal(state: base + "/emptied", run: base + "/run5", "is empty, but its write-ahead log")
            #expect(
                (try FileManager.default.attributesOfItem(atPath: base + "/emptied/bugs.sqlite-wal")[.size] as? Int)
                    == 4096
            )
            // ... and with no log left: SQLite would read it as a new store; squasherd refuses and
            // leaves the file as it is.
            try FileManager.default.removeItem(atPath: base + "/emptied/bugs.sqlite-wal")
            try await expectRefusal(state: base + "/emptied", run: base + "/run5", "is an empty file (0 bytes)")
            #expect(
                (try FileManager.default.attributesOfItem(atPath: base + "/emptied/bugs.sqlite")[.size] as? Int) == 0)
            // ... and with an empty log beside it, as SQLite leaves one at times: no commits either.
            #expect(FileManager.default.createFile(atPath: base + "/emptied/bugs.sqlite-wal", contents: Data()))
            try await expectRefusal(state: base + "/emptied", run: base + "/run5", "is an empty file (0 bytes)")
            #expect(
                (try FileManager.default.attributesOfItem(atPath: base + "/emptied/bugs.sqlite")[.size] as? Int) == 0)

            // A configuration file it cannot use: exit 1 and a critical line, like every other
            // refusal to start (not the usage text of a command-line mistake, status 64).
            try "chunk_size = -1\n".write(toFile: base + "/bad.conf", atomically: true, encoding: .utf8)
            let misconfigured = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: [
                    "--config", base + "/bad.conf", "--state-directory", base + "/state8", "--runtime-directory",
                    base + "/run8",
                ])
            #expect(try await misconfigured.waitForExit() == 1)
            #expect(
                misconfigured.errorOutput.contains("critical")
                    && misconfigured.errorOutput.contains("'chunk_size = -1' is out of range. Use 1 to"),
                "\(misconfigured.errorOutput)")
            #expect(!misconfigured.errorOutput.contains("USAGE"), "\(misconfigured.errorOutput)")
            // A configuration "file" that would block the start (a FIFO no one writes to), or take
            // every byte of memory (/dev/zero), or is far too large: refused before it is read.
            #expect(mkfifo(base + "/fifo.conf", 0o600) == 0)
            try String(repeating: "# padding\n", count: 200_000).write(
                toFile: base + "/huge.conf", atomically: true, encoding: .utf8)
            for (config, refusal) in [
                (base + "/fifo.conf", "is a FIFO (named pipe)"), ("/dev/zero", "is a device"),
                (base + "/huge.conf", "more than the 1048576 a configuration file may have"),
                (base, "is a directory. Pass the file itself"),
            ] {
                let refused = try ChildProcess(
                    name: "squasherd --config \(config)", executable: Products.squasherd,
                    arguments: [
                        "--config", config, "--state-directory", base + "/state8", "--runtime-directory",
                        base + "/run8",
                    ])
                #expect(try await refused.waitForExit(timeout: .seconds(30)) == 1, "\(config)")
                #expect(refused.errorOutput.contains(refusal), "\(config): \(refused.errorOutput)")
            }

            // A state directory that cannot be created.
            try await expectRefusal(state: "/dev/null/state", run: base + "/run4", "Cannot create /dev/null/state")
            // A file where the state directory goes.
            #expect(FileManager.default.createFile(atPath: base + "/statefile", contents: Data("x".utf8)))
            try await expectRefusal(
                state: base + "/statefile", run: base + "/run5",
                "Cannot use \(base)/statefile as a directory: a file is there")
            // A symbolic link that leads nowhere, or round in a loop: named as such, not as a file
            // that exists.
            try FileManager.default.createSymbolicLink(atPath: base + "/loop", withDestinationPath: base + "/loop")
            try await expectRefusal(
                state: base + "/loop", run: base + "/run-loop",
                "is a symbolic link to \(base)/loop, which leads to no directory")
            try FileManager.default.createSymbolicLink(
                atPath: base + "/dangling", withDestinationPath: base + "/gone/state")
            try await expectRefusal(
                state: base + "/dangling", run: base + "/run-dangling",
                "is a symbolic link to \(base)/gone/state, which leads to no directory")

            // Socket paths the kernel cannot bind, or where a file that is not a socket sits.
            let long = base + "/" + String(repeating: "r", count: 120)
            try await expectRefusal(state: base + "/state6", run: long, "a Unix socket path holds at most 107")
            // ... before anything is created: no store is left behind.
            #expect(!FileManager.default.fileExists(atPath: base + "/state6/bugs.sqlite"))
            // The longest path a Unix socket takes (107 bytes) is served, and reached by squasherctl
            // and by the library's change feed (NIO's own socket address stops at 103).
            let longest =
                base + "/" + String(repeating: "r", count: 107 - base.utf8.count - "//squasherd-write.sock".utf8.count)
            #expect((longest + "/squasherd-write.sock").utf8.count == 107)
            let served = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", base + "/state6", "--runtime-directory", longest])
            try await served.waitForErrorOutput(containing: " ready")
            let (code, status) = try await ChildProcess.squasherctlStatus(runtimeDirectory: longest)
            #expect(code == 0, "\(status.errorOutput)")
            let first = try await VarlinkStream.call(
                path: longest + "/squasherd.sock", method: "io.bugsquasher.Changes.Subscribe",
                parameters: SubscribeParameters()
            ) { replies -> String? in
                for try await (event, _) in replies.decoding(SubscribeReply.self) { return event.event }
                return nil
            }
            #expect(first == "subscribed")
            served.signal(SIGTERM)
            #expect(try await served.waitForExit() == 0)
            try FileManager.default.createDirectory(
                atPath: base + "/run7/squasherd.sock", withIntermediateDirectories: true)
            try await expectRefusal(state: base + "/state7", run: base + "/run7", "/run7/squasherd.sock is a directory")
            try await expectRefusal(state: "", run: base + "/run8", "--state-directory is empty. Give a path")
            // A client pointed at a file that is no socket is told so, not that squasherd is down.
            let notSocket = try ChildProcess(
                name: "squasherctl status", executable: Products.squasherctl,
                arguments: ["status", "--socket", "/etc/passwd"])
            #expect(try await notSocket.waitForExit() == 4)
            #expect(notSocket.errorOutput.contains("/etc/passwd is not a socket"), "\(notSocket.errorOutput)")
            // No squasherd at all: following a job ends at once with status 4, as every command does
            // (it waited for a daemon it had never reached).
            let noDaemon = try ChildProcess(
                name: "squasherctl jobs --wait", executable: Products.squasherctl,
                arguments: ["jobs", "somejob", "--wait", "--socket", base + "/run8/squasherd.sock"])
            #expect(try await noDaemon.waitForExit(timeout: .seconds(30)) == 4)
            #expect(
                noDaemon.errorOutput.contains("run8/squasherd.sock")
                    && !noDaemon.errorOutput.contains("lost squasherd"),
                "\(noDaemon.errorOutput)")
        }
    }

    /// Instead of being served as a new empty store.
    @Test("a store with a damaged or lost write-ahead log is refused")
    func damagedOrMissingLog() async throws {
        // A daemon killed before its first checkpoint leaves the store's tables and rows in the
        // -wal alone (the store file is a header).
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords(
                "small.ndjson", count: 200, prefix: "WAL", title: "kept in the log")
            // Chunks of 20: the log holds ten commits one after the other.
            try await squasherd.ctl(["import", records.path, "--chunk-size", "20", "--wait"])
            squasherd.process.signal(SIGKILL)
            _ = try await squasherd.process.waitForExit()
            let state = squasherd.directory + "/state"
            let log = state + "/bugs.sqlite-wal"
            #expect((try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int ?? 0) > 32)
            func copyState(_ name: String) throws -> String {
                let copy = squasherd.directory + "/" + name
                try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
                for file in ["bugs.sqlite", "bugs.sqlite-wal"] {
                    try FileManager.default.copyItem(atPath: state + "/" + file, toPath: copy + "/" + file)
                }
                return copy
            }

            // One byte of the log's header changed (its first salt): SQLite would skip the whole log.
            let flipped = try copyState("flipped")
            let handle = try #require(FileHandle(forUpdatingAtPath: flipped + "/bugs.sqlite-wal"))
            try handle.seek(toOffset: 20)
            let byte = try #require(try handle.read(upToCount: 1)?.first)
            try handle.seek(toOffset: 20)
            try handle.write(contentsOf: Data([~byte]))
            try handle.close()
            let flippedSize =
                try FileManager.default.attributesOfItem(atPath: flipped + "/bugs.sqlite-wal")[.size] as? Int
            try await expectRefusal(
                state: flipped, run: squasherd.directory + "/r1", "has a header whose checksum does not match")
            // Refused before SQLite touched it: the log is still all there.
            #expect(
                (try FileManager.default.attributesOfItem(atPath: flipped + "/bugs.sqlite-wal")[.size] as? Int)
                    == flippedSize)

            // A page in the middle of the log overwritten: SQLite would apply the commits before it
            // and drop the ones after it without a word.
            let logSize = try #require(try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int)
            let frameSize = 24 + 4096
            let frames = (logSize - 32) / frameSize
            let damaged = try copyState("damaged")
            let middle = try #require(FileHandle(forUpdatingAtPath: damaged + "/bugs.sqlite-wal"))
            try middle.seek(toOffset: UInt64(32 + frames / 2 * frameSize + 1000))
            try middle.write(contentsOf: Data(repeating: 0xA5, count: 4096))
            try middle.close()
            try await expectRefusal(
                state: damaged, run: squasherd.directory + "/r3",
                "is damaged at frame \(frames / 2 + 1) (byte \(32 + frames / 2 * frameSize)), and frame")
            #expect(
                (try FileManager.default.attributesOfItem(atPath: damaged + "/bugs.sqlite-wal")[.size] as? Int)
                    == logSize,
                "refused before SQLite touched the log")
            // Cut partway through a frame (what a crash or power loss can leave too): SQLite drops
            // the unfinished frame's transaction; squasherd starts and says so.
            let cut = try copyState("cut")
            let cutHandle = try #require(FileHandle(forUpdatingAtPath: cut + "/bugs.sqlite-wal"))
            try cutHandle.truncate(atOffset: UInt64(32 + (frames - 1) * frameSize + 1000))
            try cutHandle.close()
            let cutDaemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", cut, "--runtime-directory", squasherd.directory + "/r4"])
            try await cutDaemon.waitForErrorOutput(containing: "ready")
            #expect(
                cutDaemon.errorOutput.contains("ends partway through frame \(frames) (1000 of its \(frameSize) bytes)"),
                "\(cutDaemon.errorOutput)")
            cutDaemon.signal(SIGTERM)
            #expect(try await cutDaemon.waitForExit() == 0)

            // Through a symlink, the store and its log are the files it points to: the damaged log
            // is refused there too, and left as it is (SQLite keeps the -wal beside the target).
            let linked = squasherd.directory + "/linked"
            try FileManager.default.createDirectory(atPath: linked, withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(
                atPath: linked + "/bugs.sqlite", withDestinationPath: "../damaged/bugs.sqlite")
            try await expectRefusal(
                state: linked, run: squasherd.directory + "/r5",
                "damaged/bugs.sqlite-wal (\(logSize) bytes) is damaged at frame")
            #expect(
                (try FileManager.default.attributesOfItem(atPath: damaged + "/bugs.sqlite-wal")[.size] as? Int)
                    == logSize)
            // A directory or a FIFO where the store or its log should be is named as such.
            try FileManager.default.createDirectory(
                atPath: squasherd.directory + "/dir/bugs.sqlite", withIntermediateDirectories: true)
            try await expectRefusal(
                state: squasherd.directory + "/dir", run: squasherd.directory + "/r6",
                "bugs.sqlite, the store, is a directory, not a file")
            try FileManager.default.createDirectory(
                atPath: squasherd.directory + "/fifo", withIntermediateDirectories: true)
            #expect(mkfifo(squasherd.directory + "/fifo/bugs.sqlite-wal", 0o600) == 0)
            try await expectRefusal(
                state: squasherd.directory + "/fifo", run: squasherd.directory + "/r7",
                "bugs.sqlite-wal, its write-ahead log, is a FIFO (named pipe), not a file")

            // The store file copied without its log.
            let alone = try copyState("alone")
            try FileManager.default.removeItem(atPath: alone + "/bugs.sqlite-wal")
            try await expectRefusal(
                state: alone, run: squasherd.directory + "/r2",
                "is an SQLite file with no tables, so it is not a new store")
            // The same file beside the marker of a creation that squasherd did not finish (killed
            // during its first start): created again, empty, and the marker goes.
            let marker = alone + "/bugs.sqlite-creating"
            #expect(FileManager.default.createFile(atPath: marker, contents: nil))
            try await expectStart(state: alone, squasherd: squasherd, listing: 0, titled: "kept in the log")
            #expect(!FileManager.default.fileExists(atPath: marker))
            // A first start that stopped before SQLite wrote the file's header (0 bytes) likewise.
            try FileManager.default.removeItem(atPath: alone + "/bugs.sqlite")
            #expect(FileManager.default.createFile(atPath: alone + "/bugs.sqlite", contents: nil))
            #expect(FileManager.default.createFile(atPath: marker, contents: nil))
            try await expectStart(state: alone, squasherd: squasherd, listing: 0, titled: "kept in the log")
            #expect(!FileManager.default.fileExists(atPath: marker))

            // The untouched store starts, with every record.
            try await expectStart(state: state, squasherd: squasherd, listing: 200, titled: "kept in the log")
            try? FileManager.default.removeItem(atPath: squasherd.directory)
        }
    }

    /// Went back: its -wal removed after a kill -9. Serving it would issue its lost tokens again; the
    /// message says how to go on. Removing the record accepts it; a record damaged into garbage is written
    /// anew, with a warning that the check could not be made.
    @Test("a store that went back or is another store is refused, naming what happened")
    func storeThatWentBackOrIsAnother() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("back.ndjson", count: 50, prefix: "BACK", title: "checkpointed")
            try await squasherd.ctl(["import", records.path, "--wait"])
            #expect(try await squasherd.stop() == 0)
            let state = squasherd.directory + "/state"
            // A save that only the log holds, then a kill -9 and the log removed.
            let daemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", state, "--runtime-directory", squasherd.directory + "/run"])
            try await daemon.waitForErrorOutput(containing: "ready")
            // "BACK-1 is now version 2 (token T)"
            let reply = try await squasherd.ctl(["update", "BACK-1", "title=only in the log"]).joined()
            let token = try #require(Int64(reply.split(separator: " ").last?.dropLast() ?? ""), "\(reply)")
            daemon.signal(SIGKILL)
            _ = try await daemon.waitForExit()
            for file in ["bugs.sqlite-wal", "bugs.sqlite-shm"] {
                try FileManager.default.removeItem(atPath: state + "/" + file)
            }
            try await expectRefusal(
                state: state, run: squasherd.directory + "/r1",
                "holds saves up to token \(token - 1), but squasherd committed up to token \(token) here")

            // Another store's file in its place.
            let other = squasherd.directory + "/other"
            let otherDaemon = try ChildProcess(
                name: "squasherd (other)", executable: Products.squasherd,
                arguments: ["--state-directory", other, "--runtime-directory", squasherd.directory + "/run"])
            try await otherDaemon.waitForErrorOutput(containing: "ready")
            let otherRecords = try squasherd.writeRecords(
                "other.ndjson", count: 7, prefix: "OTHER", title: "another store")
            try await squasherd.ctl(["import", otherRecords.path, "--wait"])
            otherDaemon.signal(SIGTERM)
            #expect(try await otherDaemon.waitForExit() == 0)
            try FileManager.default.removeItem(atPath: state + "/bugs.sqlite")
            try FileManager.default.copyItem(atPath: other + "/bugs.sqlite", toPath: state + "/bugs.sqlite")
            try await expectRefusal(state: state, run: squasherd.directory + "/r2", "but squasherd last saved to store")
            try await expectRefusal(
                state: state, run: squasherd.directory + "/r2", "remove \(state)/squasherd.last-save and start again")

            // Taken as it is once the record is removed.
            try FileManager.default.removeItem(atPath: state + "/squasherd.last-save")
            try await expectStart(state: state, squasherd: squasherd, listing: 7, titled: "another store")

            // A record damaged into garbage: the start goes on, saying that it could not check the
            // store, and the record is written anew.
            try "\u{0}\u{0}garbage, not a record\n".write(
                toFile: state + "/squasherd.last-save", atomically: false, encoding: .utf8)
            let damaged = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", state, "--runtime-directory", squasherd.directory + "/run"])
            try await damaged.waitForErrorOutput(containing: "ready")
            #expect(
                damaged.errorOutput.contains("squasherd.last-save holds no record of the last save"),
                "\(damaged.errorOutput)")
            damaged.signal(SIGTERM)
            #expect(try await damaged.waitForExit() == 0)
            let record = try String(contentsOfFile: state + "/squasherd.last-save", encoding: .utf8).split(
                whereSeparator: \.isWhitespace)
            #expect(record.count == 2 && Int64(record[1]) != nil, "\(record)")
        }
    }

    /// Its store just created, its sockets not yet bound: it stops once it can, instead of the signal's
    /// default action ending it without a word.
    @Test("a SIGTERM during start-up stops squasherd cleanly, with exit 0")
    func stopDuringStartUp() async throws {
        let base = try directory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let daemon = try ChildProcess(
            name: "squasherd", executable: Products.squasherd,
            arguments: ["--state-directory", base + "/state", "--runtime-directory", base + "/run"])
        try await daemon.waitForErrorOutput(containing: "created store")
        daemon.signal(SIGTERM)
        #expect(try await daemon.waitForExit() == 0, "\(daemon.errorOutput)")
        #expect(daemon.errorOutput.contains("stopped"), "\(daemon.errorOutput)")
        // The store's creation finished before the stop (its marker is gone).
        #expect(FileManager.default.fileExists(atPath: base + "/state/bugs.sqlite"))
        #expect(!FileManager.default.fileExists(atPath: base + "/state/bugs.sqlite-creating"))
    }

    /// The job fails with the reason instead of staying uploading; the upload is answered StoreUnavailable
    /// (squasherctl: 75), its spool goes, and a wait on it returns.
    @Test("an upload ending while another program locks the store fails the job cleanly")
    func uploadEndsWhileTheStoreIsLocked() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("locked.ndjson", count: 50, prefix: "LCK", title: "never queued")
            let locker = try StoreLocker(store: squasherd.directory + "/state/bugs.sqlite")
            let input = try ChildPipe()
            let upload = try ChildProcess(
                name: "squasherctl import", executable: Products.squasherctl,
                arguments: ["import", "-", "--name", "locked", "--format", "bugsquasher-ndjson", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"], stdin: input.reading)
            try input.writing.write(contentsOf: try Data(contentsOf: URL(filePath: records.path)))
            try await squasherd.waitForLog("upload started")
            // Another program takes the write lock, for longer than squasherd's 30 s busy timeout.
            try await locker.lock()
            try input.writing.close()
            #expect(try await upload.waitForExit(timeout: .seconds(90)) == 75, "\(upload.errorOutput)")
            #expect(
                upload.errorOutput.contains("The upload arrived whole, but the job could not be queued"),
                "\(upload.errorOutput)")
            #expect(upload.errorOutput.contains("has held the write lock"), "\(upload.errorOutput)")
            #expect(try await locker.release() == 0, "\(locker.errorOutput)")

            let jobs = try await squasherd.ctl(["jobs"])
            let line = try #require(jobs.first { $0.contains("locked") }, "\(jobs)")
            #expect(line.contains("failed"), "\(line)")
            let job = String(line.split(separator: " ").first ?? "")
            // Waiting on it returns at once with the failure.
            let waited = try await squasherd.ctlError(["jobs", job, "--wait"], expectStatus: 2)
            #expect(waited.contains("could not be queued"), "\(waited)")
            let spool =
                (try? FileManager.default.contentsOfDirectory(atPath: squasherd.directory + "/state/spool")) ?? []
            #expect(spool.filter { $0.hasPrefix(job) }.isEmpty, "\(spool)")
            #expect(try await squasherd.ctl(["status"]).joined().contains("bugs 0"))
        }
    }

    /// Instead of failing; it ends with every record once.
    @Test("an import waits out another program's lock and resumes from its last chunk")
    func importWaitsOutALock() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords(
                "many.ndjson", count: 20_000, prefix: "BSY", title: "imported past a lock")
            let locker = try StoreLocker(store: squasherd.directory + "/state/bugs.sqlite")
            let upload = try squasherd.startCtl(
                "squasherctl import", ["import", records.path, "--chunk-size", "50", "--wait", "--timeout", "0"])
            try await squasherd.waitForLog("import started")
            try await locker.lock()
            try await squasherd.waitForLog("the store is locked by another program", timeout: .seconds(90))
            // Not "idle" while it waits: the job, and why (degraded, so status exits 5).
            let waiting = try await squasherd.ctl(["status"], expectStatus: 5).joined(separator: "\n")
            #expect(
                waiting.contains("waits to resume") && waiting.contains("the store is locked by another program")
                    && !waiting.contains("idle"), "\(waiting)")
            #expect(try await locker.release() == 0, "\(locker.errorOutput)")
            #expect(try await upload.waitForExit(timeout: .seconds(300)) == 0, "\(upload.errorOutput)")
            #expect(
                upload.output.joined(separator: "\n").contains("20000 read, 20000 imported, 0 rejected"),
                "\(upload.output)"
            )
            // Its follower was told why the job stalled, and that it went on.
            #expect(
                upload.errorOutput.contains("waits to resume")
                    && upload.errorOutput.contains("locked by another program")
                    && upload.errorOutput.contains("goes on"), "\(upload.errorOutput)")
            // Degraded for a while: the store refused the import's writes (`status` exits 5).
            let status = try await squasherd.ctl(["status"], expectStatus: 5).joined(separator: "\n")
            #expect(status.contains("bugs 20000") && status.contains("store-cannot-write"), "\(status)")
            // Taken up again after the lock (resumed past the chunks committed before it, if any).
            let log = squasherd.process.errorOutput
            let retried = try #require(log.range(of: "the store is locked by another program"))
            #expect(
                log[retried.upperBound...].contains("import resumed")
                    || log[retried.upperBound...].contains("import started"), "\(log.suffix(2000))")
        }
    }

    /// Instead of importing the part that was read as if it were the file.
    @Test("an input file truncated during upload abandons it, importing nothing")
    func inputShrinksDuringUpload() async throws {
        try await withDaemon { squasherd in
            // About 300 MB, so that the upload is still running when squasherctl is stopped (60 MB
            // were uploaded before a loaded CI machine's test saw the log line).
            let line =
                #"{"key":"SHR-%d","title":"cut short","details":"\#(String(repeating: "x", count: 2_000))","status":"Open","project":{"key":"SHR"}}"#
            let path = squasherd.directory + "/shrinks.ndjson"
            #expect(FileManager.default.createFile(atPath: path, contents: nil))
            let writer = try #require(FileHandle(forWritingAtPath: path))
            for block in 0..<150 {
                try writer.write(
                    contentsOf: Data((0..<1_000).map { String(format: line, block * 1_000 + $0) + "\n" }.joined().utf8))
            }
            try writer.close()
            let upload = try squasherd.startCtl("squasherctl import", ["import", path, "--wait"])
            try await squasherd.waitForLog("upload started")
            // Stopped while the file is cut.
            kill(upload.pid, SIGSTOP)
            try #require(truncate(path, 1_000_000) == 0)
            kill(upload.pid, SIGCONT)
            #expect(try await upload.waitForExit(timeout: .seconds(120)) == 2)
            #expect(
                upload.errorOutput.contains("shrinks.ndjson shrank while it was read")
                    && upload.errorOutput.contains("Nothing was imported"), "\(upload.errorOutput)")
            try await squasherd.waitForLog("upload abandoned")
            #expect(try await squasherd.ctl(["status"]).joined().contains("bugs 0"))
        }
    }

    /// Not that it was refused for a connection limit or descriptors.
    @Test("squasherctl says squasherd went away when it is killed during a wait")
    func clientSaysTheDaemonWentAway() async throws {
        // squasherctl may have exited when the input is written: EPIPE, not the end of the tests.
        signal(SIGPIPE, SIG_IGN)
        try await withDaemon { squasherd in
            let input = try ChildPipe()
            let upload = try ChildProcess(
                name: "squasherctl import", executable: Products.squasherctl,
                arguments: ["import", "-", "--format", "bugsquasher-ndjson"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"], stdin: input.reading)
            try input.reading.close()
            // The upload has begun once its job exists; its input stays open, so it waits on squasherd.
            let begun = try await poll(for: .seconds(30)) {
                try? BlockingVarlinkClient(path: squasherd.readSocket).call(
                    "io.bugsquasher.Jobs.List", LimitParameter(limit: 1), as: JobsReply.self
                ).jobs.first
            }
            #expect(begun?.state == .uploading, "\(String(describing: begun))")
            squasherd.process.signal(SIGKILL)
            _ = try await squasherd.process.waitForExit()
            try? input.writing.write(
                contentsOf: Data(
                    #"{"key":"GONE-1","title":"t","status":"Open","project":{"key":"GONE"}}"#.utf8 + [0x0A]))
            try? input.writing.close()
            let status = try await upload.waitForExit()
            #expect(
                status == 4 && upload.errorOutput.contains("squasherd went away")
                    && !upload.errorOutput.contains("connection limit"), "exit \(status): \(upload.errorOutput)")
        }
    }

    /// It says so (StoreUnavailable, squasherctl: 75) while squasherctl still sends; the next upload goes
    /// through.
    @Test("a spool directory deleted mid-upload fails the upload at its next write")
    func spoolDeletedDuringUpload() async throws {
        // squasherctl may exit while this test still writes to its input: a write then fails
        // (EPIPE) instead of ending the test process.
        signal(SIGPIPE, SIG_IGN)
        try await withDaemon { squasherd in
            let input = try ChildPipe()
            let upload = try ChildProcess(
                name: "squasherctl import", executable: Products.squasherctl,
                arguments: ["import", "-", "--name", "cut", "--format", "bugsquasher-ndjson", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"], stdin: input.reading)
            // Only squasherctl reads the input: once it exits, a write fails instead of blocking.
            try input.reading.close()
            let line =
                #"{"key":"SPL-%d","title":"spooled","details":"\#(String(repeating: "x", count: 1_000))","status":"Open","project":{"key":"SPL"}}"#
            var next = 0
            func send(_ count: Int) throws {
                try input.writing.write(
                    contentsOf: Data((next..<next + count).map { String(format: line, $0) + "\n" }.joined().utf8))
                next += count
            }
            // A MiB, so that squasherd has written to the spool file (every 256 KiB).
            try send(1_000)
            let spool = squasherd.directory + "/state/spool"
            let deadline = ContinuousClock.now + .seconds(30)
            while ((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).allSatisfy({
                (try? FileManager.default.attributesOfItem(atPath: spool + "/" + $0)[.size] as? Int) ?? 0 == 0
            }) {
                try #require(ContinuousClock.now < deadline, "squasherd wrote nothing to the spool")
                try await Task.sleep(for: .milliseconds(10))
            }
            try FileManager.default.removeItem(atPath: spool)
            // The input stays open: the upload must end on squasherd's word, not at its end.
            while upload.exitStatus == nil, ContinuousClock.now < deadline + .seconds(30) {
                guard (try? send(100)) != nil else { break }
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(
                try await upload.waitForExit(timeout: .seconds(30)) == 75,
                "the upload went on into a removed spool file, or was refused as bad input: \(upload.errorOutput)")
            #expect(
                upload.errorOutput.contains("was removed while the upload was written to it")
                    && upload.errorOutput.contains("Nothing was imported"), "\(upload.errorOutput)")
            try? input.writing.close()
            let records = try squasherd.writeRecords(
                "after.ndjson", count: 10, prefix: "AFT", title: "after the spool went")
            try await squasherd.ctl(["import", records.path, "--wait"])
            #expect(try await squasherd.ctl(["status"]).joined().contains("bugs 10"))
        }
    }

    /// It exits with status 1, copies what the open store holds beside it, refuses to start on nothing
    /// while that copy waits, and goes on once the copy is moved into place.
    @Test("squasherd stops and saves a copy when its store file is deleted under it")
    func storeDeletedWhileRunning() async throws {
        try await withDaemon { squasherd in
            let (state, rescued) = try await deleteWhileRunning(
                ["bugs.sqlite", "bugs.sqlite-wal", "bugs.sqlite-shm"], squasherd: squasherd, prefix: "DEL"
            ) { _ in "bugs.sqlite was deleted while squasherd ran" }
            #expect(
                squasherd.process.errorOutput.contains("copied to \(state)/\(rescued)"),
                "\(squasherd.process.errorOutput)")

            // Not restarted on an empty store in its place...
            try await expectRefusal(
                state: state, run: squasherd.directory + "/run",
                "is the copy squasherd wrote when the store file was deleted"
            )
            #expect(!FileManager.default.fileExists(atPath: state + "/bugs.sqlite"))
            // ... but on the copy, once it is moved back: every record is there.
            try FileManager.default.moveItem(atPath: state + "/" + rescued, toPath: state + "/bugs.sqlite")
            try await expectStart(state: state, squasherd: squasherd, listing: 300, titled: "survives the rm")
        }
    }

    /// It exits with status 1 and copies what the open store holds, since later saves would go into a log
    /// no one can read; it does not start on the store without that copy.
    @Test("squasherd stops and saves a copy when its write-ahead log is deleted under it")
    func logDeletedWhileRunning() async throws {
        try await withDaemon { squasherd in
            let (state, rescued) = try await deleteWhileRunning(
                ["bugs.sqlite-wal"], squasherd: squasherd, prefix: "WLD"
            ) {
                "the write-ahead log \($0)/bugs.sqlite-wal was deleted while squasherd ran"
            }
            // The store file without its log is older than the copy: refused, naming the copy.
            try await expectRefusal(
                state: state, run: squasherd.directory + "/run",
                "\(rescued) is the copy squasherd wrote when the store or its write-ahead log was deleted")
            // As the message says: the old file kept elsewhere, the copy moved into place.
            try FileManager.default.createDirectory(
                atPath: squasherd.directory + "/old", withIntermediateDirectories: true)
            for file in ["bugs.sqlite", "bugs.sqlite-shm"]
            where FileManager.default.fileExists(atPath: state + "/" + file) {
                try FileManager.default.moveItem(
                    atPath: state + "/" + file, toPath: squasherd.directory + "/old/" + file)
            }
            try FileManager.default.moveItem(atPath: state + "/" + rescued, toPath: state + "/bugs.sqlite")
            try await expectStart(state: state, squasherd: squasherd, listing: 300, titled: "survives the rm")
        }
    }

    /// After `rm -r` it exits with status 1, naming the directory rather than a permission problem, copies
    /// what the open store holds into the directory made again, and goes on from that copy.
    @Test("squasherd stops and recovers when its state directory is removed under it")
    func stateDirectoryRemovedWhileRunning() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords(
                "kept.ndjson", count: 300, prefix: "DIR", title: "survives the rm -r")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let state = squasherd.directory + "/state"
            try FileManager.default.removeItem(atPath: state)
            #expect(try await squasherd.process.waitForExit(timeout: .seconds(30)) == 1)
            #expect(
                squasherd.process.errorOutput.contains(
                    "the directory \(state) (with bugs.sqlite in it) was moved or removed while squasherd ran"),
                "\(squasherd.process.errorOutput)")
            #expect(!squasherd.process.errorOutput.contains("not writable"), "\(squasherd.process.errorOutput)")
            let rescued = try #require(
                try FileManager.default.contentsOfDirectory(atPath: state).first {
                    $0.hasPrefix("bugs.sqlite.rescued-")
                })
            try FileManager.default.moveItem(atPath: state + "/" + rescued, toPath: state + "/bugs.sqlite")
            try await expectStart(state: state, squasherd: squasherd, listing: 300, titled: "survives the rm -r")
        }
    }

    /// It exits with status 1 instead of running on unreachable; started again, it serves.
    @Test("squasherd stops, naming the socket, when its runtime directory is removed")
    func socketsRemovedWhileRunning() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("kept.ndjson", count: 50, prefix: "RUN", title: "before the rm")
            try await squasherd.ctl(["import", records.path, "--wait"])
            try FileManager.default.removeItem(atPath: squasherd.directory + "/run")
            #expect(try await squasherd.process.waitForExit(timeout: .seconds(30)) == 1)
            #expect(
                squasherd.process.errorOutput.contains("the socket \(squasherd.directory)/run/squasherd"),
                "\(squasherd.process.errorOutput)")
            #expect(
                squasherd.process.errorOutput.contains("was removed while squasherd ran"),
                "\(squasherd.process.errorOutput)")
            try await expectStart(
                state: squasherd.directory + "/state", squasherd: squasherd, listing: 50, titled: "before the rm")
        }
    }

    /// Another process listens there now; squasherd exits with status 1.
    @Test("squasherd stops when a socket is replaced, leaving the replacement in place")
    func socketReplacedWhileRunning() async throws {
        try await withDaemon { squasherd in
            let path = squasherd.directory + "/run/squasherd.sock"
            try FileManager.default.removeItem(atPath: path)
            let listener = unixSocket(CInt(SOCK_STREAM.rawValue))
            defer { close(listener) }
            try #require(
                try withUnixAddress(path, { bind(listener, $0, $1) }) == 0 && listen(listener, 4) == 0,
                "\(String(cString: strerror(errno)))")
            var before = stat()
            try #require(lstat(path, &before) == 0)
            #expect(try await squasherd.process.waitForExit(timeout: .seconds(30)) == 1)
            #expect(
                squasherd.process.errorOutput.contains("the socket \(path) was"), "\(squasherd.process.errorOutput)")
            // Stopping, squasherd removed its socket files: only those it created, not this one
            // (NIO's own clean-up removed whatever socket the path named, another daemon's too).
            var after = stat()
            #expect(lstat(path, &after) == 0 && after.st_ino == before.st_ino, "the replacement socket was removed")
            #expect(
                !FileManager.default.fileExists(atPath: squasherd.directory + "/run/squasherd-write.sock"),
                "squasherd's own write socket is removed when it stops")
        }
    }

    /// The first keeps serving; a kill -9 leaves no stale lock.
    @Test("a second daemon on the same store or sockets refuses to start, naming the first")
    func oneDaemonPerStore() async throws {
        try await withDaemon { squasherd in
            let pid = squasherd.process.pid
            // Two daemons on one store would both resume its running import job.
            try await expectRefusal(
                state: squasherd.directory + "/state", run: squasherd.directory + "/run2",
                "Another squasherd (PID \(pid)) is using the state directory")
            // Rebinding the sockets of a live daemon would cut its clients off. (The two servers
            // start together: whichever checks first names its socket.)
            try await expectRefusal(
                state: squasherd.directory + "/state2", run: squasherd.directory + "/run",
                "Another process is listening on \(squasherd.directory)/run/squasherd")
            // Refused before it created anything: no empty store is left behind in its state directory.
            #expect(
                !FileManager.default.fileExists(atPath: squasherd.directory + "/state2/bugs.sqlite"),
                "the refused daemon created a store file")
            // Nor through a symlink in another state directory to the first one's store file.
            try FileManager.default.createDirectory(
                atPath: squasherd.directory + "/state3", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(
                atPath: squasherd.directory + "/state3/bugs.sqlite",
                withDestinationPath: squasherd.directory + "/state/bugs.sqlite")
            try await expectRefusal(
                state: squasherd.directory + "/state3", run: squasherd.directory + "/run3",
                "another squasherd is using the store file \(squasherd.directory)/state/bugs.sqlite (the file \(squasherd.directory)/state3/bugs.sqlite leads to)"
            )
            let status = try await squasherd.ctl(["status"])
            #expect(!status.isEmpty, "the first daemon stopped answering")

            // The kernel drops the lock with the process: a restart after kill -9 takes it over,
            // and the socket files the killed daemon left are replaced.
            squasherd.process.signal(SIGKILL)
            _ = try await squasherd.process.waitForExit()
            try await squasherd.restart()
        }
    }

    /// As after a power cut before the page cache reached the disk; the job must not finish without the
    /// lost records.
    @Test("a spool that lost its end fails the resumed job with the reason")
    func spoolCutShort() async throws {
        try await withDaemon(chunkSize: 1) { squasherd in
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            let text =
                try SampleIssues.generate(count: 4_000).map { String(decoding: try encoder.encode($0), as: UTF8.self) }
                .joined(separator: "\n") + "\n"
            try text.write(toFile: squasherd.directory + "/data.ndjson", atomically: true, encoding: .utf8)
            // Queued and running, one record per chunk: far from done when the kill comes.
            try await squasherd.ctl(["import", squasherd.directory + "/data.ndjson"])
            squasherd.process.signal(SIGKILL)
            _ = try await squasherd.process.waitForExit()
            let spoolDirectory = squasherd.directory + "/state/spool"
            let spool = try #require(
                try FileManager.default.contentsOfDirectory(atPath: spoolDirectory).first { $0.hasSuffix(".spool") },
                "the job finished before the kill")
            let job = String(spool.dropLast(".spool".count))
            let handle = try #require(FileHandle(forUpdatingAtPath: spoolDirectory + "/" + spool))
            try handle.truncate(atOffset: UInt64(text.utf8.count / 2))
            try handle.close()

            try await squasherd.restart()
            try await squasherd.ctl(["jobs", job, "--wait"], expectStatus: 2)
            let ended = try squasherd.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self).job
            #expect(
                ended.state == .failed
                    && ended.error?.contains("spooled input is shorter than the upload that was committed") == true,
                "\(ended)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: spoolDirectory).isEmpty)
        }
    }

    /// Committed chunks stay.
    @Test("a full disk fails the job with the reason; the daemon keeps serving")
    func diskFull() async throws {
        try await onSmallDisk(size: "3m", importOntoFullDisk)
    }

    /// A small gzip file of blank lines: it is stopped with the reason, its spool file goes, and the daemon
    /// goes on.
    @Test("an upload that would fill the disk is stopped before it does")
    func gzipBombStopped() async throws {
        try await onSmallDisk(size: "24m", uploadBomb)
    }

    /// That write would take the room kept for the store. Refused with the reason (StoreUnavailable,
    /// squasherctl: 75); once there is room it goes through.
    @Test("an upload onto a nearly full disk is refused before its first write")
    func uploadOntoFullDisk() async throws {
        try await onSmallDisk(size: "12m") { mountPoint, base in
            let daemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", mountPoint, "--runtime-directory", base + "/run"])
            try await daemon.waitForErrorOutput(containing: " ready")
            // Every block taken, then 320 KiB given back: room for the job's row and a 100 kB
            // spool, but below the tenth of the disk squasherd keeps free for the store.
            #expect(FileManager.default.createFile(atPath: mountPoint + "/filler", contents: nil))
            let filler = try #require(FileHandle(forWritingAtPath: mountPoint + "/filler"))
            while (try? filler.write(contentsOf: Data(count: 64 << 10))) != nil {}
            try filler.truncate(atOffset: try filler.offset() - (320 << 10))
            try filler.close()
            let record =
                #"{"key":"FULL-%d","title":"\#(String(repeating: "t", count: 900))","status":"Open","project":{"key":"FULL"}}"#
            try ((1...100).map { String(format: record, $0) }.joined(separator: "\n") + "\n").write(
                toFile: base + "/one.ndjson", atomically: true, encoding: .utf8)
            let environment = ["SQUASHERD_RUNTIME_DIRECTORY": base + "/run"]
            let refused = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/one.ndjson", "--wait"], environment: environment)
            #expect(try await refused.waitForExit(timeout: .seconds(60)) == 75)
            #expect(refused.errorOutput.contains("squasherd keeps free for the store"), "\(refused.errorOutput)")
            #expect(!refused.errorOutput.contains("Error Domain"), "\(refused.errorOutput)")
            try FileManager.default.removeItem(atPath: mountPoint + "/filler")
            let accepted = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/one.ndjson", "--wait"], environment: environment)
            #expect(try await accepted.waitForExit(timeout: .seconds(60)) == 0, "\(accepted.errorOutput)")
            daemon.signal(SIGTERM)
            #expect(try await daemon.waitForExit() == 0)
        }
    }

    /// The disk was filled while squasherd was stopped.
    @Test("a start on a full disk is refused saying so, and goes through once there is room")
    func startOnFullDisk() async throws {
        try await onSmallDisk(size: "12m") { mountPoint, base in
            let arguments = ["--state-directory", mountPoint, "--runtime-directory", base + "/run"]
            let first = try ChildProcess(name: "squasherd", executable: Products.squasherd, arguments: arguments)
            try await first.waitForErrorOutput(containing: " ready")
            first.signal(SIGTERM)
            #expect(try await first.waitForExit() == 0)
            #expect(FileManager.default.createFile(atPath: mountPoint + "/filler", contents: nil))
            let filler = try #require(FileHandle(forWritingAtPath: mountPoint + "/filler"))
            while (try? filler.write(contentsOf: Data(count: 64 << 10))) != nil {}
            while (try? filler.write(contentsOf: Data(count: 512))) != nil {}
            let refused = try ChildProcess(name: "squasherd", executable: Products.squasherd, arguments: arguments)
            #expect(try await refused.waitForExit() == 1)
            #expect(refused.errorOutput.contains("full"), "\(refused.errorOutput)")
            #expect(!refused.errorOutput.contains("disk is sound"), "\(refused.errorOutput)")
            try filler.close()
            try FileManager.default.removeItem(atPath: mountPoint + "/filler")
            let again = try ChildProcess(name: "squasherd", executable: Products.squasherd, arguments: arguments)
            try await again.waitForErrorOutput(containing: " ready")
            again.signal(SIGTERM)
            #expect(try await again.waitForExit() == 0)
        }
    }

    /// With the reason (squasherctl: 75, retry later); the log says so once for the edits. The bug keeps
    /// its last saved values, and the next edit once there is room goes through.
    @Test("edits and uploads onto a full disk are refused as StoreUnavailable")
    func editOntoFullDisk() async throws {
        try await onSmallDisk(size: "12m") { mountPoint, base in
            let daemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", mountPoint, "--runtime-directory", base + "/run"])
            try await daemon.waitForErrorOutput(containing: " ready")
            let environment = ["SQUASHERD_RUNTIME_DIRECTORY": base + "/run"]
            try #"{"key":"EDIT-1","title":"saved","status":"Open","project":{"key":"EDIT"}}"#.appending("\n").write(
                toFile: base + "/one.ndjson", atomically: true, encoding: .utf8)
            let imported = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/one.ndjson", "--wait"], environment: environment)
            #expect(try await imported.waitForExit(timeout: .seconds(60)) == 0, "\(imported.errorOutput)")
            #expect(FileManager.default.createFile(atPath: mountPoint + "/filler", contents: nil))
            let filler = try #require(FileHandle(forWritingAtPath: mountPoint + "/filler"))
            while (try? filler.write(contentsOf: Data(count: 64 << 10))) != nil {}
            while (try? filler.write(contentsOf: Data(count: 512))) != nil {}
            try filler.close()
            // Titles of 48 KB: more pages than the write-ahead log has room for already.
            let title = String(repeating: "full disk ", count: 4_800)
            for attempt in 1...3 {
                let edit = try ChildProcess(
                    name: "update", executable: Products.squasherctl,
                    arguments: ["update", "EDIT-1", "title=\(title)\(attempt)"], environment: environment)
                #expect(try await edit.waitForExit(timeout: .seconds(60)) == 75, "\(edit.errorOutput)")
                #expect(edit.errorOutput.contains("is full"), "\(edit.errorOutput)")
            }
            // Over the wire: an error a client can tell from a request it must change.
            let id = try #require(
                try BlockingVarlinkClient(path: base + "/run/squasherd.sock").call(
                    "io.bugsquasher.Store.Fetch",
                    FetchParameters(entity: "Bug", predicate: #"key == "EDIT-1""#, limit: 1), as: FetchReply.self
                ).ids?.first)
            let raw = try RawSocket.exchange(
                base + "/run/squasherd-write.sock",
                varlinkCall(
                    #"{"method":"io.bugsquasher.Import.Update","parameters":{"id":"\#(id)","values":{"title":"\#(title)4"}}}"#
                ))
            #expect(
                raw.contains(#""error":"io.bugsquasher.Import.StoreUnavailable""#) && raw.contains("is full"), "\(raw)")
            // The operator learns it from the log too, throttled to one warning in ten seconds:
            // one for the four refusals, two should they have spanned more than ten seconds.
            try await daemon.waitForErrorOutput(containing: "an edit could not be saved")
            let warnings = daemon.errorOutput.components(separatedBy: "an edit could not be saved").count - 1
            #expect(
                (1...2).contains(warnings),
                "\(warnings) warnings for 4 refused edits: \(daemon.errorOutput.suffix(3000))")
            #expect(daemon.errorOutput.contains("is full"), "\(daemon.errorOutput.suffix(3000))")
            // An upload is refused the same way: the fault is the disk's, not the file's.
            let upload = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/one.ndjson", "--wait"], environment: environment)
            #expect(try await upload.waitForExit(timeout: .seconds(60)) == 75, "\(upload.errorOutput)")
            #expect(
                upload.errorOutput.contains("is full") || upload.errorOutput.contains("keeps free for the store"),
                "\(upload.errorOutput)")
            let kept = try ChildProcess(
                name: "get", executable: Products.squasherctl, arguments: ["get", "EDIT-1"], environment: environment)
            #expect(try await kept.waitForExit() == 0)
            #expect(kept.output.contains("  title: saved"), "\(kept.output)")
            try FileManager.default.removeItem(atPath: mountPoint + "/filler")
            let accepted = try ChildProcess(
                name: "update", executable: Products.squasherctl, arguments: ["update", "EDIT-1", "title=\(title)"],
                environment: environment)
            #expect(try await accepted.waitForExit(timeout: .seconds(60)) == 0, "\(accepted.errorOutput)")
            daemon.signal(SIGTERM)
            #expect(try await daemon.waitForExit() == 0)
        }
    }

    /// A disk so full that even the job's failure cannot be saved: the job shows both reasons, and whoever
    /// waits on it is told instead of waiting for good.
    @Test("a job whose failure cannot be recorded still shows failed, and waiters are told")
    func failureThatCannotBeRecorded() async throws {
        try await onSmallDisk(size: "12m") { mountPoint, base in
            // 84,000 small records: the spool (7 MB) fits the 12 MiB disk, the store does not, and the
            // failed chunk leaves no room to record the failure.
            let rows = (0..<84_000).map {
                #"{"key":"KEY-\#($0)","title":"title \#($0)","status":"Open","project":{"key":"K"}}"#
            }
            try (rows.joined(separator: "\n") + "\n").write(
                toFile: base + "/rows.ndjson", atomically: true, encoding: .utf8)
            let daemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", mountPoint, "--runtime-directory", base + "/run"])
            try await daemon.waitForErrorOutput(containing: " ready")
            let environment = ["SQUASHERD_RUNTIME_DIRECTORY": base + "/run"]
            let ctl = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/rows.ndjson", "--wait"], environment: environment)
            #expect(try await ctl.waitForExit(timeout: .seconds(120)) == 2, "\(ctl.output) \(ctl.errorOutput)")
            #expect(ctl.output.first?.contains(" failed: ") == true, "\(ctl.output)")
            #expect(ctl.errorOutput.contains("is full"), "\(ctl.errorOutput)")
            if daemon.errorOutput.contains("its failure cannot be recorded") {
                #expect(ctl.errorOutput.contains("could not be recorded in the store either"), "\(ctl.errorOutput)")
                let jobs = try ChildProcess(
                    name: "jobs", executable: Products.squasherctl, arguments: ["jobs"], environment: environment)
                #expect(try await jobs.waitForExit() == 0)
                #expect(jobs.output.first?.contains(" failed ") == true, "\(jobs.output)")
            } else {
                print("note: the failure was recorded this time; the unrecorded path was not exercised")
            }
            daemon.signal(SIGTERM)
            #expect(try await daemon.waitForExit() == 0)
        }
    }

    /// chattr +i during an import: neither the chunk nor the job's failure can be saved. squasherd names
    /// the mark and how to clear it, and at its next start resumes from the last committed chunk to every
    /// record once; an edit meanwhile is refused as StoreUnavailable.
    @Test("an import onto a store made immutable keeps its spool and resumes at restart")
    func importOntoImmutableStore() async throws {
        try await withDaemon(chunkSize: 500) { squasherd in
            let store = squasherd.directory + "/state/bugs.sqlite"
            let marked = [store, store + "-wal"]
            func mark(_ flag: String) async throws -> ChildProcess {
                let chattr = try ChildProcess(name: "chattr", executable: "/usr/bin/chattr", arguments: [flag] + marked)
                _ = try await chattr.waitForExit()
                return chattr
            }
            // Cleared whatever happens: the squasherd could not remove the directory otherwise.
            defer {
                let clear = Process()
                clear.executableURL = URL(filePath: "/usr/bin/chattr")
                clear.arguments = ["-i"] + marked
                try? clear.run()
                clear.waitUntilExit()
            }
            let count = 60_000
            let records = try squasherd.writeRecords(
                "immutable.ndjson", count: count, prefix: "IMM", title: "immutable")
            guard
                let job = try await squasherd.ctl(["import", records.path]).first?.split(separator: " ").last.map(
                    String.init)
            else {
                Issue.record("squasherctl import printed no job")
                return
            }
            // Once a few chunks are in, the store's files are marked.
            var read: Int64 = 0
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Jobs.Watch", JobParameter(job: job)
            ) { reply in
                read = try reply.parameters(JobReply.self).job.recordsRead
                return read < 2_000
            }
            let marking = try await mark("+i")
            guard marking.exitStatus == 0 else {
                print(
                    "skipped: this file system takes no immutable mark (\(marking.errorOutput.trimmingCharacters(in: .whitespacesAndNewlines)))"
                )
                return
            }
            #expect(read < Int64(count), "the import ended before the store was marked")
            let failed = try await squasherd.ctlError(["jobs", job, "--wait"], expectStatus: 2)
            #expect(failed.contains("is marked immutable (chattr +i)") && failed.contains("chattr -i"), "\(failed)")
            #expect(
                failed.contains("could not be recorded in the store either")
                    && failed.contains("retries it from its last committed chunk"), "\(failed)")
            let edit = try await squasherd.ctlError(["update", "IMM-1", "title=during"], expectStatus: 75)
            #expect(edit.contains("is marked immutable"), "\(edit)")
            // What the message promises needs the input: the spool stays.
            #expect(FileManager.default.fileExists(atPath: squasherd.directory + "/state/spool/\(job).spool"))

            #expect(try await mark("-i").exitStatus == 0)
            #expect(try await squasherd.stop() == 0)
            let daemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: [
                    "--state-directory", squasherd.directory + "/state", "--runtime-directory",
                    squasherd.directory + "/run",
                ])
            defer { daemon.signal(SIGKILL) }
            try await daemon.waitForErrorOutput(containing: " ready")
            let finished = try await squasherd.ctl(["jobs", job, "--wait"])
            #expect(
                finished.first?.contains("finished: ") == true
                    && finished.first?.contains("\(count) imported, 0 rejected") == true, "\(finished)")
            #expect(try await squasherd.ctl(["status"]).joined(separator: "\n").contains("bugs \(count),"))
            daemon.signal(SIGTERM)
            #expect(try await daemon.waitForExit() == 0)
        }
    }

    /// StoreUnavailable (squasherctl: 75), not blaming permissions; the daemon goes on, and imports once a
    /// file is freed.
    @Test("an upload onto a file system out of inodes fails saying so")
    func uploadWithoutFreeInodes() async throws {
        try await onSmallDisk(size: "12m", inodes: 64) { mountPoint, base in
            let daemon = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: ["--state-directory", mountPoint, "--runtime-directory", base + "/run"])
            try await daemon.waitForErrorOutput(containing: " ready")
            var fillers = 0
            while FileManager.default.createFile(atPath: mountPoint + "/filler-\(fillers)", contents: nil) {
                fillers += 1
            }
            #expect(fillers > 0 && fillers < 64)
            try #"{"key":"INODE-1","title":"t","status":"Open","project":{"key":"INODE"}}"#.appending("\n").write(
                toFile: base + "/one.ndjson", atomically: true, encoding: .utf8)
            let environment = ["SQUASHERD_RUNTIME_DIRECTORY": base + "/run"]
            let refused = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/one.ndjson", "--wait"], environment: environment)
            #expect(try await refused.waitForExit(timeout: .seconds(60)) == 75)
            #expect(refused.errorOutput.contains("no free inodes"), "\(refused.errorOutput)")
            #expect(!refused.errorOutput.contains("permissions"), "\(refused.errorOutput)")
            for filler in 0..<min(2, fillers) {
                try FileManager.default.removeItem(atPath: mountPoint + "/filler-\(filler)")
            }
            let accepted = try ChildProcess(
                name: "import", executable: Products.squasherctl,
                arguments: ["import", base + "/one.ndjson", "--wait"], environment: environment)
            #expect(try await accepted.waitForExit(timeout: .seconds(60)) == 0, "\(accepted.errorOutput)")
            daemon.signal(SIGTERM)
            #expect(try await daemon.waitForExit() == 0)
        }
    }

    /// Runs `body` with a size-limited tmpfs (and, given `inodes`, one limited to that many
    /// files) mounted in a fresh directory (`mountPoint`, inside `base`), and unmounts it
    /// afterwards; skips, saying so, where tmpfs cannot be mounted.
    private func onSmallDisk(
        size: String, inodes: Int? = nil, _ body: (_ mountPoint: String, _ base: String) async throws -> Void
    ) async throws {
        let base = try directory()
        let mountPoint = base + "/small"
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let options = "size=\(size)" + (inodes.map { ",nr_inodes=\($0)" } ?? "")
        let mount = try ChildProcess(
            name: "mount", executable: "/bin/mount", arguments: ["-t", "tmpfs", "-o", options, "tmpfs", mountPoint])
        guard try await mount.waitForExit() == 0 else {
            print(
                "skipped: cannot mount a size-limited tmpfs here (\(mount.errorOutput.trimmingCharacters(in: .whitespacesAndNewlines)))"
            )
            return
        }
        do {
            try await body(mountPoint, base)
        } catch {
            await unmount(mountPoint, base: base)
            throw error
        }
        await unmount(mountPoint, base: base)
    }

    private func uploadBomb(mountPoint: String, base: String) async throws {
        // One record, then 40 MiB of newlines: about 40 kB of gzip, more than the 24 MiB disk.
        var bomb = Data(#"{"key":"GB-1","title":"t","status":"Open","project":{"key":"GB"}}"#.utf8)
        bomb.append(Data(repeating: 0x0A, count: 40 << 20))
        try bomb.write(to: URL(filePath: base + "/bomb.ndjson"))
        #expect(
            try await ChildProcess(name: "gzip", executable: "/bin/gzip", arguments: ["-1", base + "/bomb.ndjson"])
                .waitForExit() == 0)
        let daemon = try ChildProcess(
            name: "squasherd", executable: Products.squasherd,
            arguments: ["--state-directory", mountPoint, "--runtime-directory", base + "/run"])
        try await daemon.waitForErrorOutput(containing: " ready")
        let environment = ["SQUASHERD_RUNTIME_DIRECTORY": base + "/run"]
        let ctl = try ChildProcess(
            name: "import bomb", executable: Products.squasherctl,
            arguments: ["import", base + "/bomb.ndjson.gz", "--wait"], environment: environment)
        #expect(try await ctl.waitForExit(timeout: .seconds(120)) == 75)
        #expect(ctl.errorOutput.contains("The upload was stopped after spooling"), "\(ctl.errorOutput)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: mountPoint + "/spool").isEmpty)
        // The store still has room, and the daemon goes on.
        try (#"{"key":"GB-2","title":"t","status":"Open","project":{"key":"GB"}}"# + "\n").write(
            toFile: base + "/small.ndjson", atomically: true, encoding: .utf8)
        let small = try ChildProcess(
            name: "import small", executable: Products.squasherctl,
            arguments: ["import", base + "/small.ndjson", "--wait"], environment: environment)
        #expect(try await small.waitForExit() == 0, "\(small.errorOutput)")
        #expect(small.output.first?.contains("finished: 1 read, 1 imported") == true, "\(small.output)")
        daemon.signal(SIGTERM)
        #expect(try await daemon.waitForExit() == 0)
    }

    private func unmount(_ mountPoint: String, base: String) async {
        _ = try? await ChildProcess(name: "umount", executable: "/bin/umount", arguments: [mountPoint]).waitForExit()
        try? FileManager.default.removeItem(atPath: base)
    }

    private func importOntoFullDisk(mountPoint: String, base: String) async throws {
        let daemon = try ChildProcess(
            name: "squasherd", executable: Products.squasherd,
            arguments: ["--state-directory", mountPoint, "--runtime-directory", base + "/run", "--chunk-size", "200"])
        let deadline = ContinuousClock.now + .seconds(30)
        while !daemon.errorOutput.contains(" ready"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let environment = ["SQUASHERD_RUNTIME_DIRECTORY": base + "/run"]
        // Small records: the spool (about 1.3 MB) fits, the store and its WAL do not.
        let rows = (1...6_000).map {
            #"{"key":"DF-\#($0)","title":"Disk full \#($0) \#(String(repeating: "x", count: 150))","status":"Open","labels":[],"project":{"key":"DF"},"components":[],"comments":[]}"#
        }
        try (rows.joined(separator: "\n") + "\n").write(
            toFile: base + "/rows.ndjson", atomically: true, encoding: .utf8)
        let ctl = try ChildProcess(
            name: "import", executable: Products.squasherctl, arguments: ["import", base + "/rows.ndjson", "--wait"],
            environment: environment)
        let status = try await ctl.waitForExit(timeout: .seconds(120))
        #expect(status == 2, "\(ctl.output) \(ctl.errorOutput)")
        #expect(ctl.errorOutput.contains("full") || ctl.errorOutput.contains("disk"), "\(ctl.errorOutput)")
        // Still serving; what was committed is there, consistently counted.
        let jobs = try ChildProcess(
            name: "jobs", executable: Products.squasherctl, arguments: ["jobs", "--json"], environment: environment)
        #expect(try await jobs.waitForExit() == 0)
        let job = try #require(
            try JSONDecoder().decode(JobsReply.self, from: Data(jobs.output.joined().utf8)).jobs.first)
        #expect(job.state == .failed)
        #expect(job.imported > 0, "chunks before the disk filled up stay committed: \(job)")
        #expect(job.error?.contains("is full") == true, "\(job)")
        // Still serving, and saying it is degraded, and why: `status` exits 5.
        let health = try ChildProcess(
            name: "status", executable: Products.squasherctl, arguments: ["status", "--json"], environment: environment)
        #expect(try await health.waitForExit() == 5, "\(health.errorOutput)")
        let reply = try JSONDecoder().decode(StatusReply.self, from: Data(health.output.joined().utf8))
        #expect(reply.health == "degraded", "\(reply)")
        #expect(reply.problems?.contains { $0.code == "job-failed" } == true, "\(String(describing: reply.problems))")
        let count = try ChildProcess(
            name: "count", executable: Products.squasherctl, arguments: ["list", "--count"], environment: environment)
        #expect(try await count.waitForExit() == 0)
        #expect(Int64(count.output.joined()) == job.imported, "bugs \(count.output) vs job \(job)")
        daemon.signal(SIGTERM)
        _ = try await daemon.waitForExit()
    }
}

/// Apart from the serialized suite of disk faults, since it waits out squasherd's 30 s busy
/// timeout.
@Suite("End to end: an edit behind another program's write lock")
struct LockedEditTests {
    /// After the 30 s busy timeout it is refused (squasherctl: 75) with the reason, and logged; once the
    /// lock is gone the edit goes through.
    @Test("an edit behind another program's write lock times out as StoreUnavailable")
    func editBehindForeignLock() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("locked-edit.ndjson", count: 1, prefix: "LOCKED", title: "before")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let locker = try StoreLocker(store: squasherd.directory + "/state/bugs.sqlite")
            try await locker.lock()
            let refused = try await squasherd.ctlError(["update", "LOCKED-1", "title=during"], expectStatus: 75)
            #expect(refused.contains("has held the write lock"), "\(refused)")
            try await squasherd.waitForLog("an edit could not be saved")
            #expect(try await locker.release() == 0, "\(locker.errorOutput)")
            try await squasherd.ctl(["update", "LOCKED-1", "title=after"])
            #expect(try await squasherd.ctl(["get", "LOCKED-1"]).contains("  title: after"))
        }
    }
}

/// An `sqlite3` process that takes a store's write lock when told and keeps it until released,
/// as another program on the same file might (a shell left in a transaction, a backup tool).
struct StoreLocker {
    private let input: ChildPipe
    private let process: ChildProcess

    init(store: String) throws {
        input = try ChildPipe()
        process = try ChildProcess(
            name: "sqlite3", executable: "/usr/bin/sqlite3", arguments: [store], stdin: input.reading)
    }

    /// Takes the write lock, waiting for a transaction of squasherd's in progress to end.
    func lock() async throws {
        try requestLock()
        try await locked()
    }

    /// Asks sqlite3 for the write lock without waiting: for a caller that cannot await, such as
    /// a stream's reply handler; ``locked()`` waits for it.
    func requestLock() throws {
        try input.writing.write(contentsOf: Data(".timeout 30000\nBEGIN EXCLUSIVE;\n.print locked\n".utf8))
    }

    /// Waits until the lock asked for is held.
    func locked() async throws {
        _ = try await process.waitForLine { $0 == "locked" }
    }

    /// Releases the lock and ends the process; its exit status.
    func release() async throws -> Int32 {
        try input.writing.write(contentsOf: Data("COMMIT;\n.quit\n".utf8))
        return try await process.waitForExit(timeout: .seconds(60))
    }

    /// What it wrote to stderr.
    var errorOutput: String { process.errorOutput }
}
