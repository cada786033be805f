import BugSquasherTesting
import Foundation
import Testing

/// squasherd's metrics, scraped over HTTP with a client nobody here wrote (Python's urllib) and
/// parsed with the PyPI `prometheus-client` parser, during an import.
@Suite("End to end: metrics")
struct MetricsEndToEndTests {
    /// A python3 with prometheus_client (scripts/setup.sh installs it into .build/venv).
    private func python() -> String? {
        let venv = Products.packageRoot.appendingPathComponent(".build/venv/bin/python3").path
        guard FileManager.default.isExecutableFile(atPath: venv) else {
            print("skipped: .build/venv has no python3 (scripts/setup.sh makes it)")
            return nil
        }
        return venv
    }

    /// Reads the scrape, checks every sample parses, and prints `name value` for the samples
    /// asked for (the sum over their labels), as JSON.
    private static let scraper = #"""
        import json, sys, urllib.request
        from prometheus_client.parser import text_string_to_metric_families
        with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
            kind = response.headers["Content-Type"]
            text = response.read().decode()
        values, types = {}, {}
        for family in text_string_to_metric_families(text):
            types[family.name] = family.type
            for sample in family.samples:
                values[sample.name] = values.get(sample.name, 0) + sample.value
        print(json.dumps({"contentType": kind, "values": values, "types": types}))
        """#

    private struct Scrape: Decodable {
        var contentType: String
        var values: [String: Double]
        var types: [String: String]
    }

    @Test("a scrape during an import parses, and its counters move")
    func scrapeDuringImport() async throws {
        guard let python = python() else { return }
        let port = Int.random(in: 30_000...39_999)
        try await withDaemon(chunkSize: 100, configuration: "metrics_listen = 127.0.0.1:\(port)\n") { squasherd in
            try await squasherd.waitForLog("serving metrics")
            func scrape() async throws -> Scrape {
                let process = try ChildProcess(
                    name: "scrape", executable: python,
                    arguments: ["-c", Self.scraper, "http://127.0.0.1:\(port)/metrics"])
                #expect(try await process.waitForExit() == 0, "\(process.errorOutput)")
                return try JSONDecoder().decode(Scrape.self, from: Data(process.output.joined().utf8))
            }
            let before = try await scrape()
            let records = try squasherd.writeRecords("m.ndjson", count: 20_000, prefix: "M", title: "measured")
            let job = try #require(try await squasherd.ctl(["import", records.path]).last)
            // During the import, or just after it on a fast machine.
            let during = try await scrape()
            #expect(during.contentType.hasPrefix("text/plain; version=0.0.4"))
            #expect(during.types["squasherd_import_chunk_commit_duration_seconds"] == "histogram", "\(during.types)")
            #expect(during.types["squasherd_import_records_read"] == "counter", "\(during.types)")
            #expect((during.values["process_resident_memory_bytes"] ?? 0) > 1_000_000)
            #expect((during.values["process_open_fds"] ?? 0) > 5)
            #expect((during.values["squasherd_store_size_bytes"] ?? 0) > 0)
            _ = try await squasherd.ctl(["jobs", job, "--wait"])
            let after = try await scrape()
            #expect(after.values["squasherd_import_records_read_total"] == 20_000, "\(after.values)")
            #expect(after.values["squasherd_import_records_imported_total"] == 20_000)
            #expect(after.values["squasherd_import_chunks_total"] == 200)
            #expect(after.values["squasherd_import_chunk_commit_duration_seconds_count"] == 200)
            #expect(after.values["squasherd_import_jobs"] == 1)
            #expect((after.values["squasherd_history_token"] ?? 0) >= 200)
            // What only a shared store (PostgreSQL) has is not reported: a reachable gauge of 0
            // would read as an outage.
            #expect(after.values["squasherd_store_reachable"] == nil, "\(after.values)")
            #expect(after.values["squasherd_store_daemons"] == nil)
            // 20,000 records write more than the 1,000 WAL pages after which a background
            // checkpoint runs.
            #expect(after.types["squasherd_store_checkpoint_duration_seconds"] == "histogram", "\(after.types)")
            #expect((after.values["squasherd_store_checkpoint_duration_seconds_count"] ?? 0) >= 1, "\(after.values)")
            #expect(
                (after.values["squasherd_saves_committed_total"] ?? 0)
                    > (before.values["squasherd_saves_committed_total"] ?? 0))
            // squasherctl metrics prints the same text, over the read socket.
            let text = try await squasherd.ctl(["metrics"]).joined(separator: "\n")
            #expect(text.contains("# TYPE squasherd_import_records_read_total counter"), "\(text.prefix(2000))")
            #expect(text.contains("squasherd_import_records_read_total 20000"))
        }
    }
}
