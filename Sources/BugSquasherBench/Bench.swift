import ArgumentParser
import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherSQLite
import BugSquasherStack
import Foundation
import GRDB
import Logging

/// Imports the same bug rows two ways in one run and prints rows/s and their ratio:
/// raw GRDB prepared-statement inserts in chunks, and importer contexts through the object
/// graph (`PersistentStack.importerContext()`, one context and one save per chunk).
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bugsquasher-bench",
        abstract: "Object-graph import throughput against raw SQLite inserts, measured in the same run."
    )

    @Option(help: "How many bug rows to import.")
    var rows = 100_000

    @Option(help: "Rows per chunk (one transaction, and one importer context, per chunk).")
    var chunk = 1_000

    @Option(help: "Key order: sequential, random, or both.")
    var order = "both"

    @Option(help: "What to run: both (raw, then graph, and their ratio), raw, or graph (for a clean peak-RSS figure).")
    var mode = "both"

    @Option(help: "Directory for the store files (a fresh temporary one by default).")
    var directory: String?

    @Option(
        help:
            "Instead: the write side's floor. Reads the rows of the squasherd store FILE, then times their insert into an empty store of the same schema through SQLite's C API, --chunk bugs per transaction."
    )
    var floor: String?

    @Option(
        help:
            "Instead: decoding alone. Decodes every line of the uncompressed Jira NDJSON FILE as squasherd's importer does and prints the time: for profiling the decoder (valgrind --tool=callgrind counts its instructions)."
    )
    var decode: String?

    @Option(
        help:
            "Instead: concurrent edits (section h). One writer per ID in --edit-ids, each on its own connection to one of these comma-separated write sockets, editing its bug's status for --edit-seconds; prints the edits answered per second."
    )
    var editLoad: String?

    @Option(
        name: .customLong("edit-ids"), help: "With --edit-load: a file of object ID URIs, one per line, a writer each.")
    var editIDs: String?

    @Option(help: "With --edit-load: how long the writers run, in seconds.")
    var editSeconds = 10.0

    mutating func validate() throws {
        guard rows > 0, chunk > 0 else { throw ValidationError("--rows and --chunk must be positive.") }
        guard ["sequential", "random", "both"].contains(order) else {
            throw ValidationError("--order is sequential, random or both.")
        }
        guard ["both", "raw", "graph"].contains(mode) else { throw ValidationError("--mode is both, raw or graph.") }
    }

    func run() async throws {
        let base =
            directory.map { URL(filePath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("bugsquasher-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { if directory == nil { try? FileManager.default.removeItem(at: base) } }
        if let editLoad {
            guard let editIDs, editSeconds > 0 else {
                throw ValidationError("--edit-load needs --edit-ids FILE and a positive --edit-seconds.")
            }
            let ids = try String(contentsOfFile: editIDs, encoding: .utf8).split(separator: "\n").map(String.init)
            let (edits, seconds) = try EditLoad(
                sockets: editLoad.split(separator: ",").map(String.init), ids: ids, seconds: editSeconds
            ).run()
            print(String(format: "edits: %d in %.3f seconds, %.1f per second", edits, seconds, Double(edits) / seconds))
            return
        }
        if let decode {
            let (seconds, issues) = try DecodeOnly(path: decode).run()
            print(String(format: "decode: %.3f seconds, %d issues", seconds, issues))
            return
        }
        if let floor {
            let (seconds, counts) = try FloorImport(source: floor, chunk: chunk).run(
                into: base.appendingPathComponent("floor-\(UUID().uuidString.prefix(8)).sqlite").path)
            let rows = counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            print(String(format: "floor: %.3f seconds, ", seconds) + rows)
            return
        }
        print("rows=\(rows) chunk=\(chunk) mode=\(mode)")
        print("order       path          rows/s     seconds   ratio (graph/raw)")
        for randomOrder in order == "both" ? [false, true] : [order == "random"] {
            let data = BenchRows(count: rows, randomOrder: randomOrder)
            let name = randomOrder ? "random" : "sequential"
            let label = name.padding(toLength: 10, withPad: " ", startingAt: 0)
            var raw: Double?
            if mode != "graph" {
                let seconds = try rawInserts(data, at: base.appendingPathComponent("raw-\(name).sqlite"))
                raw = Double(rows) / seconds
                print("\(label)  raw GRDB   \(pad(raw!))  \(pad(seconds, digits: 2))")
            }
            if mode != "raw" {
                let seconds = try await graphImport(data, at: base.appendingPathComponent("graph-\(name).sqlite"))
                let rate = Double(rows) / seconds
                let ratio = raw.map { String(format: "%.2fx", rate / $0) } ?? "-"
                print("\(label)  graph      \(pad(rate))  \(pad(seconds, digits: 2))   \(ratio)")
            }
        }
        print(String(format: "peak RSS: %.1f MiB (VmHWM)", peakRSSMiB()))
    }

    private func pad(_ value: Double, digits: Int = 0) -> String {
        let text = String(format: "%.\(digits)f", value)
        return String(repeating: " ", count: max(0, 9 - text.count)) + text
    }

    /// The baseline: the same table (created by the store), one prepared INSERT per row, one
    /// transaction per chunk, WAL and synchronous=NORMAL like the store.
    private func rawInserts(_ data: BenchRows, at url: URL) throws -> Double {
        _ = try StoreCoordinator(model: BugModel.model, store: SQLiteStore(url: url, logger: quietLogger))
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = NORMAL") }
        let pool = try DatabasePool(path: url.path, configuration: configuration)
        let start = ContinuousClock.now
        var index = 0
        while index < data.count {
            let end = min(data.count, index + chunk)
            try pool.write { db in
                let statement = try db.cachedStatement(
                    sql: """
                        INSERT INTO "Bug" (pk, _version, "key", "jiraID", "title", "details", "status", "resolution", "priority", "type", "labels", "created", "updated", "resolved", "project", "reporter", "assignee")
                        VALUES (?, 1, ?, NULL, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL)
                        """)
                for position in index..<end {
                    let n = data.row(at: position)
                    let v = BenchRows.values(n)
                    try statement.execute(arguments: [
                        position + 1, v.key, v.title, v.details, v.status, v.priority, v.type, v.labels, v.created,
                        v.created,
                    ])
                }
            }
            index = end
        }
        return (ContinuousClock.now - start).seconds
    }

    /// The object-graph path: a fresh importer context per chunk, objects inserted and saved.
    private func graphImport(_ data: BenchRows, at url: URL) async throws -> Double {
        let stack = try PersistentStack(model: BugModel.model, storeURL: url, logger: quietLogger)
        let start = ContinuousClock.now
        var index = 0
        while index < data.count {
            let end = min(data.count, index + chunk)
            let importer = stack.importerContext()
            let range = index..<end
            await importer.perform { context in
                for position in range {
                    let v = BenchRows.values(data.row(at: position))
                    let bug = context.insert(Bug.self)
                    bug.key = v.key
                    bug.title = v.title
                    bug.details = v.details
                    bug.status = v.status
                    bug.priority = v.priority
                    bug.type = v.type
                    bug["labels"] = .string(v.labels)
                    bug.created = Date(timeIntervalSince1970: v.created)
                    bug.updated = Date(timeIntervalSince1970: v.created)
                }
            }
            try await importer.save()
            index = end
            if index % (chunk * 100) == 0 {
                FileHandle.standardError.write(
                    Data(String(format: "  graph: %d rows, RSS %.1f MiB\n", index, currentRSSMiB()).utf8))
            }
        }
        return (ContinuousClock.now - start).seconds
    }
}

/// Warnings and errors only: the benchmark prints a table, not the store's info logs.
let quietLogger: Logger = {
    var logger = Logger(label: "bugsquasher.bench")
    logger.logLevel = .warning
    return logger
}()

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
