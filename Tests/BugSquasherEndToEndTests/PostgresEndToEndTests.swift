import BugSquasherProtocol
import BugSquasherTesting
import Foundation
import Testing

/// squasherd with `store = postgresql://…`, on the server scripts/test.sh starts.
@Suite("End to end: squasherd on PostgreSQL", .serialized)
struct PostgresEndToEndTests {
    /// The store line of a configuration: a schema of its own on the test server; `nil` when
    /// no server was given.
    private func storeLine() -> String? {
        guard let url = ProcessInfo.processInfo.environment["BUGSQUASHER_POSTGRES_URL"] else {
            print("skipped: BUGSQUASHER_POSTGRES_URL is not set (scripts/test.sh starts a server)")
            return nil
        }
        return "store = \(url)&schema=e2e_\(UUID().uuidString.prefix(8).lowercased())\n"
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
