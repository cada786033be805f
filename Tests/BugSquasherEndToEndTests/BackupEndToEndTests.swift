import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Testing

/// `squasherctl backup` during an import, and `squasherd --restore`.
@Suite("End to end: backup and restore")
struct BackupEndToEndTests {
    /// What a backup file holds, read with Python's sqlite3 (not BugSquasher's code): the bugs
    /// of the import, the job's recorded progress, the newest token.
    private static let inspector = #"""
        import json, sqlite3, sys
        db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
        bugs = db.execute('SELECT count(*) FROM "Bug" WHERE "key" LIKE ?', (sys.argv[3] + "-%",)).fetchone()[0]
        job = db.execute('SELECT "imported", "state" FROM "ImportJob" WHERE "jobID" = ?', (sys.argv[2],)).fetchone()
        token = db.execute("SELECT max(token) FROM bs_history").fetchone()[0]
        print(json.dumps({"bugs": bugs, "imported": job[0] if job else -1, "state": job[1] if job else "", "token": token}))
        """#

    private struct Inspection: Decodable {
        var bugs: Int
        var imported: Int
        var state: String
        var token: Int64
    }

    @Test("a backup taken during an import holds every chunk up to its token; a restore serves it")
    func backupDuringImportAndRestore() async throws {
        try await withDaemon(chunkSize: 100) { squasherd in
            let first = try squasherd.writeRecords("a.ndjson", count: 500, prefix: "A", title: "before")
            try await squasherd.ctl(["import", first.path, "--wait"])
            let second = try squasherd.writeRecords("b.ndjson", count: 30_000, prefix: "B", title: "during")
            let job = try #require(try await squasherd.ctl(["import", second.path]).last)
            _ = try await poll(for: .seconds(60)) {
                try squasherd.status().activeJob.flatMap { $0.imported > 0 ? $0 : nil }
            }
            let file = squasherd.directory + "/backup.sqlite"
            let said = try await squasherd.ctl(["backup", file]).joined()
            let token = try #require(said.firstMatch(of: /at history token (\d+):/).flatMap { Int64($0.1) }, "\(said)")
            #expect(said.contains("integrity ok"), "\(said)")
            // Consistent: the job's progress and its chunks, committed together, up to the token.
            let inspect = try ChildProcess(
                name: "inspect", executable: "/usr/bin/python3", arguments: ["-c", Self.inspector, file, job, "B"])
            #expect(try await inspect.waitForExit() == 0, "\(inspect.errorOutput)")
            let held = try JSONDecoder().decode(Inspection.self, from: Data(inspect.output.joined().utf8))
            #expect(held.token == token)
            #expect(held.bugs == held.imported && held.bugs > 0, "\(held)")
            let final = try await squasherd.ctl(["jobs", job, "--wait"])
            #expect(final.joined().contains("30000 imported"), "\(final)")
            let before = try squasherd.status()
            // The backup was taken mid-import: restored, the store goes back to it.
            #expect(try await squasherd.stop() == 0)
            let restore = try ChildProcess(
                name: "squasherd --restore", executable: Products.squasherd,
                arguments: [
                    "--restore", file, "--state-directory", squasherd.directory + "/state", "--runtime-directory",
                    squasherd.directory + "/run",
                ])
            #expect(try await restore.waitForExit() == 0, "\(restore.errorOutput)")
            #expect(restore.output.joined().contains("Restored \(file)"), "\(restore.output)")
            try await squasherd.restart()
            let after = try squasherd.status()
            #expect(after.bugs == 500 + held.bugs, "\(after.bugs) bugs after the restore, \(held)")
            // Tokens go on after every token issued before; a reader from before must refetch.
            #expect(after.token > before.token)
            let refused = try squasherd.refusal(
                "io.bugsquasher.Changes.History", HistoryParameters(after: before.token))
            #expect(refused.name == "io.bugsquasher.Changes.HistoryExpired", "\(refused)")
            // The job that was running in the backup is not half-applied: it ends, one way or the other.
            let ended = try await poll(for: .seconds(60)) { () -> WireJob? in
                let current = try squasherd.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self)
                    .job
                return current.isFinal ? current : nil
            }
            #expect(ended != nil, "the restored job \(job) never ended")
            #expect(try squasherd.status().bugs == 500 + Int(ended?.imported ?? 0), "\(String(describing: ended))")
        }
    }
}
