import BugSquasherGraph
import Testing

@testable import BugSquasherDaemon

/// The mailbox's decisions, driven with plain events: no subscription, no task, no socket.
@Suite("Mailbox state machine")
struct MailboxTests {
    func id(_ n: Int64) -> ObjectID { ObjectID(store: "S", entity: "Bug", primaryKey: n) }

    func save(_ token: Int64, updated: [Int64]) -> DidSave {
        DidSave(
            token: HistoryToken(rawValue: token), storeIdentifier: "S",
            updated: updated.map { ObjectChange(objectID: id($0), version: token, changedKeys: ["status"]) })
    }

    /// Offers a save as the hub would, the subscriber receiving all of it.
    func offer(_ save: DidSave, to mailbox: inout Mailbox, directly: Bool = true) -> Mailbox.OfferAction {
        mailbox.offer(save, token: save.token, directly: directly) { QueuedSave(save: save, encoding: nil) }
    }

    /// The token of a save event, or `nil` for anything else.
    func token(_ action: Mailbox.NextAction) -> Int64? {
        if case .deliver(.save(let save, _)) = action { save.token.rawValue } else { nil }
    }

    /// A nudge wakes a waiting task; a busy task's comes after what is pending, once however
    /// many came; a closed mailbox takes none.
    @Test("a nudge wakes a waiting task, or comes once after the saves pending")
    func nudges() {
        var mailbox = Mailbox(pendingLimit: 100, delivered: .zero)
        _ = mailbox.next(cancelled: false)
        guard case .wake(.nudge) = mailbox.nudge() else {
            Issue.record("a waiting task was not woken")
            return
        }
        #expect(!mailbox.isWaiting)
        // Busy: two nudges and a save; the save first, then one nudge, then nothing.
        guard case .none = mailbox.nudge(), case .none = offer(save(1, updated: [1]), to: &mailbox),
            case .none = mailbox.nudge()
        else {
            Issue.record("a busy task was woken")
            return
        }
        #expect(token(mailbox.next(cancelled: false)) == 1)
        guard case .deliver(.nudge) = mailbox.next(cancelled: false) else {
            Issue.record("the nudge was lost")
            return
        }
        guard case .wait = mailbox.next(cancelled: false) else {
            Issue.record("a nudge came twice")
            return
        }
        _ = mailbox.close()
        guard case .none = mailbox.nudge() else {
            Issue.record("a closed mailbox took a nudge")
            return
        }
    }

    /// A waiting task is woken with the save, or the publisher writes it when it may; a save that finds the
    /// task busy is queued and delivered next.
    @Test("a live save wakes a waiting task or is sent at once; a busy task's is queued")
    func wakeSendNowAndQueue() {
        var mailbox = Mailbox(pendingLimit: 100, delivered: .zero)
        guard case .wait = mailbox.next(cancelled: false) else {
            Issue.record("nothing pending, yet no wait")
            return
        }
        #expect(mailbox.isWaiting)
        guard case .wake(.save(let woken, live: true)) = offer(save(1, updated: [1]), to: &mailbox) else {
            Issue.record("not woken")
            return
        }
        #expect(woken.token.rawValue == 1 && !mailbox.isWaiting && mailbox.delivered.rawValue == 1)
        // Allowed to write it itself, the publisher does, and reports it.
        mailbox.allowSendNow()
        _ = mailbox.next(cancelled: false)
        guard case .sendNow(let direct) = offer(save(2, updated: [2]), to: &mailbox) else {
            Issue.record("not sent now")
            return
        }
        mailbox.sentNow(direct.token)
        #expect(mailbox.isWaiting && mailbox.delivered.rawValue == 2)
        // Refused by the connection, the same save goes to the task.
        guard case .wake = offer(save(3, updated: [3]), to: &mailbox, directly: false) else {
            Issue.record("a refused write did not wake the task")
            return
        }
        // The task is busy now: the next save is queued, then delivered on its own.
        guard case .none = offer(save(4, updated: [4]), to: &mailbox) else {
            Issue.record("a busy task's save was not queued")
            return
        }
        #expect(token(mailbox.next(cancelled: false)) == 4)
    }

    /// Saves pruned from a shared store's history before the daemon read them: a waiting task is
    /// woken with a resync from what it has; a busy one drops what is pending and resyncs next.
    @Test("saves lost from the history make the subscriber resync from its last token")
    func lostHistory() {
        var waiting = Mailbox(pendingLimit: 100, delivered: HistoryToken(rawValue: 3))
        _ = waiting.next(cancelled: false)
        guard case .wake(.resync(let from)) = waiting.lostHistory() else {
            Issue.record("a waiting task was not woken to resync")
            return
        }
        #expect(from.rawValue == 3 && waiting.isClosed)
        guard case .none = waiting.lostHistory() else {
            Issue.record("a closed mailbox resynced twice")
            return
        }
        var busy = Mailbox(pendingLimit: 100, delivered: HistoryToken(rawValue: 3))
        _ = offer(save(4, updated: [1]), to: &busy)
        guard case .drop(let dropped, _) = busy.lostHistory() else {
            Issue.record("the pending save was not dropped")
            return
        }
        #expect(dropped.map(\.save.token.rawValue) == [4])
        #expect(!busy.accepts(HistoryToken(rawValue: 5)))
        guard case .deliver(.resync(let busyFrom)) = busy.next(cancelled: false) else {
            Issue.record("a busy task did not resync next")
            return
        }
        #expect(busyFrom.rawValue == 3)
    }

    /// A save already delivered or replayed, a save or a refresh after close, and next after close.
    @Test("illegal or stale mailbox events change nothing")
    func staleAndClosed() {
        var mailbox = Mailbox(pendingLimit: 100, delivered: HistoryToken(rawValue: 5))
        guard case .none = offer(save(5, updated: [1]), to: &mailbox) else {
            Issue.record("a delivered token was taken again")
            return
        }
        mailbox.replays(through: HistoryToken(rawValue: 7))
        guard case .none = offer(save(7, updated: [1]), to: &mailbox) else {
            Issue.record("a replayed token was queued")
            return
        }
        #expect(!mailbox.accepts(HistoryToken(rawValue: 7)) && mailbox.accepts(HistoryToken(rawValue: 8)))
        _ = mailbox.next(cancelled: false)
        let closed = mailbox.close()
        #expect(closed.wasOpen && closed.wakeWaiter)
        #expect(mailbox.close() == (wasOpen: false, wakeWaiter: false))
        guard case .none = offer(save(8, updated: [1]), to: &mailbox) else {
            Issue.record("a closed mailbox took a save")
            return
        }
        guard
            case .none = mailbox.offerRefresh(
                .init(updated: [ObjectChange(objectID: id(1), version: 9, changedKeys: [])]))
        else {
            Issue.record("a closed mailbox took a refresh")
            return
        }
        guard case .end = mailbox.next(cancelled: false) else {
            Issue.record("a closed mailbox did not end")
            return
        }
        mailbox.allowSendNow()
        #expect(!mailbox.canSendNow)
        // A cancelled task ends without closing.
        var open = Mailbox(pendingLimit: 100, delivered: .zero)
        guard case .end = open.next(cancelled: true) else {
            Issue.record("a cancelled task did not end")
            return
        }
        #expect(!open.isClosed)
    }

    /// The position becomes the last pending save's token, or delivered.
    @Test("a save with nothing for the subscriber still moves its position on")
    func emptySaveMovesThePosition() {
        var mailbox = Mailbox(pendingLimit: 100, delivered: .zero)
        _ = mailbox.offer(
            DidSave(token: HistoryToken(rawValue: 3), storeIdentifier: "S"), token: HistoryToken(rawValue: 3),
            directly: true
        ) {
            Issue.record("queued an empty save")
            return QueuedSave(save: save(0, updated: []), encoding: nil)
        }
        #expect(mailbox.delivered.rawValue == 3)
        _ = offer(save(4, updated: [1]), to: &mailbox)
        _ = mailbox.offer(
            DidSave(token: HistoryToken(rawValue: 6), storeIdentifier: "S"), token: HistoryToken(rawValue: 6),
            directly: true
        ) { QueuedSave(save: save(0, updated: []), encoding: nil) }
        #expect(token(mailbox.next(cancelled: false)) == 6)
    }

    @Test("more than eight saves behind are merged into one; up to eight come one by one")
    func coalescing() {
        var mailbox = Mailbox(pendingLimit: 1_000, delivered: .zero)
        for token in Int64(1)...8 { _ = offer(save(token, updated: [token]), to: &mailbox) }
        #expect(!mailbox.isBehind)
        #expect(token(mailbox.next(cancelled: false)) == 1)
        for token in Int64(9)...20 { _ = offer(save(token, updated: [1]), to: &mailbox) }
        #expect(mailbox.isBehind)
        guard case .deliver(.save(let merged, live: false)) = mailbox.next(cancelled: false) else {
            Issue.record("not merged")
            return
        }
        #expect(merged.token.rawValue == 20 && Set(merged.updated.map(\.objectID)) == Set((1...8).map { id($0) }))
        guard case .wait = mailbox.next(cancelled: false) else {
            Issue.record("something left")
            return
        }
    }

    /// Offers are ignored from then on; the resync is from the last token sent, a replay's included, and
    /// then the mailbox ends.
    @Test("past the pending limit the mailbox is dropped and the next event is a resync")
    func overflowAndResync() {
        var mailbox = Mailbox(pendingLimit: 5, delivered: .zero)
        mailbox.replays(through: HistoryToken(rawValue: 9))
        mailbox.markDelivered(HistoryToken(rawValue: 3))
        // Two objects a save: the third passes the limit of 5 (merged, still 6 distinct objects).
        var droppedAt: [Int64] = []
        for token in Int64(10)...13 {
            if case .drop(let pending, let coalesced) = offer(save(token, updated: [token, token + 100]), to: &mailbox)
            {
                droppedAt.append(token)
                #expect(pending.count + (coalesced?.objectCount ?? 0) > 0)
            }
        }
        #expect(droppedAt == [12] && !mailbox.accepts(HistoryToken(rawValue: 14)))
        guard case .none = offer(save(14, updated: [1]), to: &mailbox) else {
            Issue.record("a dropped mailbox took a save")
            return
        }
        // The replay goes on sending 4 to 9 after the overflow.
        mailbox.markDelivered(HistoryToken(rawValue: 9))
        guard case .deliver(.resync(let from)) = mailbox.next(cancelled: false) else {
            Issue.record("no resync")
            return
        }
        #expect(from.rawValue == 9 && mailbox.isClosed)
        guard case .end = mailbox.next(cancelled: false) else {
            Issue.record("went on after the resync")
            return
        }
    }

    /// Refreshes queued meanwhile go out as one, updates and deletions; past the pending limit
    /// a refresh turns into a resync.
    @Test("a refresh wakes a waiting task, waits for a busy one, and precedes pending saves")
    func refreshes() {
        let change = ObjectChange(objectID: id(1), version: 2, changedKeys: [])
        let gone = ObjectChange(objectID: id(2), version: 4, changedKeys: [])
        var mailbox = Mailbox(pendingLimit: 2, delivered: .zero)
        _ = mailbox.next(cancelled: false)
        guard case .wake(.refresh(let woken)) = mailbox.offerRefresh(.init(updated: [change])) else {
            Issue.record("not woken")
            return
        }
        #expect(woken.updated == [change] && woken.deleted.isEmpty)
        _ = offer(save(1, updated: [5]), to: &mailbox)
        _ = mailbox.offerRefresh(.init(updated: [change]))
        _ = mailbox.offerRefresh(.init(deleted: [gone]))
        guard case .deliver(.refresh(let queued)) = mailbox.next(cancelled: false) else {
            Issue.record("the refresh did not come first")
            return
        }
        #expect(queued.updated == [change] && queued.deleted == [gone])
        #expect(token(mailbox.next(cancelled: false)) == 1)
        _ = mailbox.offerRefresh(.init(updated: [change, change], deleted: [gone]))
        guard case .deliver(.resync(let from)) = mailbox.next(cancelled: false) else {
            Issue.record("no resync")
            return
        }
        #expect(from.rawValue == 1)
    }
}
