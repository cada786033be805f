import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherTransport
import Foundation
import Synchronization

/// One subscriber of the change feed, as the hub sees it: its registered IDs and a mailbox of
/// pending notifications.
///
/// A registered object is held either with its values or as a fault (never loaded). Updates are
/// sent for the first kind only: a fault reads the current values when it fires, so an update
/// would only wake the subscriber to refresh nothing — for a to-one target such as a bug's
/// project, which every import chunk updates (its `bugs` grew), that is one wake-up per chunk
/// per subscriber. Deletions are sent for both.
///
/// The importer never waits for a subscriber: ``offer(_:withoutValues:)`` runs on the store's
/// writer, right after each commit, and only appends the save to the mailbox under a mutex (the
/// save's arrays are shared with the hub and the other subscribers, not copied). A subscriber
/// that keeps up receives every save on its own; one that falls more than eight saves behind
/// has them coalesced into one (per object, the newest) when it reads next, on its own task. The
/// objects an import's chunks insert are coalesced by concatenation, and their shared encodings
/// spliced into the reply (see ``CoalescedSaves``).
/// Past ``pendingLimit`` changed objects the pending saves are merged to count distinct
/// objects, unless those queued since the last merge are many (an import's chunks: see
/// ``mergeAtLimitObjects``); if there are still too many, the mailbox is dropped (and freed off
/// the writer) and the subscriber is told to resync from the last token it received, so memory
/// per subscriber stays bounded and the writer is never held up by a subscriber's backlog.
final class Subscription: Sendable {
    /// What the subscriber's connection sends next.
    enum Event: Sendable {
        /// A save. `live`: exactly as the hub published it (filtered to the registrations when
        /// asked), so its encoding can be shared with other subscribers; `false` for several
        /// merged into one (a subscriber that fell behind) and for saves replayed from history.
        case save(DidSave, live: Bool)
        /// Consecutive saves merged without touching their inserted and deleted lists, each
        /// save with its shared encoding: sent as one save.
        case disjoint(DisjointSaves)
        /// Objects a registration found stale: their current versions and values.
        case refresh([ObjectChange])
        /// The subscriber fell behind; it must reconnect with `since` = this token, the last one
        /// it was sent, so that resuming from it yields every save exactly once.
        case resync(HistoryToken)
    }

    let id: String
    let registeredOnly: Bool
    let includeValues: Bool
    /// Whether runs of inserted and deleted IDs are sent as one change with a count.
    let idRuns: Bool
    let pendingLimit: Int
    /// The caps on registrations this subscription shares with the others; `nil` for none.
    let registrationLimits: RegistrationLimits?
    /// Whether it follows an import job for `Jobs.Watch` (`squasherctl import --wait`) rather
    /// than a client's change feed: not counted as a subscriber.
    let followsJob: Bool

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
        var registered: [ObjectID: Hold] = [:]
        /// Pending saves, as offered.
        var pending: [QueuedSave] = []
        /// Older pending saves, merged when the pending ones had to be counted.
        var coalesced: CoalescedSaves?
        /// Changed objects pending: the distinct ones in `coalesced` plus those in `pending`
        /// (which may count an object twice).
        var pendingObjects = 0
        var refreshes: [ObjectChange] = []
        /// The mailbox overflowed: the next event is a resync, from the token delivered by then.
        /// Not the token delivered when it overflowed: a history replay may still be sending
        /// older saves, and a resync from before those would deliver them twice.
        var mustResync = false
        var delivered: HistoryToken
        /// Saves up to here come from a history replay, never from the mailbox.
        var replayedThrough: HistoryToken = .zero
        var waiter: CheckedContinuation<Event?, Never>?
        /// Writes a live save to the connection at once, if it can (see ``sendsNow(_:)``).
        var sendNow: (@Sendable (DidSave) -> Bool)?
        var closed = false

        /// Merges the pending saves into `coalesced`, counting distinct objects.
        mutating func mergePending() {
            // Taken out first, so that adding to it does not copy what it holds.
            var merged = coalesced ?? CoalescedSaves(storeIdentifier: pending.first?.save.storeIdentifier ?? "")
            coalesced = nil
            for save in pending { merged.add(save) }
            coalesced = merged
            pending.removeAll(keepingCapacity: true)
            pendingObjects = merged.objectCount
        }
    }

    private let state: Mutex<State>

    /// With ``registeredOnly``, the inserts that pass the filter too.
    let insertWatch: InsertWatch?

    init(registeredOnly: Bool, includeValues: Bool, idRuns: Bool = false, pendingLimit: Int, registrationLimits: RegistrationLimits? = nil, insertWatch: InsertWatch? = nil, followsJob: Bool = false, startToken: HistoryToken) {
        id = UUID().uuidString
        self.followsJob = followsJob
        self.registrationLimits = registrationLimits
        self.registeredOnly = registeredOnly
        self.insertWatch = insertWatch
        self.includeValues = includeValues
        self.idRuns = idRuns
        self.pendingLimit = pendingLimit
        state = Mutex(State(delivered: startToken))
    }

    /// Saves with tokens up to here were delivered (or replayed from history).
    func markDelivered(_ token: HistoryToken) {
        state.withLock { if $0.delivered < token { $0.delivered = token } }
    }

    var deliveredToken: HistoryToken { state.withLock { $0.delivered } }

    /// Whether the feed's task waits in ``next()`` for the next event.
    var hasWaiter: Bool { state.withLock { $0.waiter != nil } }

    /// Saves with tokens up to `token` will be replayed from the history: the mailbox drops those
    /// queued and ignores those still to be offered. Left in it, they could be merged with later
    /// saves while the replay runs, and then reach the subscriber twice.
    func replays(through token: HistoryToken) {
        state.withLock { state in
            state.replayedThrough = max(state.replayedThrough, token)
            let replayed = state.pending.filter { $0.save.token <= token }
            guard !replayed.isEmpty else { return }
            state.pending.removeAll { $0.save.token <= token }
            let objects = replayed.reduce(0) { $0 + $1.save.objectCount }
            state.pendingObjects = max(0, state.pendingObjects - objects)
        }
    }

    // MARK: Registrations

    /// Registers IDs (a set: registering an ID twice is harmless; the client library counts
    /// references and sends only first registrations and last unregistrations); returns how
    /// many IDs are registered.
    ///
    /// - Parameter versions: the versions held, one per ID (0: a fault). Without them every
    ///   ID is held with values, so that a client that sends none misses nothing. Registering
    ///   a fault again with a version upgrades it; nothing downgrades a held object but
    ///   `unregister(_:)`.
    /// - Throws: ``RegistrationLimitExceeded``, registering none of the IDs, when the new ones
    ///   would take this subscription or all of them together past ``registrationLimits``.
    func register(_ ids: [ObjectID], versions: [Int64]? = nil) throws(RegistrationLimitExceeded) -> Int {
        precondition(versions == nil || versions?.count == ids.count, "one version per ID")
        return try state.withLock { state throws(RegistrationLimitExceeded) in
            // A closed subscription is gone from the hub; what it registers no longer counts.
            guard !state.closed else { return state.registered.count }
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
            if !state.closed { registrationLimits?.giveBack(before - state.registered.count) }
            return state.registered.count
        }
    }

    var registeredCount: Int { state.withLock { $0.registered.count } }


    // MARK: Mailbox

    /// A subscriber with more saves pending than this fell behind: ``next()`` merges them into
    /// one, and catching it up waits for interactive saves (see ``catchUpAfterInteractiveSaves(_:)``).
    private static let behindAfterSaves = 8
    /// How many pending saves are merged before more are queued, so that a mailbox of many
    /// tiny saves stays small too.
    private static let mergeAfterSaves = 1_024
    /// The most objects queued since the last merge that are merged on the writer when a
    /// mailbox passes ``pendingLimit``, to count distinct objects. Above it the saves are large
    /// ones such as an import's chunks, which merging would hardly reduce: 100,000 objects took
    /// the writer 133 ms to merge (and an edit waiting for it with it). The upper bound counts.
    private static let mergeAtLimitObjects = 16_384

    /// Queues a save (filtered to the registered IDs when asked); never blocks, and costs a
    /// filter and an append: merging a slow subscriber's saves waits until it reads.
    ///
    /// - Parameters:
    ///   - withoutValues: the save without row values, which a queued save keeps for a
    ///     subscriber that did not ask for them; the hub computes it once for all subscribers.
    ///   - encodings: the save's shared encodings, one per set of options, for a subscriber
    ///     that receives the whole save; `nil` when nothing is shared.
    ///   - index: the save indexed for filtering, built once for every subscriber that filters
    ///     to its registrations.
    func offer(_ didSave: DidSave, withoutValues: () -> DidSave, encodings: SharedEncodings? = nil, index: SaveIndex? = nil) {
        var delivery = deliver(didSave, withoutValues: withoutValues, encodings: encodings, index: index, directly: true)
        if case .direct(let save, let sendNow) = delivery {
            // Written from here, the feed's task left waiting: a live subscriber's save costs
            // no task wake-up. Refused (the connection is full), it goes the task's way.
            if sendNow(save) { return markDelivered(save.token) }
            delivery = deliver(didSave, withoutValues: withoutValues, encodings: encodings, index: index, directly: false)
        }
        if case .wake(let waiter, let event) = delivery { waiter.resume(returning: event) }
        if case .dropped(let pending, let coalesced) = delivery {
            // Freed off the writer (100,000 queued changes took 132 ms to free), and given back
            // to the system: an overflowing mailbox is the most squasherd holds for one client
            // (about 120 MB for 100,000 changes with values), and glibc would keep it resident.
            let mailbox = DroppedMailbox((pending, coalesced))
            DispatchQueue.global(qos: .background).async { mailbox.free() }
        }
    }

    /// What ``offer(_:withoutValues:encodings:index:)`` does with a save, decided under
    /// the lock.
    private enum Delivery {
        /// Nothing more (queued, or nothing for this subscriber).
        case none
        /// The feed's task waits for it.
        case wake(CheckedContinuation<Event?, Never>, Event)
        /// The feed's task waits and nothing is pending: try ``State/sendNow`` first.
        case direct(DidSave, @Sendable (DidSave) -> Bool)
        /// The mailbox overflowed and was dropped (the subscriber must resync): free it.
        case dropped([QueuedSave], CoalescedSaves?)
    }

    private func deliver(_ didSave: DidSave, withoutValues: () -> DidSave, encodings: SharedEncodings?, index: SaveIndex?, directly: Bool) -> Delivery {
        state.withLock { state -> Delivery in
            guard !state.closed, !state.mustResync, didSave.token > state.delivered, didSave.token > state.replayedThrough else { return .none }
            let save = registeredOnly ? Self.filter(didSave, to: state.registered, inserts: insertWatch, index: index) : didSave
            if save.isEmpty {
                // Nothing for this subscriber; its position still moves on.
                if !state.pending.isEmpty { state.pending[state.pending.count - 1].save.token = didSave.token }
                else if state.coalesced != nil { state.coalesced?.token = didSave.token }
                else { state.delivered = didSave.token }
                return .none
            }
            if let waiter = state.waiter, state.pending.isEmpty, state.coalesced == nil {
                if directly, let sendNow = state.sendNow { return .direct(save, sendNow) }
                state.waiter = nil
                state.delivered = save.token
                return .wake(waiter, .save(save, live: true))
            }
            // Queued: without the values this subscriber did not ask for, so that a stalled
            // one holds IDs and versions, not rows.
            let queued = includeValues ? save : registeredOnly ? save.withoutValues : withoutValues()
            state.pending.append(QueuedSave(save: queued, encoding: registeredOnly ? nil : encodings?.of(includeValues: includeValues, idRuns: idRuns)))
            state.pendingObjects += save.objectCount
            let unmerged = state.pendingObjects - (state.coalesced?.objectCount ?? 0)
            if state.pending.count > Self.mergeAfterSaves || (state.pendingObjects > pendingLimit && unmerged <= Self.mergeAtLimitObjects) {
                state.mergePending()
            }
            guard state.pendingObjects > pendingLimit else { return .none }
            defer {
                state.pending = []
                state.coalesced = nil
                state.pendingObjects = 0
                state.mustResync = true
            }
            return .dropped(state.pending, state.coalesced)
        }
    }

    /// Lets ``offer(_:withoutValues:encodings:index:)`` write a live save to the
    /// subscriber itself, while the feed's task waits in ``next()`` with nothing pending:
    /// `sendNow` encodes and writes the save without waiting, or returns `false` when the
    /// connection cannot take it now (the save then goes to the task). Called by the feed's
    /// task once it has replayed what the subscriber asked for.
    func sendsNow(_ sendNow: @escaping @Sendable (DidSave) -> Bool) {
        state.withLock { $0.sendNow = sendNow }
    }

    /// Queues a save; ``NotificationHub/publish(_:)`` calls ``offer(_:withoutValues:)`` instead,
    /// to strip the values once for all subscribers.
    func offer(_ didSave: DidSave) {
        offer(didSave) { didSave.withoutValues }
    }

    /// Queues objects a registration found stale.
    func offerRefresh(_ changes: [ObjectChange]) {
        guard !changes.isEmpty else { return }
        let waiter = state.withLock { state -> CheckedContinuation<Event?, Never>? in
            guard !state.closed else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.refreshes += changes
            if state.refreshes.count > pendingLimit {
                state.refreshes.removeAll()
                state.mustResync = true
            }
            return nil
        }
        waiter?.resume(returning: .refresh(changes))
    }

    /// Whether the subscriber fell behind: ``next()`` would merge its pending saves into one
    /// (more than ``behindAfterSaves`` of them, or some merged already).
    var isBehind: Bool {
        state.withLock { $0.pending.count > Self.behindAfterSaves || $0.coalesced != nil }
    }

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
                    if state.closed || Task.isCancelled { return .some(nil) }
                    if !state.refreshes.isEmpty {
                        defer { state.refreshes.removeAll() }
                        return .some(.refresh(state.refreshes))
                    }
                    if state.mustResync {
                        state.closed = true
                        return .some(.resync(state.delivered))
                    }
                    // Saves a history replay already delivered are dropped. A subscriber that
                    // fell behind gets everything pending merged into one save; one that keeps
                    // up gets each save on its own, so it sees every token.
                    let delivered = state.delivered
                    state.pending.removeAll { $0.save.token <= delivered }
                    if state.pending.count > Self.behindAfterSaves { state.mergePending() }
                    if var coalesced = state.coalesced {
                        for save in state.pending { coalesced.add(save) }
                        state.coalesced = nil
                        state.pending.removeAll()
                        state.pendingObjects = 0
                        if coalesced.token > delivered {
                            state.delivered = coalesced.token
                            if let disjoint = coalesced.disjoint, disjoint.saves.allSatisfy({ $0.encoding != nil }) {
                                return .some(.disjoint(disjoint))
                            }
                            return .some(.save(coalesced.result(), live: false))
                        }
                    }
                    if !state.pending.isEmpty {
                        let save = state.pending.removeFirst().save
                        state.delivered = save.token
                        state.pendingObjects = max(0, state.pendingObjects - save.inserted.count - save.updated.count - save.deleted.count)
                        return .some(.save(save, live: true))
                    }
                    state.pendingObjects = 0
                    state.waiter = continuation
                    return nil
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
            if !state.closed { registrationLimits?.giveBack(state.registered.count) }
            state.closed = true
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
    static func filter(_ didSave: DidSave, to registered: [ObjectID: Hold], inserts: InsertWatch? = nil, index: SaveIndex? = nil) -> DidSave {
        var filtered = DidSave(token: didSave.token, storeIdentifier: didSave.storeIdentifier)
        if let inserts, !didSave.inserted.isEmpty { filtered.inserted = inserts.passing(didSave.inserted, index: index) }
        // Objects an update made match the watch (a bug renamed to a key waited for), which the
        // subscriber could not register since they did not match before.
        let cameToMatch = inserts.map { didSave.updated.isEmpty ? [] : $0.updatesPassing(didSave.updated, index: index, unless: registered) } ?? []
        guard !registered.isEmpty || !cameToMatch.isEmpty else { return filtered }
        if let index, cameToMatch.isEmpty, registered.count < didSave.updated.count + didSave.deleted.count {
            filtered.updated = index.updated(heldBy: registered)
            filtered.deleted = index.deleted(heldBy: registered)
        } else {
            let matching = Set(cameToMatch)
            filtered.updated = didSave.updated.filter { registered[$0.objectID] == .values || matching.contains($0.objectID) }
            filtered.deleted = didSave.deleted.filter { registered[$0.objectID] != nil }
        }
        return filtered
    }
}

/// One save's changes indexed for the subscribers of one publish: its inserts by the value of an
/// attribute, its updates and deletions by object ID. Each part is built on first use and shared.
final class SaveIndex {
    private struct Column: Hashable {
        let entity: String
        let attribute: Int
    }

    /// One column of the inserts: the first position of each value, and for each position the
    /// next one with the same value (`-1` at the end), so that no value needs an array of its own.
    private struct InsertColumn {
        var first: [Value: Int] = [:]
        var next: [Int]
        var valueless: [Int] = []
    }

    private let didSave: DidSave
    private var columns: [Column: InsertColumn] = [:]
    private var updatedPositions: [ObjectID: Int]?
    private struct UpdateColumns: Hashable {
        let entity: String
        let keys: Set<String>
    }
    private var changingUpdates: [UpdateColumns: [Int]] = [:]
    private var deletedPositions: [ObjectID: Int]?

    init(_ didSave: DidSave) {
        self.didSave = didSave
    }

    /// Positions in the save's inserts of `entity`'s objects whose `attribute` is one of
    /// `values`, and of those that carry no values, in the save's order.
    func insertPositions(of entity: String, attribute: Int, in values: Set<Value>) -> [Int] {
        let key = Column(entity: entity, attribute: attribute)
        let column = columns[key] ?? build(entity: entity, attribute: attribute)
        columns[key] = column
        var positions = column.valueless
        for value in values {
            var position = column.first[value] ?? -1
            while position >= 0 {
                positions.append(position)
                position = column.next[position]
            }
        }
        return positions.sorted()
    }

    private func build(entity: String, attribute: Int) -> InsertColumn {
        var column = InsertColumn(next: Array(repeating: -1, count: didSave.inserted.count))
        column.first.reserveCapacity(didSave.inserted.count)
        // Backwards, so that each chain runs in the save's order.
        for (position, change) in didSave.inserted.enumerated().reversed() where change.objectID.entityName == entity {
            guard let values = change.values, values.attributes.indices.contains(attribute) else {
                column.valueless.append(position)
                continue
            }
            if let following = column.first.updateValue(position, forKey: values.attributes[attribute]) { column.next[position] = following }
        }
        return column
    }

    /// Positions in the save's updates of `entity`'s objects whose changed keys include one of
    /// `keys`, in the save's order.
    func updates(of entity: String, changingAnyOf keys: Set<String>) -> [Int] {
        let key = UpdateColumns(entity: entity, keys: keys)
        if let known = changingUpdates[key] { return known }
        let positions = didSave.updated.indices.filter {
            didSave.updated[$0].objectID.entityName == entity && !keys.isDisjoint(with: didSave.updated[$0].changedKeys)
        }
        changingUpdates[key] = positions
        return positions
    }

    /// The save's updates of objects `registered` holds with values, in the save's order.
    func updated(heldBy registered: [ObjectID: Subscription.Hold]) -> [ObjectChange] {
        let positions = updatedPositions ?? Self.positions(of: didSave.updated)
        updatedPositions = positions
        return Self.changes(didSave.updated, at: registered.compactMap { $0.value == .values ? positions[$0.key] : nil })
    }

    /// The save's deletions of objects `registered` holds, in the save's order.
    func deleted(heldBy registered: [ObjectID: Subscription.Hold]) -> [ObjectChange] {
        let positions = deletedPositions ?? Self.positions(of: didSave.deleted)
        deletedPositions = positions
        return Self.changes(didSave.deleted, at: registered.keys.compactMap { positions[$0] })
    }

    private static func positions(of changes: [ObjectChange]) -> [ObjectID: Int] {
        // An object appears once in a save; should it not, the last position stands.
        Dictionary(changes.enumerated().map { ($1.objectID, $0) }, uniquingKeysWith: { $1 })
    }

    private static func changes(_ changes: [ObjectChange], at positions: [Int]) -> [ObjectChange] {
        positions.sorted().map { changes[$0] }
    }
}

/// The inserts a subscriber that filters to its registrations still receives: those of one
/// entity that match a predicate on their own attributes (objects it waits for, which do not
/// exist yet and so cannot be registered).
struct InsertWatch: Sendable {
    /// The entity.
    let entity: EntityDescription
    /// What an insert must match; `nil` passes every insert of the entity.
    let predicate: ObjectPredicate?
    /// `attribute IN (strings)`, the common watch (keys waited for), as a set lookup: every
    /// insert of an import is checked against every watching subscriber's predicate.
    private let lookup: (attribute: Int, values: Set<Value>)?

    /// The attributes the predicate reads: an update that changes none of them cannot make an
    /// object match.
    private let watchedKeys: Set<String>

    init(entity: EntityDescription, predicate: ObjectPredicate?) {
        self.entity = entity
        self.predicate = predicate
        watchedKeys = predicate?.keyPaths ?? []
        if case .isIn(let path, let values)? = predicate, let index = entity.attributeIndex[path],
           values.allSatisfy({ if case .string = $0 { true } else { false } }) {
            lookup = (index, Set(values))
        } else {
            lookup = nil
        }
    }

    /// The inserts that pass, in their order. With `index` (the save's inserts by value), a
    /// set lookup costs one probe per watched value instead of one per insert: an import chunk
    /// of 1,000 bugs offered to 100 subscribers waiting for a few keys each.
    func passing(_ inserted: [ObjectChange], index: SaveIndex?) -> [ObjectChange] {
        guard let lookup, let index else { return inserted.filter(passes) }
        return index.insertPositions(of: entity.name, attribute: lookup.attribute, in: lookup.values).map { inserted[$0] }
    }

    /// The objects among `updated` that changed a watched attribute and now match, other than
    /// those `registered` holds with values (sent to it anyway). With `index`, the updates that
    /// change a watched attribute are found once for every subscriber of a publish: an import's
    /// updates never rename a bug, and cost each watching subscriber nothing.
    func updatesPassing(_ updated: [ObjectChange], index: SaveIndex?, unless registered: [ObjectID: Subscription.Hold]) -> [ObjectID] {
        guard !watchedKeys.isEmpty else { return [] }
        let candidates = index?.updates(of: entity.name, changingAnyOf: watchedKeys).map { updated[$0] }
            ?? updated.filter { $0.objectID.entityName == entity.name && !watchedKeys.isDisjoint(with: $0.changedKeys) }
        return candidates.filter { registered[$0.objectID] != .values && passes($0) }.map(\.objectID)
    }

    /// Whether an insert passes. An insert without values (an old history row) passes when its
    /// entity does: the subscriber checks it.
    func passes(_ change: ObjectChange) -> Bool {
        guard change.objectID.entityName == entity.name else { return false }
        guard let predicate, let values = change.values else { return true }
        if let lookup { return values.attributes.indices.contains(lookup.attribute) && lookup.values.contains(values.attributes[lookup.attribute]) }
        return predicate.evaluate(on: InsertedRow(entity: entity, row: values))
    }

    /// An inserted row, read on its own: key paths through relationships are refused when the
    /// watch is made.
    private struct InsertedRow: RowKeyPathReading {
        let entity: EntityDescription
        let row: RowSnapshot
        func follow(_ id: ObjectID) -> InsertedRow? { nil }
    }
}

/// A save in a subscriber's mailbox.
struct QueuedSave: Sendable {
    /// The save, as this subscriber receives it.
    var save: DidSave
    /// The encoding this save shares with every other subscriber that receives the same save
    /// with the same options; `nil` for a save filtered to one subscriber's registrations.
    let encoding: SharedEncoding?
}

/// A save's object lists, encoded once when a first subscriber needs them and then shared.
final class SharedEncoding: Sendable {
    private let lists = Mutex<EncodedChangeLists?>(nil)

    /// The lists; `encode` runs for the first caller only.
    func lists(_ encode: () -> EncodedChangeLists) -> EncodedChangeLists {
        if let done = lists.withLock({ $0 }) { return done }
        let encoded = encode()
        return lists.withLock { lists in
            if let done = lists { return done }
            lists = encoded
            return encoded
        }
    }
}

/// The shared encodings of one published save, one per set of options a subscriber can ask for.
struct SharedEncodings: Sendable {
    private let encodings = (0..<4).map { _ in SharedEncoding() }

    func of(includeValues: Bool, idRuns: Bool) -> SharedEncoding { encodings[(includeValues ? 2 : 0) + (idRuns ? 1 : 0)] }
}

/// Consecutive saves merged one at a time, in time proportional to each save: the newest
/// version of each object, its changed keys merged; an object deleted last is only deleted, and
/// one inserted and deleted in between is gone.
///
/// An import's chunks each insert new objects and update a few older ones (the project whose
/// `bugs` grew, a bug edited meanwhile). While the saves' inserted and deleted objects are
/// disjoint, only the updated ones are merged by object; the inserted and deleted lists stay in
/// their saves (``disjoint``), so that they are neither hashed nor encoded again: merging them
/// is concatenation. That is checked cheaply, with the range of primary keys inserted per
/// entity and the set of deleted objects; the first save that may insert, update or delete an
/// object inserted or deleted before switches to merging every object.
struct CoalescedSaves: Sendable {
    /// The token of the newest save merged (or skipped).
    var token: HistoryToken = .zero
    let storeIdentifier: String

    /// The saves, while their inserted and deleted objects are disjoint; `nil` once every
    /// object is merged.
    private var saves: [QueuedSave]? = []
    /// Per entity, the smallest and largest primary key that `saves` inserted.
    private var insertedKeys: [String: ClosedRange<Int64>] = [:]
    /// The objects `saves` deleted.
    private var deletedObjects: Set<ObjectID> = []
    /// Per entity, the smallest and largest primary key in `updated` while `saves` is kept: an
    /// import's inserts lie past the bugs it updates, and need no lookup.
    private var updatedKeys: [String: ClosedRange<Int64>] = [:]
    private var savedCount = 0

    private var inserted: [ObjectID: ObjectChange] = [:]
    private var updated: [ObjectID: ObjectChange] = [:]
    private var deleted: [ObjectID: ObjectChange] = [:]
    private var order: [ObjectID] = []

    init(storeIdentifier: String) {
        self.storeIdentifier = storeIdentifier
    }

    /// How many distinct objects the merged save changes.
    var objectCount: Int {
        saves == nil ? inserted.count + updated.count + deleted.count : savedCount + updated.count
    }

    /// The merged save as saves whose inserted and deleted lists are concatenated, and the
    /// merged updates; `nil` when the saves had to be merged object by object.
    var disjoint: DisjointSaves? {
        saves.map { DisjointSaves(token: token, storeIdentifier: storeIdentifier, saves: $0, updated: order.compactMap { updated[$0] }) }
    }

    /// Merges the next save.
    mutating func add(_ save: DidSave) {
        add(QueuedSave(save: save, encoding: nil))
    }

    /// Merges the next save.
    mutating func add(_ queued: QueuedSave) {
        token = max(token, queued.save.token)
        let save = queued.save
        if let earlier = saves {
            if isDisjoint(save) {
                record(queued)
                return
            }
            // Back to merging every object: the saves so far again, in order, from scratch.
            saves = nil
            insertedKeys = [:]
            deletedObjects = []
            updatedKeys = [:]
            savedCount = 0
            updated = [:]
            order = []
            for queued in earlier { merge(queued.save) }
        }
        merge(save)
    }

    /// Whether `save` inserts, updates and deletes none of the objects the saves so far inserted
    /// or deleted, and inserts none they updated. Conservative: an object whose key lies in an
    /// entity's inserted range counts as inserted.
    private func isDisjoint(_ save: DidSave) -> Bool {
        var entity = ""
        var inserted: ClosedRange<Int64>?
        var updated: ClosedRange<Int64>?
        func ranges(of id: ObjectID) {
            guard id.entityName != entity else { return }
            entity = id.entityName
            inserted = insertedKeys[entity]
            updated = updatedKeys[entity]
        }
        func insertedBefore(_ id: ObjectID) -> Bool {
            ranges(of: id)
            return inserted?.contains(id.key) ?? false
        }
        func updatedBefore(_ id: ObjectID) -> Bool {
            ranges(of: id)
            return updated?.contains(id.key) == true && self.updated[id] != nil
        }
        func deletedBefore(_ id: ObjectID) -> Bool { !deletedObjects.isEmpty && deletedObjects.contains(id) }
        for change in save.inserted where insertedBefore(change.objectID) || deletedBefore(change.objectID) || updatedBefore(change.objectID) {
            return false
        }
        for change in [save.updated, save.deleted].joined() where insertedBefore(change.objectID) || deletedBefore(change.objectID) {
            return false
        }
        return true
    }

    /// Keeps a disjoint save: its updates merged by object, its inserted and deleted lists as they are.
    private mutating func record(_ queued: QueuedSave) {
        let save = queued.save
        var entity = ""
        var low = Int64.max
        var high = Int64.min
        func flush() {
            guard low <= high else { return }
            let known = insertedKeys[entity]
            insertedKeys[entity] = min(low, known?.lowerBound ?? low)...max(high, known?.upperBound ?? high)
        }
        for change in save.inserted {
            if change.objectID.entityName != entity {
                flush()
                entity = change.objectID.entityName
                low = .max
                high = .min
            }
            low = min(low, change.objectID.key)
            high = max(high, change.objectID.key)
        }
        flush()
        for change in save.updated { mergeUpdate(change) }
        for change in save.deleted {
            updated[change.objectID] = nil
            deletedObjects.insert(change.objectID)
        }
        savedCount += save.inserted.count + save.deleted.count
        saves?.append(queued)
    }

    /// Merges the update of an object that was not inserted in the merged saves: the newest
    /// version, the changed keys of all its updates.
    private mutating func mergeUpdate(_ change: ObjectChange) {
        var merged = change
        if let previous = updated[change.objectID] {
            if previous.changedKeys != change.changedKeys {
                merged.changedKeys = Array(Set(previous.changedKeys + change.changedKeys)).sorted()
            }
        } else {
            order.append(change.objectID)
            let id = change.objectID
            if saves != nil {
                updatedKeys[id.entityName] = updatedKeys[id.entityName].map { min($0.lowerBound, id.key)...max($0.upperBound, id.key) } ?? id.key...id.key
            }
        }
        updated[change.objectID] = merged
    }

    private mutating func merge(_ save: DidSave) {
        for change in save.inserted {
            if inserted[change.objectID] == nil && updated[change.objectID] == nil { order.append(change.objectID) }
            inserted[change.objectID] = change
            deleted[change.objectID] = nil
        }
        for change in save.updated {
            guard inserted[change.objectID] != nil else {
                mergeUpdate(change)
                continue
            }
            var merged = change
            merged.changedKeys = []
            inserted[change.objectID] = merged
        }
        for change in save.deleted {
            if inserted.removeValue(forKey: change.objectID) == nil { deleted[change.objectID] = change }
            updated[change.objectID] = nil
            order.append(change.objectID)
        }
    }

    /// The merged save: objects in the order they first changed, or, for disjoint saves, their
    /// inserted and deleted lists concatenated.
    func result() -> DidSave {
        var result = DidSave(token: token, storeIdentifier: storeIdentifier)
        if let disjoint {
            for queued in disjoint.saves {
                result.inserted += queued.save.inserted
                result.deleted += queued.save.deleted
            }
            result.updated = disjoint.updated
            return result
        }
        var seen = Set<ObjectID>()
        seen.reserveCapacity(objectCount)
        for id in order where seen.insert(id).inserted {
            if let change = inserted[id] { result.inserted.append(change) }
            if let change = updated[id] { result.updated.append(change) }
            if let change = deleted[id] { result.deleted.append(change) }
        }
        return result
    }
}

/// Consecutive saves whose inserted and deleted objects are disjoint, merged: their inserted and
/// deleted lists concatenated, and their updates merged by object.
struct DisjointSaves: Sendable {
    /// The token of the newest save.
    let token: HistoryToken
    /// The store that committed the saves.
    let storeIdentifier: String
    /// The saves, whose inserted and deleted lists are taken as they are.
    let saves: [QueuedSave]
    /// The updates, merged: the newest version of each object, changed keys merged.
    let updated: [ObjectChange]
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

/// The subscribers of the change feed, and the fan-out of every committed save to them.
final class NotificationHub: Sendable {
    private let subscriptions = Mutex<[String: Subscription]>([:])

    /// Adds a subscriber.
    func add(_ subscription: Subscription) {
        subscriptions.withLock { $0[subscription.id] = subscription }
    }

    /// Removes a subscriber and closes its mailbox.
    func remove(_ subscription: Subscription) {
        let last = subscriptions.withLock {
            $0[subscription.id] = nil
            return $0.isEmpty
        }
        subscription.close()
        // The registrations and mailboxes of every subscriber are freed: give the memory back.
        if last { returnFreedMemory() }
    }

    /// The subscriber with this ID.
    func subscription(_ id: String) -> Subscription? {
        subscriptions.withLock { $0[id] }
    }

    /// How many subscribers are connected (change feeds; not the followers of import jobs).
    var count: Int { subscriptions.withLock { $0.values.count { !$0.followsJob } } }

    /// How many clients follow an import job (`Jobs.Watch`).
    var jobFollowerCount: Int { subscriptions.withLock { $0.values.count(where: \.followsJob) } }

    /// Hands a committed save to every subscriber's mailbox; never waits for one. The saves
    /// written at once to live subscribers reach each event loop in one task, after the last
    /// subscriber's (``ChannelWriteBatch``).
    func publish(_ didSave: DidSave) {
        let all = subscriptions.withLock { Array($0.values) }
        var withoutValues: DidSave?
        let encodings = SharedEncodings()
        let index = SaveIndex(didSave)
        ChannelWriteBatch.collecting {
            for subscription in all {
                subscription.offer(didSave, withoutValues: {
                    if let withoutValues { return withoutValues }
                    let stripped = didSave.withoutValues
                    withoutValues = stripped
                    return stripped
                }, encodings: encodings, index: index)
            }
        }
    }
}
