import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherVarlink
import CoreMetrics
import Foundation
import Logging
import Synchronization

/// `io.bugsquasher.Changes`: the change feed, registrations, history.
struct ChangesInterface: VarlinkInterface {
    let name = InterfaceName.changes
    let writes = false
    let stack: PersistentStack
    let hub: NotificationHub
    let coding: WireCoding
    let pendingLimit: Int
    /// Caps on registrations, shared by every subscription.
    let registrationLimits: RegistrationLimits
    /// Where reads of a client's making run (history pages, a registration's versions).
    let readers: ThreadExecutor
    /// Saves already encoded for one subscriber, reused for the others that get the same one.
    let encodedSaves = EncodedSaveCache()
    /// When given, a subscriber that fell behind is caught up after an edit's window (see
    /// ``Subscription/catchUpAfterInteractiveSaves(_:)``).
    var editsFirst: EditsFirst? = nil
    /// Where dropped subscribers are noted, for the daemon's health.
    var health = HealthRecord()
    /// Coalesced saves and resyncs, counted.
    var metrics = SquasherdMetrics()

    /// `Subscribe` streams.
    func streams(_ method: String) -> Bool { method == "Subscribe" }

    func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        do {
            switch call.methodName {
            case "Subscribe": try await handleSubscribe(call, context: context, replier: replier)
            case "Register": try await handleRegister(call, context: context, replier: replier)
            case "Unregister": try await handleUnregister(call, context: context, replier: replier)
            case "History": try await handleHistory(call, context: context, replier: replier)
            default:
                throw VarlinkError.methodNotFound(call.method)
            }
        } catch let error as GraphError where error.isStoreUnavailable {
            throw VarlinkError("io.bugsquasher.Changes.StoreUnavailable", explaining: error)
        }
    }

    /// `Subscribe`: streams the change feed from a token or from now (call with `more`).
    private func handleSubscribe(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        guard call.more else { throw VarlinkError.expectedMore }
        try await subscribe(try call.parameters(SubscribeParameters.self), context: context, replier: replier)
    }

    /// `Register`: registers object IDs (with their versions) on a subscription; stale ones are refreshed at once.
    private func handleRegister(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let parameters = try call.parameters(RegisterParameters.self)
        let subscription = try subscriptionFor(parameters.subscription)
        let ids = try registrations(parameters.ids, versions: parameters.versions)
        let count = try register(ids, versions: parameters.versions, on: subscription)
        if let versions = parameters.versions {
            try await refreshStale(ids: ids, versions: versions, for: subscription)
        }
        try await replier.reply(RegisterReply(registered: count))
    }

    /// `Unregister`: unregisters object IDs.
    private func handleUnregister(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let parameters = try call.parameters(RegisterParameters.self)
        let subscription = try subscriptionFor(parameters.subscription)
        try await replier.reply(RegisterReply(registered: subscription.unregister(try parse(parameters.ids))))
    }

    /// `History`: a page of the saves after a token.
    private func handleHistory(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let parameters = try call.parameters(HistoryParameters.self)
        guard parameters.after >= 0 else { throw VarlinkError.invalidParameter("after") }
        if let limit = parameters.limit, limit < 1 { throw VarlinkError.invalidParameter("limit") }
        var saves = try await readers.run {
            try stack.store.changes(
                after: HistoryToken(rawValue: parameters.after), limit: min(parameters.limit ?? 100, 1_000))
        }
        // A reply of 1,000 import chunks would hold a million IDs: cut it after the save
        // that passes the cap, and the client asks again from there.
        var objects = 0
        if let cut = saves.firstIndex(where: {
            objects += $0.objectCount
            return objects >= Self.historyObjectCap
        }) {
            saves.removeSubrange((cut + 1)...)
        }
        let token = try stack.store.currentHistoryToken()
        // As for Subscribe: a token the store never issued (a client of a store restored
        // from an older backup) is said, not answered with an empty page.
        if parameters.after > token.rawValue {
            throw VarlinkError(
                "io.bugsquasher.Changes.TokenAhead",
                ["since": .int(parameters.after), "token": .int(token.rawValue)])
        }
        // Saves after `after` that were pruned would be skipped without a word.
        if let horizon = try historyHorizon(), parameters.after < horizon.rawValue {
            throw VarlinkError(
                "io.bugsquasher.Changes.HistoryExpired",
                ["after": .int(parameters.after), "horizon": .int(horizon.rawValue)]
            )
        }
        try await replier.reply(
            HistoryReply(saves: saves.map { coding.encode($0, includeValues: false) }, token: token.rawValue))
    }

    /// Registers IDs; a registration past a cap fails with the Varlink error
    /// `TooManyRegistrations`.
    private func register(_ ids: [ObjectID], versions: [Int64]?, on subscription: Subscription) throws -> Int {
        do {
            return try subscription.register(ids, versions: versions)
        } catch {
            throw VarlinkError(
                "io.bugsquasher.Changes.TooManyRegistrations",
                [
                    "limit": .int(Int64(error.limit)), "registered": .int(Int64(error.registered)),
                    "scope": .string(error.scope),
                ])
        }
    }

    private func subscriptionFor(_ id: String) throws -> Subscription {
        guard let subscription = hub.subscription(id) else {
            throw VarlinkError("io.bugsquasher.Changes.SubscriptionNotFound", ["subscription": .string(id)])
        }
        return subscription
    }

    private func parse(_ uris: [String]) throws -> [ObjectID] {
        try uris.map { uri in
            guard let id = stack.mainCoordinator.managedObjectID(forURIRepresentation: uri) else {
                throw VarlinkError("io.bugsquasher.Changes.InvalidObjectID", ["id": .string(uri)])
            }
            return id
        }
    }

    /// The IDs of a registration, checked against the versions sent with them (one per ID, 0
    /// for a fault or a version a save gave).
    private func registrations(_ uris: [String], versions: [Int64]?) throws -> [ObjectID] {
        if let versions, versions.count != uris.count || versions.contains(where: { $0 < 0 }) {
            throw VarlinkError.invalidParameter("versions")
        }
        return try parse(uris)
    }

    /// Registered objects whose stored version is newer than the one the subscriber holds are
    /// sent at once, with their values, and those the store no longer has as deleted: a change
    /// or a deletion committed between the subscriber's read and its registration is not lost,
    /// nor one in saves pruned before the subscriber read them (it registers what it holds
    /// again). Faults (version 0) are not read: every fetch that returns faults registers them,
    /// and reading their rows here would cost a read per object fetched; a fault deleted meanwhile
    /// says so when it fires.
    private func refreshStale(ids: [ObjectID], versions: [Int64], for subscription: Subscription) async throws {
        let held = Dictionary(zip(ids, versions), uniquingKeysWith: { a, _ in a }).filter { $0.value > 0 }
        guard !held.isEmpty else { return }
        let current = try await readers.run { try stack.store.newValues(for: Array(held.keys)) }
        var refresh = Mailbox.Refresh()
        for (id, version) in held {
            if let row = current[id] {
                if row.version > version {
                    refresh.updated.append(
                        ObjectChange(objectID: id, version: row.version, changedKeys: [], values: row))
                }
            } else {
                refresh.deleted.append(ObjectChange(objectID: id, version: version, changedKeys: []))
            }
        }
        subscription.offerRefresh(refresh)
    }

    /// The inserts a filtered subscription asked to receive, checked: a known entity, and a
    /// predicate on that entity's own attributes.
    private func insertWatch(_ parameters: SubscribeParameters) throws -> InsertWatch? {
        guard let name = parameters.insertsOf else {
            if parameters.insertsMatching != nil { throw VarlinkError.invalidParameter("insertsOf") }
            return nil
        }
        guard let entity = stack.model.entity(named: name) else { throw VarlinkError.invalidParameter("insertsOf") }
        guard let text = parameters.insertsMatching, !text.isEmpty else {
            return InsertWatch(entity: entity, predicate: nil)
        }
        do {
            let predicate = try ObjectPredicate(parsing: text).coerced(for: entity, in: stack.model)
            guard predicate.keyPaths.allSatisfy({ !$0.contains(".") && entity.attribute(named: $0) != nil }) else {
                throw VarlinkError.invalidParameter("insertsMatching")
            }
            return InsertWatch(entity: entity, predicate: predicate)
        } catch is GraphError {
            throw VarlinkError.invalidParameter("insertsMatching")
        }
    }

    /// The changed objects after which a `History` reply ends (after the save that passes it).
    static let historyObjectCap = 100_000
    /// The objects a page of a subscriber's history replay aims at (one save may exceed it).
    static let replayPageObjects = 10_000
    /// The saves a page of a history replay holds at most.
    static let replayPageSaves = 500

    private func subscribe(_ parameters: SubscribeParameters, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        if let since = parameters.since, since < 0 { throw VarlinkError.invalidParameter("since") }
        let since = parameters.since.map(HistoryToken.init(rawValue:))
        let subscription = Subscription(
            registeredOnly: parameters.registeredOnly ?? false, includeValues: parameters.includeValues ?? false,
            idRuns: parameters.idRuns ?? false, pendingLimit: pendingLimit, registrationLimits: registrationLimits,
            insertWatch: try insertWatch(parameters), startToken: since ?? .zero
        )
        var initialIDs: [ObjectID] = []
        // Versions without the IDs they go with are a client's mistake, not nothing to register.
        if parameters.register == nil, parameters.versions != nil { throw VarlinkError.invalidParameter("versions") }
        if let initial = parameters.register {
            initialIDs = try registrations(initial, versions: parameters.versions)
            _ = try register(initialIDs, versions: parameters.versions, on: subscription)
        }
        // Join the fan-out first, read the current token second: a save committed in between is
        // then in the mailbox (and skipped below if the history replay covers it), never lost.
        hub.add(subscription)
        defer { hub.remove(subscription) }
        // Versions held that are older than the store's are refreshed, and objects gone are
        // deleted, as `Register` does (with `since`, the history replay brings those instead).
        if since == nil, let versions = parameters.versions {
            try await refreshStale(ids: initialIDs, versions: versions, for: subscription)
        }
        let start = try stack.store.currentHistoryToken()
        if let since, since > start {
            // A token this store never issued: the client followed another store (one that was
            // recreated, or restored from an older backup). Resuming would silently skip every
            // save up to that token.
            throw VarlinkError(
                "io.bugsquasher.Changes.TokenAhead", ["since": .int(since.rawValue), "token": .int(start.rawValue)])
        }
        if let since, let horizon = try historyHorizon(), since < horizon {
            // The saves after `since` are partly gone: resuming would skip them without a word.
            try await replier.reply(
                SubscribeReply(event: "subscribed", subscription: subscription.id, token: since.rawValue),
                continues: true)
            context.logger.info(
                "subscriber's token is older than the retained history; told to refetch",
                metadata: ["since": "\(since)", "history.horizon": "\(horizon)"])
            try await historyExpired(resyncFrom: start, replier: replier)
            return
        }
        if since == nil { subscription.markDelivered(start) } else { subscription.replays(through: start) }
        context.logger.debug(
            "subscribed",
            metadata: ["subscription": "\(subscription.id)", "since": "\(since.map(\.description) ?? "now")"])
        try await replier.reply(
            SubscribeReply(event: "subscribed", subscription: subscription.id, token: (since ?? start).rawValue),
            continues: true)

        // History after `since`, up to the token read before subscribing; the mailbox holds
        // everything committed since, and skips what was replayed.
        if let since, since < start {
            guard try await replay(after: since, through: start, to: subscription, replier: replier) else {
                context.logger.info(
                    "the history was pruned while a subscriber replayed it; told to refetch",
                    metadata: ["since": "\(since)"])
                return
            }
        }
        try await followLive(subscription, replier: replier)
    }

    /// Ends a Subscribe with a `resync` from `token`: saves it would have replayed are pruned.
    private func historyExpired(resyncFrom token: HistoryToken, replier: some VarlinkReplier) async throws {
        try await replier.reply(
            SubscribeReply(
                event: "resync", token: token.rawValue, resyncFrom: token.rawValue, reason: ResyncReason.historyExpired),
            continues: false)
    }

    /// The newest token pruned from the history, when the store prunes it (`nil` otherwise).
    private func historyHorizon() throws -> HistoryToken? {
        try (stack.store as? any HistoryPruning)?.historyHorizon()
    }

    /// Sends the history after `since` up to `start`, in pages; the mailbox holds everything
    /// committed since, and skips what was replayed. Returns `false` when saves not sent yet were
    /// pruned meanwhile (retention, here or by another daemon on a shared store): the subscriber
    /// is then told to resync, as when its token is older than the history, never resumed past them.
    private func replay(
        after since: HistoryToken, through start: HistoryToken, to subscription: Subscription,
        replier: some VarlinkReplier
    ) async throws -> Bool {
        var position = since
        // A page is decoded whole and held while it is sent, as slowly as the client reads:
        // its size follows its saves' (a few import chunks, or hundreds of edits), so that a
        // client that asks for the whole history and never reads holds a page of about
        // `replayPageObjects` objects, not up to 500 import chunks (26 MB per client, measured).
        var limit = 1
        while position < start {
            let (after, count) = (position, limit)
            let page = try await readers.run { try stack.store.changes(after: after, limit: count) }
            guard let last = page.last else { break }
            if page[0].token.rawValue > position.rawValue + 1 {
                try await historyExpired(resyncFrom: start, replier: replier)
                return false
            }
            let objects = page.reduce(0) { $0 + $1.objectCount }
            limit = max(1, min(Self.replayPageSaves, limit * Self.replayPageObjects / max(1, objects), limit * 2))
            for save in page where save.token <= start {
                let filtered = subscription.filtered(save)
                if !filtered.isEmpty {
                    try await send(.save(filtered, live: false), subscription: subscription, replier: replier)
                }
                subscription.markDelivered(save.token)
            }
            position = last.token
        }
        subscription.markDelivered(start)
        return true
    }

    /// Sends the saves committed from now on, as they come, until the subscription ends or
    /// falls behind (a resync).
    private func followLive(_ subscription: Subscription, replier: some VarlinkReplier) async throws {
        // From here on, a save that finds this task waiting is written by the publisher itself.
        subscription.sendsNow { save in
            guard let message = try? liveMessage(save, for: subscription) else { return false }
            return replier.sendNow(continuing: message)
        }
        while true {
            if let editsFirst { await subscription.catchUpAfterInteractiveSaves(editsFirst) }
            guard let event = await subscription.next() else { return }
            switch event {
            // From the mailbox, a save that is not live is the pending saves merged into one.
            case .save(_, live: false), .disjoint: metrics.coalesced.increment()
            default: break
            }
            try await send(event, subscription: subscription, replier: replier)
            if case .resync = event { return }
        }
    }

    private func send(_ event: Subscription.Event, subscription: Subscription, replier: some VarlinkReplier)
        async throws
    {
        switch event {
        case .save(let save, let live):
            let message = live ? try liveMessage(save, for: subscription) : try saveMessage(save, for: subscription)
            try await replier.send(message, continues: true)
        case .disjoint(let merged):
            let lists = merged.saves.map { queued in
                let encodeLists = { EncodedChangeLists(encode(queued.save, for: subscription)) }
                return queued.encoding?.lists(encodeLists) ?? encodeLists()
            }
            let updated = encode(
                DidSave(token: merged.token, storeIdentifier: merged.storeIdentifier, updated: merged.updated),
                for: subscription
            ).updated
            try await replier.send(
                Data(SubscribeReply.splicedSave(token: merged.token.rawValue, lists: lists, updated: updated)),
                continues: true)
        case .refresh(let refresh):
            let save = DidSave(
                token: subscription.deliveredToken, storeIdentifier: stack.mainCoordinator.storeIdentifier,
                updated: refresh.updated, deleted: refresh.deleted)
            try await replier.reply(
                SubscribeReply(event: "refresh", token: save.token.rawValue, save: encode(save, for: subscription)),
                continues: true)
        case .resync(let token):
            health.droppedSubscriber()
            metrics.resynced.increment()
            try await replier.reply(
                SubscribeReply(
                    event: "resync", token: token.rawValue, resyncFrom: token.rawValue, reason: ResyncReason.behind),
                continues: false)
        case .nudge:
            // Only job followers are nudged.
            break
        }
    }
}

extension ChangesInterface {
    /// A save as this subscriber asked for it: with values or not, with runs of IDs or not.
    private func encode(_ save: DidSave, for subscription: Subscription) -> WireSave {
        coding.encode(save, includeValues: subscription.includeValues, idRuns: subscription.idRuns)
    }

    /// The reply that carries a save to this subscriber.
    private func saveMessage(_ save: DidSave, for subscription: Subscription) throws -> Data {
        try VarlinkReply.encode(
            SubscribeReply(event: "save", token: save.token.rawValue, save: encode(save, for: subscription)),
            continues: true)
    }

    /// The reply that carries a live save (as published, or filtered from it) to this
    /// subscriber, encoded once for every subscriber that receives the same one.
    private func liveMessage(_ save: DidSave, for subscription: Subscription) throws -> Data {
        let key: EncodedSaveCache.Key =
            subscription.registeredOnly
            ? .filtered(
                save.token, changes: EncodedSaveCache.ChangeIdentity.of(save),
                includeValues: subscription.includeValues, idRuns: subscription.idRuns)
            : .published(save.token, includeValues: subscription.includeValues, idRuns: subscription.idRuns)
        return try encodedSaves.message(for: key) { try saveMessage(save, for: subscription) }
    }
}

/// The encoded replies of recent saves: subscribers that receive the same (filtered) save with
/// the same options share one encoding, so fan-out to many subscribers encodes once.
final class EncodedSaveCache: Sendable {
    /// What identifies an encoding.
    enum Key: Hashable {
        /// A whole committed save, by its token: every unfiltered subscriber gets the same one,
        /// so the token is the key (no hashing of the save).
        case published(HistoryToken, includeValues: Bool, idRuns: Bool)
        /// A save filtered to some registrations, by its token and the changes it kept, each
        /// named by its object and version: a filtered save takes its changes whole from a
        /// committed one, and one version of an object has one set of values. (Keyed by the
        /// save itself, every value was hashed for each subscriber.)
        case filtered(HistoryToken, changes: [ChangeIdentity], includeValues: Bool, idRuns: Bool)
    }

    /// One change of a save, by the object and the version it brought the object to.
    struct ChangeIdentity: Hashable {
        /// Which list of the save the change is in.
        enum Kind: UInt8 { case inserted, updated, deleted }

        var objectID: ObjectID
        var version: Int64
        var kind: Kind

        static func of(_ save: DidSave) -> [ChangeIdentity] {
            var changes: [ChangeIdentity] = []
            changes.reserveCapacity(save.inserted.count + save.updated.count + save.deleted.count)
            for change in save.inserted {
                changes.append(ChangeIdentity(objectID: change.objectID, version: change.version, kind: .inserted))
            }
            for change in save.updated {
                changes.append(ChangeIdentity(objectID: change.objectID, version: change.version, kind: .updated))
            }
            for change in save.deleted {
                changes.append(ChangeIdentity(objectID: change.objectID, version: change.version, kind: .deleted))
            }
            return changes
        }
    }

    /// Fan-out happens right after each commit, so a few recent saves are enough; large saves
    /// with values are megabytes each.
    private static let capacity = 8
    private let entries = Mutex<(data: [Key: Data], order: [Key])>(([:], []))

    func message(for key: Key, encode: () throws -> Data) throws -> Data {
        if let hit = entries.withLock({ $0.data[key] }) { return hit }
        let data = try encode()
        entries.withLock { entries in
            guard entries.data.updateValue(data, forKey: key) == nil else { return }
            entries.order.append(key)
            if entries.order.count > Self.capacity { entries.data[entries.order.removeFirst()] = nil }
        }
        return data
    }
}
