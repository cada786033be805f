import Testing

@testable import BugSquasherDaemon

/// Which edits commit together, decided with plain tickets and objects: no store.
@Suite("Edit batches")
struct EditBatchesTests {
    /// An edit that finds no batch committing goes at once, alone; the next batch is formed
    /// only when that one is done.
    @Test("the first edit goes alone; those arriving meanwhile wait and go together")
    func waitWhileCommitting() {
        var batches = EditBatches<Int, String>(limit: 16)
        #expect(batches.arrived(1, editing: "a") == [1])
        #expect(batches.isCommitting)
        #expect(batches.arrived(2, editing: "b") == nil)
        #expect(batches.arrived(3, editing: "c") == nil)
        #expect(batches.waitingCount == 2)
        #expect(batches.finished() == [2, 3])
        #expect(batches.isCommitting)
        #expect(batches.finished() == nil)
        #expect(!batches.isCommitting)
        // Idle again: the next edit goes at once.
        #expect(batches.arrived(4, editing: "a") == [4])
    }

    /// An object's second edit waits for the batch after its first, and so does every later
    /// edit of it: its edits apply in the order they came.
    @Test("one edit per object per batch, in the order they came")
    func onePerObject() {
        var batches = EditBatches<Int, String>(limit: 16)
        _ = batches.arrived(0, editing: "x")
        for (ticket, object) in [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "a"), (6, "b")] {
            #expect(batches.arrived(ticket, editing: object) == nil)
        }
        #expect(batches.finished() == [1, 2, 4])
        #expect(batches.finished() == [3, 6])
        #expect(batches.finished() == [5])
        #expect(batches.finished() == nil)
    }

    /// A batch holds at most `limit` edits; the rest keep their order for the next.
    @Test("a batch holds at most its limit")
    func limit() {
        var batches = EditBatches<Int, Int>(limit: 3)
        _ = batches.arrived(0, editing: 0)
        for ticket in 1...7 { _ = batches.arrived(ticket, editing: ticket) }
        #expect(batches.finished() == [1, 2, 3])
        #expect(batches.finished() == [4, 5, 6])
        #expect(batches.finished() == [7])
        #expect(batches.finished() == nil)
        // A limit below one is one.
        var single = EditBatches<Int, Int>(limit: 0)
        #expect(single.arrived(1, editing: 1) == [1])
        _ = single.arrived(2, editing: 2)
        #expect(single.finished() == [2])
    }
}
