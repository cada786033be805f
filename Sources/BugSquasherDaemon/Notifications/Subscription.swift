import BugSquasherGraph
import Foundation
import Synchronization

/// One subscriber of the change feed, as the hub sees it: its registered IDs and its
/// ``Mailbox`` of pending notifications, under one mutex; this class carries out what the
/// mailbox decides (waking the feed's task, writing a live save, freeing a dropped mailbox).
///
/// An object registered as a fault is sent its deletion but not its updates. The importer never
/// waits for a subscriber: ``offer(_:withoutValues:encodings:index:)`` runs on the store's writer
/// after each commit and only filters the save and queues it, sharing its arrays.
///
/// Why it is built this way: docs/PROTOCOL.md, "The change feed" (Faults) and "Backpressure".
final class Subscription: Sendable {
    /// What the subscriber's connection sends next.
    typealias Event = Mailbox.Event

    let id: String
    let registeredOnly: Bool
    let includeValues: Bool
    /// Whether runs of inserted and deleted IDs are sent as one change with a count.
    let idRuns: Bool
    /// The most changed objects pending before the subscriber is told to resync.
    let pendingLimit: Int
    /// The caps on registrations this subscription shares with the others; `nil` for none.
    let registrationLimits: RegistrationLimits?
    /// Whether it follows an import job for `Jobs.Watch` (`squasherctl import --wait`) rather
    /// than a client's change feed: not counted as a subscriber.
    let followsJob: Bool
    /// With ``registeredOnly``, the inserts that pass the filter too.
    let insertWatch: InsertWatch?

    /// How a subscriber holds a registered object.
    enum Hold: Int8, Comparable, Sendable {
        /// Registered but never loaded: only its deletion is sent.
        case fault
        /// Loaded: its updates and its deletion are sent.
        case values

        /// A version the subscriber sent: 0 marks a fault.
        init(version: Int64) {
            self = version == 0 ? .fault : .values
        }

        static func < (lhs: Hold, rhs: Hold) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    private struct State {
        var mailbox: Mailbox
        var registered: [ObjectID: Hold] = [:]
        /// The feed's task, while the mailbox says it waits.
        var waiter: CheckedContinuation<Event?, Never>?
        /// Writes a live save to the connection at once, if it can (see ``sendsNow(_:)``).
        var sendNow: (@Sendable (DidSave) -> Bool)?
    }

    private let state: Mutex<State>

    init(
        registeredOnly: Bool, includeValues: Bool, idRuns: Bool = false, pendingLimit: Int,
        registrationLimits: RegistrationLimits? = nil, insertWatch: InsertWatch? = nil, followsJob: Bool = false,
        startToken: HistoryToken
    ) {
        id = UUID().uuidString
        self.followsJob = followsJob
        self.registrationLimits = registrationLimits
        self.registeredOnly = registeredOnly
        self.insertWatch = insertWatch
        self.includeValues = includeValues
        self.idRuns = idRuns
        self.pendingLimit = pendingLimit
        state = Mutex(State(mailbox: Mailbox(pendingLimit: pendingLimit, delivered: startToken)))
    }

    /// Saves with tokens up to here were delivered (or replayed from history).
    func markDelivered(_ token: HistoryToken) {
        state.withLock { $0.mailbox.markDelivered(token) }
    }

    /// The token of the last save delivered.
    var deliveredToken: HistoryToken { state.withLock { $0.mailbox.delivered } }

    /// Whether the feed's task waits in ``next()`` for the next event.
    var hasWaiter: Bool { state.withLock { $0.waiter != nil } }

    /// Saves with tokens up to `token` will be replayed from the history (see
    /// ``Mailbox/replays(through:)``).
    func replays(through token: HistoryToken) {
        state.withLock { $0.mailbox.replays(through: token) }
    }

    // MARK: Registrations

    /// Registers IDs (a set: registering one twice is harmless); returns how many are registered.
    ///
    /// - Parameter versions: the versions held, one per ID (0: a fault). Without them every ID is held
    ///   with values, so a client that sends none misses nothing. Registering again can only upgrade a
    ///   hold (a fault to values); `unregister(_:)` alone removes one.
    /// - Throws: ``RegistrationLimitExceeded``, registering none of the IDs, when the new ones
    ///   would take this subscription or all of them together past ``registrationLimits``.
    func register(_ ids: [ObjectID], versions: [Int64]? = nil) throws(RegistrationLimitExceeded) -> Int {
        precondition(versions == nil || versions?.count == ids.count, "one version per ID")
        return try state.withLock { state throws(RegistrationLimitExceeded) in
            // A closed subscription is gone from the hub; what it registers no longer counts.
            guard !state.mailbox.isClosed else { return state.registered.count }
            if let limits = registrationLimits {
                let added = Set(ids.filter { state.registered[$0] == nil }).count
                try limits.take(added, subscriptionHas: state.registered.count)
            }
            for (index, id) in ids.enumerated() {
                let hold = versions.map { Hold(version: $0[index]) } ?? .values
                state.registered[id] = max(state.registered[id] ?? hold, hold)
            }
            return state.registered.count
        }
    }

    /// Unregisters IDs; returns how many IDs are registered.
    func unregister(_ ids: [ObjectID]) -> Int {
        state.withLock { state in
            let before = state.registered.count
            for id in ids { state.registered[id] = nil }
            if !state.mailbox.isClosed { registrationLimits?.giveBack(before - state.registered.count) }
            return state.registered.count
        }
    }

    var registeredCount: Int { state.withLock { $0.registered.count } }

    // MARK: Mailbox

    /// Queues a save (filtered to the registered IDs when asked); never blocks, and costs a
    /// filter and an append: merging a slow subscriber's saves waits until it reads.
    ///
    /// The hub builds the other arguments once for all subscribers: `withoutValues`, the save without
    /// row values (queued for a subscriber that did not ask for them); `encodings`, its shared encodings
    /// per set of options (`nil` when none); `index`, the save indexed for filtering to registrations.
    func offer(
        _ didSave: DidSave, withoutValues: () -> DidSave, encodings: SharedEncodings? = nil, index: SaveIndex? = nil
    ) {
        var action = deliver(didSave, withoutValues: withoutValues, encodings: encodings, index: index, directly: true)
        if case .sendNow(let save, let sendNow) = action {
            // Written from here, the feed's task left waiting: a live subscriber's save costs
            // no task wake-up. Refused (the connection is full), it goes the task's way.
            if sendNow(save) { return state.withLock { $0.mailbox.sentNow(save.token) } }
            action = deliver(didSave, withoutValues: withoutValues, encodings: encodings, index: index, directly: false)
        }
        perform(action)
    }

    /// What ``offer(_:withoutValues:encodings:index:)`` carries out, decided under the lock.
    private enum Delivery {
        case none
        case sendNow(DidSave, @Sendable (DidSave) -> Bool)
        case wake(CheckedContinuation<Event?, Never>, Event)
        case drop([QueuedSave], CoalescedSaves?)
    }

    private func deliver(
        _ didSave: DidSave, withoutValues: () -> DidSave, encodings: SharedEncodings?, index: SaveIndex?, directly: Bool
    ) -> Delivery {
        state.withLock { state -> Delivery in
            guard state.mailbox.accepts(didSave.token) else { return .none }
            let save =
                registeredOnly
                ? Self.filter(didSave, to: state.registered, inserts: insertWatch, index: index) : didSave
            let action = state.mailbox.offer(save, token: didSave.token, directly: directly) {
                // Queued without the values this subscriber did not ask for, so that a stalled
                // one holds IDs and versions, not rows.
                let queued = includeValues ? save : registeredOnly ? save.withoutValues : withoutValues()
                return QueuedSave(
                    save: queued,
                    encoding: registeredOnly ? nil : encodings?.of(includeValues: includeValues, idRuns: idRuns))
            }
            return Self.delivery(of: action, in: &state)
        }
    }

    /// The mailbox's action, with what carrying it out needs from the locked state.
    private static func delivery(of action: Mailbox.OfferAction, in state: inout State) -> Delivery {
        switch action {
        case .none: return .none
        case .sendNow(let save): return state.sendNow.map { .sendNow(save, $0) } ?? .none
        case .drop(let pending, let coalesced): return .drop(pending, coalesced)
        case .wake(let event):
            guard let waiter = state.waiter else { return .none }
            state.waiter = nil
            return .wake(waiter, event)
        }
    }

    private func perform(_ delivery: Delivery) {
        switch delivery {
        case .none, .sendNow: break
        case .wake(let waiter, let event): waiter.resume(returning: event)
        case .drop(let pending, let coalesced):
            // Freed off the writer (100,000 queued changes took 132 ms to free), and given back
            // to the system: an overflowing mailbox is the most squasherd holds for one client
            // (about 120 MB for 100,000 changes with values), and glibc would keep it resident.
            let mailbox = DroppedMailbox((pending, coalesced))
            DispatchQueue.global(qos: .background).async { mailbox.free() }
        }
    }

    /// Lets ``offer(_:withoutValues:encodings:index:)`` write a live save to the
    /// subscriber itself, while the feed's task waits in ``next()`` with nothing pending:
    /// `sendNow` encodes and writes the save without waiting, or returns `false` when the
    /// connection cannot take it now (the save then goes to the task). Called by the feed's
    /// task once it has replayed what the subscriber asked for.
    func sendsNow(_ sendNow: @escaping @Sendable (DidSave) -> Bool) {
        state.withLock { state in
            guard !state.mailbox.isClosed else { return }
            state.sendNow = sendNow
            state.mailbox.allowSendNow()
        }
    }

    /// Queues a save; ``NotificationHub/publish(_:)`` calls ``offer(_:withoutValues:encodings:index:)``
    /// instead, to strip the values once for all subscribers.
    func offer(_ didSave: DidSave) {
        offer(didSave) { didSave.withoutValues }
    }

    /// Saves this subscriber had not received are gone from the history: it is told to resync
    /// (see ``Mailbox/lostHistory()``).
    func lostHistory() {
        perform(state.withLock { state in Self.delivery(of: state.mailbox.lostHistory(), in: &state) })
    }

    /// Wakes the feed's task to look outside the mailbox (see ``Mailbox/Event/nudge``).
    func nudge() {
        perform(state.withLock { state in Self.delivery(of: state.mailbox.nudge(), in: &state) })
    }

    /// Queues objects a registration found out of date.
    func offerRefresh(_ refresh: Mailbox.Refresh) {
        perform(state.withLock { state in Self.delivery(of: state.mailbox.offerRefresh(refresh), in: &state) })
    }

    /// Changed objects and refreshes waiting to be sent to this subscriber.
    var pendingCount: Int { state.withLock { $0.mailbox.pendingCount } }

    /// Whether the subscriber fell behind: ``next()`` would merge its pending saves into one.
    var isBehind: Bool { state.withLock { $0.mailbox.isBehind } }

    /// When the subscriber fell behind, waits for the end of the window after the last
    /// interactive save (see ``EditsFirst``), at most one window: merging and encoding its
    /// backlog would share the machine with the subscribers refreshing that save, and it is
    /// behind anyway. A subscriber that keeps up never waits.
    func catchUpAfterInteractiveSaves(_ editsFirst: EditsFirst) async {
        guard isBehind else { return }
        let wait = editsFirst.windowRemaining()
        if wait > 0 { try? await Task.sleep(nanoseconds: wait) }
    }

    /// The next event; `nil` when the subscription was closed or the task cancelled.
    func next() async -> Event? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Event?, Never>) in
                let ready = state.withLock { state -> Event?? in
                    switch state.mailbox.next(cancelled: Task.isCancelled) {
                    case .end: return .some(nil)
                    case .deliver(let event): return .some(event)
                    case .wait:
                        state.waiter = continuation
                        return nil
                    }
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            close()
        }
    }

    /// Ends the subscription: a pending `next()` returns `nil`.
    func close() {
        let waiter = state.withLock { state -> CheckedContinuation<Event?, Never>? in
            let (wasOpen, _) = state.mailbox.close()
            if wasOpen { registrationLimits?.giveBack(state.registered.count) }
            // It holds the subscription (to encode for it): let both go.
            state.sendNow = nil
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    // MARK: Filtering and coalescing

    /// A save as this subscriber receives it: filtered to its registrations when it asked.
    func filtered(_ didSave: DidSave) -> DidSave {
        guard registeredOnly else { return didSave }
        return state.withLock { Self.filter(didSave, to: $0.registered, inserts: insertWatch) }
    }

    /// A save as a subscriber holding `registered` receives it. With `index` (the save indexed
    /// once for every subscriber of one publish), the smaller of the save and the registrations
    /// is walked: 89 subscribers holding 11 bugs each cost about a thousand probes per import
    /// chunk of 1,000 updates instead of 89,000.
    static func filter(
        _ didSave: DidSave, to registered: [ObjectID: Hold], inserts: InsertWatch? = nil, index: SaveIndex? = nil
    ) -> DidSave {
        var filtered = DidSave(token: didSave.token, storeIdentifier: didSave.storeIdentifier)
        if let inserts, !didSave.inserted.isEmpty {
            filtered.inserted = inserts.passing(didSave.inserted, index: index)
        }
        // Objects an update made match the watch (a bug renamed to a key waited for), which the
        // subscriber could not register since they did not match before.
        let cameToMatch =
            inserts.map {
                didSave.updated.isEmpty ? [] : $0.updatesPassing(didSave.updated, index: index, unless: registered)
            } ?? []
        guard !registered.isEmpty || !cameToMatch.isEmpty else { return filtered }
        if let index, cameToMatch.isEmpty, registered.count < didSave.updated.count + didSave.deleted.count {
            filtered.updated = index.updated(heldBy: registered)
            filtered.deleted = index.deleted(heldBy: registered)
        } else {
            let matching = Set(cameToMatch)
            filtered.updated = didSave.updated.filter {
                registered[$0.objectID] == .values || matching.contains($0.objectID)
            }
            filtered.deleted = didSave.deleted.filter { registered[$0.objectID] != nil }
        }
        return filtered
    }
}

/// A mailbox a subscriber overflowed: freed off the thread that dropped it, then returned to
/// the system.
private final class DroppedMailbox: Sendable {
    private let saves: Mutex<([QueuedSave], CoalescedSaves?)?>

    init(_ saves: ([QueuedSave], CoalescedSaves?)) {
        self.saves = Mutex(saves)
    }

    /// Frees the saves and trims the allocator's free memory.
    func free() {
        saves.withLock { $0 = nil }
        returnFreedMemory()
    }
}
