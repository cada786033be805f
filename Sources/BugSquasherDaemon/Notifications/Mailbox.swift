import BugSquasherGraph

/// The decisions of one subscriber's mailbox, as a value: each method takes an event (a save
/// offered, the feed's task asking for the next event, a refresh, a close) and returns what to
/// do. It holds no continuation and no closure, so a test drives it with plain events;
/// ``Subscription`` keeps it under a mutex and carries its actions out.
///
/// A subscriber that keeps up gets each save on its own (``OfferAction/sendNow(_:)``); one more than
/// ``behindAfterSaves`` saves behind gets them coalesced; past ``pendingLimit`` changed objects, it is
/// told to resync. Why the limits are what they are: docs/PROTOCOL.md, "Backpressure".
struct Mailbox {
    /// What the subscriber's connection sends next.
    enum Event: Sendable {
        /// A save. `live`: exactly as the hub published it (filtered to the registrations when
        /// asked), so its encoding can be shared with other subscribers; `false` for several
        /// merged into one (a subscriber that fell behind) and for saves replayed from history.
        case save(DidSave, live: Bool)
        /// Consecutive saves merged without touching their inserted and deleted lists, each
        /// save with its shared encoding: sent as one save.
        case disjoint(DisjointSaves)
        /// Objects a registration found out of date.
        case refresh(Refresh)
        /// The subscriber fell behind; it must reconnect with `since` = this token, the last one
        /// it was sent, so that resuming from it yields every save exactly once.
        case resync(HistoryToken)
        /// Nothing was saved, but the feed's task has something to look at outside the mailbox
        /// (a job follower: its job waits for the store). Several nudges before the task asks
        /// are one.
        case nudge
    }

    /// Objects a registration found out of date: changed since the versions the subscriber
    /// holds (`updated`, with their current versions and values), or gone from the store
    /// (`deleted`).
    struct Refresh: Sendable {
        var updated: [ObjectChange] = []
        var deleted: [ObjectChange] = []

        /// How many objects it names.
        var count: Int { updated.count + deleted.count }
        var isEmpty: Bool { updated.isEmpty && deleted.isEmpty }
    }

    /// What to do with a save offered.
    enum OfferAction {
        /// Nothing more: queued, or nothing for this subscriber.
        case none
        /// The feed's task waits and nothing is pending: write the save from here, and report
        /// with ``sentNow(_:)``, or offer it again with `directly: false` when the connection
        /// cannot take it now.
        case sendNow(DidSave)
        /// The feed's task waits: hand it this event.
        case wake(Event)
        /// The mailbox overflowed and was dropped (the next event is a resync): free these off
        /// the writer.
        case drop([QueuedSave], CoalescedSaves?)
    }

    /// What the feed's task does next.
    enum NextAction {
        /// Send this event.
        case deliver(Event)
        /// Wait to be woken (``OfferAction/wake(_:)``, ``offerRefresh(_:)``, ``close()``).
        case wait
        /// The subscription is closed: end the feed.
        case end
    }

    /// A subscriber with more saves pending than this fell behind: ``next(cancelled:)`` merges
    /// them into one.
    static let behindAfterSaves = 8
    /// How many pending saves are merged before more are queued, so that a mailbox of many
    /// tiny saves stays small too.
    static let mergeAfterSaves = 1_024
    /// The most objects queued since the last merge that are merged on the writer when a
    /// mailbox passes ``pendingLimit``, to count distinct objects. Above it the saves are large
    /// ones such as an import's chunks, which merging would hardly reduce: 100,000 objects took
    /// the writer 133 ms to merge (and an edit waiting for it with it). The upper bound counts.
    static let mergeAtLimitObjects = 16_384

    /// The most changed objects pending before the mailbox is dropped.
    let pendingLimit: Int
    /// Saves with tokens up to here were delivered (or replayed from history, or had nothing
    /// for this subscriber).
    private(set) var delivered: HistoryToken
    /// Saves up to here come from a history replay, never from the mailbox.
    private(set) var replayedThrough: HistoryToken = .zero
    /// Whether the feed's task waits to be woken.
    private(set) var isWaiting = false
    /// Whether the publisher may write a live save itself (see ``OfferAction/sendNow(_:)``).
    private(set) var canSendNow = false
    /// Whether the subscription ended.
    private(set) var isClosed = false

    /// Pending saves, as offered.
    private var pending: [QueuedSave] = []
    /// Older pending saves, merged when the pending ones had to be counted.
    private var coalesced: CoalescedSaves?
    /// Changed objects pending: the distinct ones in `coalesced` plus those in `pending`
    /// (which may count an object twice).
    private var pendingObjects = 0
    private var refreshes = Refresh()
    /// The mailbox overflowed: the next event is a resync, from the token delivered by then.
    /// Not the token delivered when it overflowed: a history replay may still be sending
    /// older saves, and a resync from before those would deliver them twice.
    private var mustResync = false
    /// A nudge came while the feed's task was busy: the next event is one, once nothing else
    /// is pending.
    private var nudged = false

    /// A mailbox whose subscriber has everything up to `delivered`.
    init(pendingLimit: Int, delivered: HistoryToken) {
        self.pendingLimit = pendingLimit
        self.delivered = delivered
    }

    /// Changed objects and refreshes waiting to be sent.
    var pendingCount: Int { pendingObjects + refreshes.count }

    /// Whether the subscriber fell behind: ``next(cancelled:)`` would merge its pending saves
    /// into one.
    var isBehind: Bool { pending.count > Self.behindAfterSaves || coalesced != nil }

    /// Whether a save with `token` is still for this mailbox (not closed, not dropped, not
    /// delivered or replayed already).
    func accepts(_ token: HistoryToken) -> Bool {
        !isClosed && !mustResync && token > delivered && token > replayedThrough
    }

    /// A committed save offered: `save` is as this subscriber receives it (filtered to its
    /// registrations when asked), `token` the committed save's. `queued` makes the form kept
    /// in the mailbox (without the values it did not ask for); `directly` is false when the
    /// publisher's own write was refused.
    mutating func offer(_ save: DidSave, token: HistoryToken, directly: Bool, queued: () -> QueuedSave) -> OfferAction {
        guard accepts(token) else { return .none }
        if save.isEmpty {
            // Nothing for this subscriber; its position still moves on.
            if !pending.isEmpty {
                pending[pending.count - 1].save.token = token
            } else if coalesced != nil {
                coalesced?.token = token
            } else {
                delivered = token
            }
            return .none
        }
        if isWaiting, pending.isEmpty, coalesced == nil {
            if directly, canSendNow { return .sendNow(save) }
            isWaiting = false
            delivered = save.token
            return .wake(.save(save, live: true))
        }
        pending.append(queued())
        pendingObjects += save.objectCount
        let unmerged = pendingObjects - (coalesced?.objectCount ?? 0)
        if pending.count > Self.mergeAfterSaves
            || (pendingObjects > pendingLimit && unmerged <= Self.mergeAtLimitObjects)
        {
            mergePending()
        }
        guard pendingObjects > pendingLimit else { return .none }
        defer {
            pending = []
            coalesced = nil
            pendingObjects = 0
            mustResync = true
        }
        return .drop(pending, coalesced)
    }

    /// The publisher wrote a save itself (``OfferAction/sendNow(_:)``).
    mutating func sentNow(_ token: HistoryToken) {
        markDelivered(token)
    }

    /// Asks the feed's task to look outside the mailbox (see ``Event/nudge``).
    mutating func nudge() -> OfferAction {
        guard !isClosed else { return .none }
        if isWaiting {
            isWaiting = false
            return .wake(.nudge)
        }
        nudged = true
        return .none
    }

    /// Objects a registration found out of date.
    mutating func offerRefresh(_ refresh: Refresh) -> OfferAction {
        guard !isClosed, !refresh.isEmpty else { return .none }
        if isWaiting {
            isWaiting = false
            return .wake(.refresh(refresh))
        }
        refreshes.updated += refresh.updated
        refreshes.deleted += refresh.deleted
        if refreshes.count > pendingLimit {
            refreshes = Refresh()
            mustResync = true
        }
        return .none
    }

    /// Saves after ``delivered`` are gone from the history before the daemon read them (it was
    /// cut off from a shared store longer than the retention): what is pending is dropped and
    /// the subscriber told to resync, so that its resumed feed tells it to refetch what it holds.
    mutating func lostHistory() -> OfferAction {
        guard !isClosed, !mustResync else { return .none }
        let dropped = (pending, coalesced)
        pending = []
        coalesced = nil
        pendingObjects = 0
        refreshes = Refresh()
        if isWaiting {
            isWaiting = false
            isClosed = true
            return .wake(.resync(delivered))
        }
        mustResync = true
        return dropped.0.isEmpty && dropped.1 == nil ? .none : .drop(dropped.0, dropped.1)
    }

    /// The feed's task asks for the next event (`cancelled`: its task was cancelled).
    mutating func next(cancelled: Bool) -> NextAction {
        if isClosed || cancelled { return .end }
        if !refreshes.isEmpty {
            defer { refreshes = Refresh() }
            return .deliver(.refresh(refreshes))
        }
        if mustResync {
            isClosed = true
            return .deliver(.resync(delivered))
        }
        // Saves a history replay already delivered are dropped. A subscriber that fell behind
        // gets everything pending merged into one save; one that keeps up gets each save on
        // its own, so it sees every token.
        pending.removeAll { $0.save.token <= delivered }
        if pending.count > Self.behindAfterSaves { mergePending() }
        if var merged = coalesced {
            for save in pending { merged.add(save) }
            coalesced = nil
            pending.removeAll()
            pendingObjects = 0
            if merged.token > delivered {
                delivered = merged.token
                if let disjoint = merged.disjoint, disjoint.saves.allSatisfy({ $0.encoding != nil }) {
                    return .deliver(.disjoint(disjoint))
                }
                return .deliver(.save(merged.result(), live: false))
            }
        }
        if !pending.isEmpty {
            let save = pending.removeFirst().save
            delivered = save.token
            pendingObjects = max(0, pendingObjects - save.objectCount)
            return .deliver(.save(save, live: true))
        }
        pendingObjects = 0
        if nudged {
            nudged = false
            return .deliver(.nudge)
        }
        isWaiting = true
        return .wait
    }

    /// Saves with tokens up to here were delivered (or replayed from history).
    mutating func markDelivered(_ token: HistoryToken) {
        if delivered < token { delivered = token }
    }

    /// Saves with tokens up to `token` will be replayed from the history: the mailbox drops those
    /// queued and ignores those still to be offered. Left in it, they could be merged with later
    /// saves while the replay runs, and then reach the subscriber twice.
    mutating func replays(through token: HistoryToken) {
        replayedThrough = max(replayedThrough, token)
        let replayed = pending.filter { $0.save.token <= token }
        guard !replayed.isEmpty else { return }
        pending.removeAll { $0.save.token <= token }
        pendingObjects = max(0, pendingObjects - replayed.reduce(0) { $0 + $1.save.objectCount })
    }

    /// The publisher may write live saves itself from now on (the replay is over).
    mutating func allowSendNow() {
        if !isClosed { canSendNow = true }
    }

    /// Ends the subscription; returns whether it was open, and whether the feed's task waits
    /// (and must be woken to end).
    mutating func close() -> (wasOpen: Bool, wakeWaiter: Bool) {
        defer {
            isClosed = true
            canSendNow = false
            isWaiting = false
        }
        return (!isClosed, isWaiting)
    }

    /// Merges the pending saves into `coalesced`, counting distinct objects.
    private mutating func mergePending() {
        // Taken out first, so that adding to it does not copy what it holds.
        var merged = coalesced ?? CoalescedSaves(storeIdentifier: pending.first?.save.storeIdentifier ?? "")
        coalesced = nil
        for save in pending { merged.add(save) }
        coalesced = merged
        pending.removeAll(keepingCapacity: true)
        pendingObjects = merged.objectCount
    }
}
