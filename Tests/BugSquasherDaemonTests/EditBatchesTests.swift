import Testing

@testable import BugSquasherDaemon

/// Which edits commit together, and when, decided with plain tickets, objects and times: no
/// store, no clock.
@Suite("Edit batches")
struct EditBatchesTests {
    typealias Batches = EditBatches<Int, String>

    /// An edit that finds no batch committing goes at once, alone; the next batch is formed
    /// only when that one is done.
    @Test("the first edit goes alone; those arriving meanwhile wait and go together")
    func waitWhileCommitting() {
        var batches = Batches(limit: 16)
        #expect(batches.arrived(1, editing: "a").commits == [1])
        #expect(batches.isCommitting)
        #expect(batches.arrived(2, editing: "b").waits)
        #expect(batches.arrived(3, editing: "c").waits)
        #expect(batches.waitingCount == 2)
        #expect(batches.finished().commits == [2, 3])
        #expect(batches.isCommitting)
        #expect(batches.finished().isIdle)
        #expect(!batches.isCommitting)
        // Idle again: the next edit goes at once.
        #expect(batches.arrived(4, editing: "a").commits == [4])
    }

    /// An object's second edit waits for the batch after its first, and so does every later
    /// edit of it: its edits apply in the order they came.
    @Test("one edit per object per batch, in the order they came")
    func onePerObject() {
        var batches = Batches(limit: 16)
        _ = batches.arrived(0, editing: "x")
        for (ticket, object) in [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "a"), (6, "b")] {
            #expect(batches.arrived(ticket, editing: object).waits)
        }
        #expect(batches.finished().commits == [1, 2, 4])
        #expect(batches.finished().commits == [3, 6])
        #expect(batches.finished().commits == [5])
        #expect(batches.finished().isIdle)
    }

    /// A batch holds at most `limit` edits; the rest keep their order for the next.
    @Test("a batch holds at most its limit")
    func limit() {
        var batches = EditBatches<Int, Int>(limit: 3)
        _ = batches.arrived(0, editing: 0)
        for ticket in 1...7 { _ = batches.arrived(ticket, editing: ticket) }
        #expect(batches.finished().commits == [1, 2, 3])
        #expect(batches.finished().commits == [4, 5, 6])
        #expect(batches.finished().commits == [7])
        #expect(batches.finished().isIdle)
        // A limit below one is one.
        var single = EditBatches<Int, Int>(limit: 0)
        #expect(single.arrived(1, editing: 1).commits == [1])
        _ = single.arrived(2, editing: 2)
        #expect(single.finished().commits == [2])
    }

    /// After a batch of several, the clients it answered come back: the next batch waits for as
    /// many edits as that batch had more than are waiting, and goes when the last of them comes.
    @Test("after a batch of several, the next one gathers its clients' next edits")
    func gathersAfterSeveral() {
        var batches = Batches(limit: 16, maximumGather: 1_000)
        #expect(batches.arrived(1, editing: "a", at: 0).commits == [1])
        #expect(batches.arrived(2, editing: "b", at: 10).waits)
        #expect(batches.arrived(3, editing: "c", at: 20).waits)
        // A batch of one answered one client: nothing to gather.
        #expect(batches.finished(at: 500).commits == [2, 3])
        // It took 400; one edit waits, so it gathers for 2 + 1 = 3, until 1,300 at most.
        #expect(batches.arrived(4, editing: "d", at: 600).waits)
        #expect(batches.finished(at: 900).gathers == 1_300)
        #expect(!batches.isCommitting)
        #expect(batches.poll(at: 950).gathers == 1_300)
        #expect(batches.arrived(5, editing: "b", at: 1_000).waits)
        #expect(batches.arrived(6, editing: "c", at: 1_100).completes)
        // An arrival past the target does not wake the gatherer twice.
        #expect(batches.arrived(7, editing: "e", at: 1_150).waits)
        #expect(batches.poll(at: 1_150).commits == [4, 5, 6, 7])
        #expect(batches.isCommitting)
    }

    /// Clients that do not come back cost the next batch one window: no longer than the batch
    /// before took, nor than the maximum; with nothing waiting by then, the queue is idle.
    @Test("a gathering batch goes at its deadline, and the queue idles when none came")
    func gatherDeadline() {
        var batches = Batches(limit: 16, maximumGather: 300)
        _ = batches.arrived(1, editing: "a", at: 0)
        _ = batches.arrived(2, editing: "b", at: 0)
        _ = batches.arrived(3, editing: "c", at: 0)
        #expect(batches.finished(at: 100).commits == [2, 3])
        // Took 2,000: the window is the maximum, 300.
        #expect(batches.finished(at: 2_100).gathers == 2_400)
        #expect(batches.arrived(4, editing: "b", at: 2_200).waits)
        #expect(batches.poll(at: 2_400).commits == [4])
        // That batch of one gathers nothing.
        #expect(batches.finished(at: 2_500).isIdle)
        // A window with no arrival ends idle, and the next edit goes at once.
        _ = batches.arrived(5, editing: "a", at: 3_000)
        _ = batches.arrived(6, editing: "b", at: 3_000)
        _ = batches.arrived(7, editing: "c", at: 3_000)
        #expect(batches.finished(at: 3_010).commits == [6, 7])
        #expect(batches.finished(at: 3_060).gathers == 3_110)
        #expect(batches.poll(at: 3_110).isIdle)
        #expect(batches.arrived(8, editing: "a", at: 3_200).commits == [8])
    }

    /// A full batch waiting, no gathering configured, or a lone edit: the next batch goes at
    /// once.
    @Test("no gathering when the next batch is full, when it is off, or after a lone edit")
    func noGathering() {
        var full = EditBatches<Int, Int>(limit: 2, maximumGather: 1_000)
        _ = full.arrived(0, editing: 0, at: 0)
        for ticket in 1...4 { _ = full.arrived(ticket, editing: ticket, at: 0) }
        #expect(full.finished(at: 100).commits == [1, 2])
        #expect(full.finished(at: 200).commits == [3, 4])
        var off = Batches(limit: 16)
        _ = off.arrived(1, editing: "a")
        _ = off.arrived(2, editing: "b")
        _ = off.arrived(3, editing: "c")
        #expect(off.finished(at: 100).commits == [2, 3])
        #expect(off.finished(at: 200).isIdle)
    }

    /// An edit after a quiet spell commits where it arrived; one close behind the last batch
    /// goes to the queue's thread, so that the edits of busy clients still gather.
    @Test("an edit after a quiet spell commits where it arrived")
    func quietSpell() {
        var batches = Batches(limit: 16, maximumGather: 300, quietGap: 1_000)
        // The first edit ever finds the queue quiet.
        #expect(batches.arrived(1, editing: "a", at: 0).commitsHere == [1])
        #expect(batches.isCommitting)
        #expect(batches.arrived(2, editing: "b", at: 100).waits)
        #expect(batches.finished(at: 200).commits == [2])
        #expect(batches.finished(at: 400).isIdle)
        // 999 after that: not quiet yet.
        #expect(batches.arrived(3, editing: "a", at: 1_399).commits == [3])
        #expect(batches.finished(at: 1_500).isIdle)
        // 1,000 after: quiet.
        #expect(batches.arrived(4, editing: "a", at: 2_500).commitsHere == [4])
        // Behind it, the others wait as behind any batch, and gather after a batch of several.
        #expect(batches.arrived(5, editing: "b", at: 2_600).waits)
        #expect(batches.arrived(6, editing: "c", at: 2_600).waits)
        #expect(batches.finished(at: 2_700).commits == [5, 6])
        #expect(batches.finished(at: 2_800).gathers == 2_900)
        #expect(batches.poll(at: 2_900).isIdle)
        // A gathering that ended idle is not a batch finished: the quiet spell counts from 2,800.
        #expect(batches.arrived(7, editing: "a", at: 3_700).commits == [7])
        // Off by default.
        var off = Batches(limit: 16)
        #expect(off.arrived(1, editing: "a", at: 0).commits == [1])
        #expect(off.finished(at: 10).isIdle)
        #expect(off.arrived(2, editing: "a", at: 1_000_000_000).commits == [2])
    }
}

extension EditBatches.Arrival {
    fileprivate var commits: [Ticket]? {
        if case .commit(let tickets) = self { tickets } else { nil }
    }
    fileprivate var commitsHere: [Ticket]? {
        if case .commitHere(let tickets) = self { tickets } else { nil }
    }
    fileprivate var waits: Bool {
        if case .waits = self { true } else { false }
    }
    fileprivate var completes: Bool {
        if case .completes = self { true } else { false }
    }
}

extension EditBatches.Step {
    fileprivate var commits: [Ticket]? {
        if case .commit(let tickets) = self { tickets } else { nil }
    }
    fileprivate var gathers: UInt64? {
        if case .gather(let deadline) = self { deadline } else { nil }
    }
    fileprivate var isIdle: Bool {
        if case .idle = self { true } else { false }
    }
}
