import Algorithms
import ArgumentParser
import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherStack
import Foundation
import Synchronization

/// The runnable example of the object graph: imports bug data through importer contexts in
/// chunks, while the stack's main context holds a few bugs registered; after every chunk it
/// prints what the automatic smart merge refreshed — only those registered bugs, nothing else.
@main
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bugsquasher-demo",
        abstract: "Import bug data through the object graph and show what a registered-only merge refreshes."
    )

    @Option(help: "A Jira NDJSON file (one issue per line). Without it, Jira-like issues are generated.")
    var input: String?

    @Option(help: "The SQLite store file (replaced on each run).")
    var store = "run/demo.sqlite"

    @Option(help: "Records per chunk: one importer context and one transaction each.")
    var chunk = 200

    @Option(help: "How many issues to generate when there is no input file.")
    var generate = 1_000

    @Option(help: "How many bugs the main context holds registered while the import runs.")
    var watch = 5

    @Option(help: "Instead of the demo, write this many generated issues as BugSquasher NDJSON to standard output.")
    var emitNDJSON: Int?

    mutating func validate() throws {
        guard chunk > 0, generate > 0, watch >= 0 else {
            throw ValidationError("--chunk and --generate must be positive, --watch not negative.")
        }
        if let input, !FileManager.default.isReadableFile(atPath: input) {
            throw ValidationError(
                "Cannot read \(input): pass a readable Jira NDJSON file, or leave --input out to generate data.")
        }
    }

    func run() async throws {
        if let count = emitNDJSON {
            try Self.writeNDJSON(count: count)
            return
        }
        let storeURL = URL(filePath: store)
        try FileManager.default.createDirectory(
            at: storeURL.deletingLastPathComponent(), withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store + suffix) }
        let stack = try PersistentStack(model: BugModel.model, storeURL: storeURL)
        let records = try loadRecords()
        print("BugSquasher object-graph demo")
        print("  store:  \(store)")
        print(
            "  input:  \(input ?? "generated (\(generate) Jira-like issues)") — \(records.count) records, chunks of \(chunk)"
        )

        // Pass 1: the first import.
        let first = try await importAll(records, into: stack, label: "import")
        print("  imported: \(first.inserted) inserted, \(first.updated) updated, \(first.unchanged) unchanged")

        // The main context registers a few bugs, as a dashboard would.
        let watched = try await registerWatched(records, in: stack)
        try await reimportEdited(records, into: stack, watching: watched.count)
    }

    /// Writes `count` generated issues as BugSquasher NDJSON to standard output.
    private static func writeNDJSON(count: Int) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var start = 1
        while start <= count {
            let batch = SampleIssues.generate(count: min(1_000, count - start + 1), startingAt: start)
            let text =
                try batch.map { String(decoding: try encoder.encode($0), as: UTF8.self) }.joined(separator: "\n")
                + "\n"
            FileHandle.standardOutput.write(Data(text.utf8))
            start += batch.count
        }
    }

    /// Registers the first bugs of `records` in the main context, as a dashboard would; returns
    /// their IDs, keys and statuses.
    private func registerWatched(
        _ records: [BugRecord], in stack: PersistentStack
    ) async throws -> [(ObjectID, String, String)] {
        let watchedKeys = Array(records.map(\.key).prefix(watch))
        let watched = try await stack.mainContext.perform { context in
            try context.fetch(
                FetchRequest<Bug>(
                    predicate: Key("key").in(watchedKeys.map { .string($0) }), sort: [Key("key").ascending])
            )
            .map { bug in (bug.objectID, bug.key, bug.status) }
        }
        print("\nmain context registers \(watched.count) bugs:")
        for (_, key, status) in watched { print("  \(key): \(status)") }
        return watched
    }

    /// Imports `records` again with every third one edited, and shows what the main context,
    /// holding `watching` bugs registered, refreshed.
    private func reimportEdited(_ records: [BugRecord], into stack: PersistentStack, watching: Int) async throws {
        // Pass 2: the same data again with every third record edited; the main context is merged
        // after every chunk and refreshes only what it registered.
        let refreshedKeys = Mutex<[ObjectID]>([])
        stack.observeMainContextMerges { result in refreshedKeys.withLock { $0 += result.refreshed } }
        let edited = records.enumerated().map { index, record -> BugRecord in
            guard index % 3 == 0 else { return record }
            var record = record
            record.status = record.status == "Closed" ? "Reopened" : "Closed"
            return record
        }
        print("\nre-importing with every third record edited (\(edited.count / 3 + 1) changes):")
        let second = try await importAll(edited, into: stack, label: "re-import")
        print("  re-imported: \(second.updated) updated, \(second.unchanged) unchanged")
        let refreshed = refreshedKeys.withLock { $0 }
        let report = await stack.mainContext.perform { context in
            (
                context.registeredObjectIDs.count,
                refreshed.compactMap { (context.registeredObject(for: $0) as? Bug).map { "\($0.key): \($0.status)" } }
            )
        }
        print(
            "\nsmart merge into the main context: \(refreshed.count) refreshed of \(second.updated) updated in the store; registered objects: \(report.0)"
        )
        for line in report.1 { print("  refreshed \(line)") }
        print(
            "\nDone. Nothing outside the \(watching) registered bugs (and their related faults) was loaded by the main context."
        )
    }

    private func loadRecords() throws -> [BugRecord] {
        guard let input else { return SampleIssues.generate(count: generate) }
        let reader = try LineReader(path: input)
        let decoder = JiraIssueDecoder()
        var records: [BugRecord] = []
        var rejected = 0
        for (line, bytes) in reader {
            do { records.append(try decoder.decode(bytes, line: line)) } catch {
                rejected += 1
                FileHandle.standardError.write(Data("line \(line): \(error)\n".utf8))
            }
        }
        if let error = reader.error { throw error }
        if rejected > 0 { print("  \(rejected) lines rejected (see stderr)") }
        return records
    }

    private func importAll(_ records: [BugRecord], into stack: PersistentStack, label: String) async throws
        -> UpsertSummary
    {
        var total = UpsertSummary()
        let upserter = BugUpserter()
        let clock = ContinuousClock.now
        for slice in records.chunks(ofCount: self.chunk) {
            let chunk = Array(slice)
            let importer = stack.importerContext()
            total += try await importer.perform { context in try upserter.upsert(chunk, in: context) }
            let didSave = try await importer.save()
            let done = slice.endIndex
            print(
                "  \(label): \(done)/\(records.count) records, token \(didSave.map { "\($0.token)" } ?? "-"), \(String(format: "%.1f", Double(done) / max((ContinuousClock.now - clock) / .seconds(1), 0.001))) records/s"
            )
        }
        return total
    }
}
