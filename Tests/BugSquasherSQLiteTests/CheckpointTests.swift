import BugSquasherGraph
import Foundation
import Synchronization
import Testing

@testable import BugSquasherSQLite

/// The WAL is copied back into the database file beside the writer's commits, not in them.
@Suite("SQLite store checkpoints")
struct CheckpointTests {
    /// The checkpoint also starts the WAL over between two saves; the WAL stays bounded while more is
    /// written than it may hold.
    @Test("saves past 1,000 WAL pages are checkpointed in the background, bounding the WAL")
    func backgroundCheckpoints() async throws {
        // One save right after the other, as an import's chunks. SQLite starts the WAL over only
        // when a write begins after a checkpoint that copied all of it; here the next save has
        // often begun already. Without the checkpointer's restarts the writer then checkpoints
        // in its commit once past `writerFrames` (three times in this test). With them it rarely
        // does: how often depends on timing, so only the restarts are asserted.
        let (counts, largestWAL) = try await writeNotes()
        #expect(counts.background > 0)
        #expect(counts.restarts > 0, "\(counts)")
        // Unbounded, the WAL would reach about 60 MB (15,000 pages). Past `writerFrames` it is
        // started over at the first write after a checkpoint with no reader in it; on a machine
        // busy with the rest of the suite the background checkpoint itself was that reader for a
        // few saves in a row (22.8 MB in one run, 27.2 MB in a CI run), so the bound allows
        // sixteen saves of ~250 pages, still well short of the unbounded size.
        let limit = Int(BackgroundCheckpointer.writerFrames + 4_000) * 4_096
        #expect(largestWAL < limit, "the WAL reached \(largestWAL) bytes")
    }

    /// Right after a large save.
    @Test("the final checkpoint waits for a background one it meets, then truncates the WAL")
    func finalCheckpointAfterLargeSave() async throws {
        // A save past 1,000 WAL pages starts a background checkpoint; a TRUNCATE checkpoint that
        // meets it holding SQLite's checkpoint lock would fail at once with SQLITE_BUSY (a
        // daemon stopped right after a large save logged "checkpoint failed").
        let notes = try NotesStore()
        defer { notes.remove() }
        for save in 0..<5 {
            try await notes.save(batch: save, count: 1_200)
            try notes.store.checkpoint()
            #expect(notes.walSize == 0, "the WAL holds \(notes.walSize) bytes after the checkpoint of save \(save)")
        }
        #expect(notes.store.checkpointCounts().background >= 5)
    }

    /// The window of an interactive save (import_yield_ms).
    @Test("a background checkpoint requested in an edit window waits for its end")
    func checkpointWaitsOutTheEditWindow() async throws {
        // Right after an edit commits, its subscribers refresh; a checkpoint's copy and fsync
        // would share the machine with them. A small save starts the window, a large one right
        // after it requests a checkpoint: the checkpoint runs only once the window has passed.
        let window = Duration.seconds(1)
        let notes = try NotesStore(editsFirst: EditsFirst(window: window))
        defer { notes.remove() }
        try await notes.save(batch: 0, count: 1)
        let windowStarted = ContinuousClock.now
        try await notes.save(batch: 1, count: 1_200)
        let counts = notes.store.checkpointCounts()  // waits for the checkpoint requested
        let waited = ContinuousClock.now - windowStarted
        #expect(counts.background >= 1)
        // Without the wait, the checkpoint ended right after the large save, 0.1 to 0.3 s in.
        #expect(waited >= window * 0.8, "the checkpoint ended \(waited) after the window started")
    }

    /// Interrupted while copying, when the save gets the writer; the try after an interrupted one is not
    /// stopped.
    @Test("an interactive save interrupts a background checkpoint, which runs again")
    func interactiveSaveInterruptsACheckpoint() async throws {
        // Each interactive save calls `giveWay()` when it gets the writer; here a thread calls it
        // without end, so that the copy meets it for certain.
        let notes = try NotesStore(editsFirst: EditsFirst(window: .milliseconds(20)))
        defer { notes.remove() }
        let interrupter = Repeating { notes.store.checkpointer.giveWay() }
        try await notes.save(batch: 0, count: 1_200)  // past 1,000 WAL pages: a checkpoint
        let counts = notes.store.checkpointCounts()
        interrupter.stop()
        // Without the interrupt: 0 interrupted. Without the bound every try is interrupted, and
        // none runs to its end.
        #expect(counts.interrupted == 1)
        #expect(counts.background == 1, "the checkpoint did not run again after its interrupt")
        try notes.store.checkpoint()
        #expect(notes.walSize == 0)
        #expect(try notes.store.integrityCheck() == ["ok"])
    }

    /// 60 saves of 250 notes of 4 KB: about 60 MB, some 15,000 pages, over three times what the
    /// WAL may hold before the writer starts it over. Returns the checkpoint counts and the largest WAL
    /// seen after a save.
    private func writeNotes() async throws -> (BackgroundCheckpointer.Counts, Int) {
        let notes = try NotesStore()
        defer { notes.remove() }
        var largestWAL = 0
        for save in 0..<60 {
            try await notes.save(batch: save, count: 250)
            largestWAL = max(largestWAL, notes.walSize)
        }
        let counts = notes.store.checkpointCounts()
        #expect(try notes.store.integrityCheck() == ["ok"])
        return (counts, largestWAL)
    }
}

/// Calls a closure on a thread of its own, again and again, until ``stop()``.
private final class Repeating: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let ended = DispatchSemaphore(value: 0)

    init(_ body: @escaping @Sendable () -> Void) {
        Thread.detachNewThread { [self] in
            while !stopped.load(ordering: .relaxed) { body() }
            ended.signal()
        }
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        ended.wait()
    }
}

/// A store of 4 KB notes in a temporary directory.
private struct NotesStore {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-wal-\(UUID().uuidString)")
    let url: URL
    let store: SQLiteStore
    let coordinator: StoreCoordinator

    init(editsFirst: EditsFirst? = nil) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        url = directory.appendingPathComponent("wal.sqlite")
        store = try SQLiteStore(url: url, editsFirst: editsFirst)
        let model = try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Note", uniqueKey: "key", attributes: [.attribute("key", .string), .attribute("body", .string)])
        ])
        coordinator = try StoreCoordinator(model: model, store: store)
    }

    /// Inserts `count` notes in one save.
    func save(batch: Int, count: Int) async throws {
        let body = String(repeating: "x", count: 4_000)
        let context = ObjectContext(coordinator: coordinator)
        try await context.perform { context in
            for index in 0..<count {
                let note = try context.insert(entityNamed: "Note")
                note.setValue(.string("N-\(batch)-\(index)"), for: "key")
                note.setValue(.string(body), for: "body")
            }
        }
        try await context.saveAndRetire()
    }

    /// The WAL file's size in bytes.
    var walSize: Int { (try? FileManager.default.attributesOfItem(atPath: url.path + "-wal")[.size] as? Int) ?? 0 }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}
