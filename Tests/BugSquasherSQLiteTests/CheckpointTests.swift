import BugSquasherGraph
@testable import BugSquasherSQLite
import Foundation
import Testing

/// The WAL is copied back into the database file beside the writer's commits, not in them.
@Suite("SQLite store checkpoints")
struct CheckpointTests {
    @Test("saves past 1,000 WAL pages are checkpointed in the background, which also starts the WAL over between two saves; the WAL stays bounded while more is written than it may hold")
    func backgroundCheckpoints() async throws {
        // One save right after the other, as an import's chunks. SQLite starts the WAL over only
        // when a write begins after a checkpoint that copied all of it; here the next save has
        // often begun already. Without the checkpointer's restarts the writer then checkpoints
        // in its commit once past `writerFrames` (twice in this test). With them it rarely
        // does: how often depends on timing, so only the restarts are asserted.
        let (counts, largestWAL) = try await writeNotes()
        #expect(counts.background > 0)
        #expect(counts.restarts > 0)
        let limit = Int(BackgroundCheckpointer.writerFrames + 1_000) * 4_096
        #expect(largestWAL < limit, "the WAL reached \(largestWAL) bytes")
    }

    /// 40 saves of 250 notes of 4 KB: about 40 MB, some 10,000 pages, over twice what the WAL may
    /// hold before the writer starts it over. Returns the checkpoint counts and the largest WAL
    /// seen after a save.
    private func writeNotes() async throws -> (BackgroundCheckpointer.Counts, Int) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-wal-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("wal.sqlite")
        let store = try SQLiteStore(url: url)
        let model = try ManagedObjectModel(entities: [
            EntityDescription(name: "Note", uniqueKey: "key", attributes: [.attribute("key", .string), .attribute("body", .string)]),
        ])
        let coordinator = try StoreCoordinator(model: model, store: store)
        let body = String(repeating: "x", count: 4_000)
        var largestWAL = 0
        for save in 0..<40 {
            let context = ObjectContext(coordinator: coordinator)
            try await context.perform { context in
                for index in 0..<250 {
                    let note = try context.insert(entityNamed: "Note")
                    note.setValue(.string("N-\(save)-\(index)"), for: "key")
                    note.setValue(.string(body), for: "body")
                }
            }
            try await context.saveAndRetire()
            let wal = (try? FileManager.default.attributesOfItem(atPath: url.path + "-wal")[.size] as? Int) ?? 0
            largestWAL = max(largestWAL, wal)
        }
        let counts = store.checkpointCounts()
        #expect(try store.integrityCheck() == ["ok"])
        return (counts, largestWAL)
    }
}
