import Algorithms
public import BugSquasherErrors
public import BugSquasherGraph
public import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
public import Logging
import Synchronization

/// A subscriber process's view of the bug store: an `ObjectContext` over a ``RemoteStore``, kept
/// current by the change feed, which sends only changes to the objects the context registers. Each
/// did-save is merged and reported; a dropped feed resumes from its last token, missing nothing.
///
/// ```swift
/// let subscriber = try Subscriber(socketPath: "/run/squasherd/squasherd.sock")
/// try await subscriber.run { context, event in print(event.refreshed) }
/// ```
public final class Subscriber: Sendable {
    /// The context the subscriber's objects live in.
    public let context: ObjectContext
    /// The remote store under it.
    public let store: RemoteStore
    /// One event per merged did-save that touched registered objects.
    public let refreshes: AsyncStream<RefreshEvent>
    private let refreshContinuation: AsyncStream<RefreshEvent>.Continuation
    private let socketPath: String
    private let includeValues: Bool
    private let registeredOnly: Bool
    private let insertsOf: String?
    private let insertsMatching: ObjectPredicate?
    private let logger: Logger
    private let coding: WireCoding
    private let state: Mutex<State>

    private struct State {
        var token: HistoryToken?
        var subscription: String?
        var pendingAdded: [(ObjectID, Int64)] = []
        var pendingRemoved: [ObjectID] = []
        var bytesReceived = 0
        /// How the feed is followed across its failures.
        var reconnection = FeedReconnection()
    }

    /// What one merge did.
    public struct RefreshEvent: Sendable, Hashable {
        /// The token of the newest save merged.
        public var token: HistoryToken
        /// Registered objects refreshed.
        public var refreshed: [ObjectID]
        /// Registered objects deleted.
        public var deleted: [ObjectID]
        /// Objects the save inserted that the subscriber watches for (`insertsOf`, `matching`);
        /// none registered them yet: fetch them to hold them.
        public var inserted: [ObjectID] = []
        /// Objects of the watched entity, not registered, that the save changed in an attribute
        /// `matching` reads, so that they may match now (a bug renamed to a key waited for):
        /// fetch them with the predicate to hold those that do.
        public var changedIntoWatch: [ObjectID] = []
        /// Whether this came from a registration that found a stale version, not a save.
        public var isCatchUp: Bool
    }

    /// Connects to squasherd's read socket (`squasherd.sock` in its runtime directory).
    ///
    /// - Parameters:
    ///   - socketPath: squasherd's read socket (`squasherd.sock` in its runtime directory).
    ///   - model: the model of squasherd's store (the bug model by default).
    ///   - since: the token to resume from; without it, the feed starts at the store's token now.
    ///   - includeValues: receive new values with each change, so a refresh costs no round trip.
    ///   - registeredOnly: let squasherd filter the feed to registered objects; `false` filters here.
    ///   - insertsOf: report this entity's inserts that match `matching` (all when `nil`) in
    ///     ``RefreshEvent/inserted``, for objects that do not exist yet; squasherd filters them.
    ///   - matching: the predicate the inserts of `insertsOf` must match.
    ///   - timeout: how long connecting and each store call wait before a `TransportError` (`nil`: no limit).
    ///   - logger: where the subscriber logs its reconnects and resyncs.
    public init(
        socketPath: String, model: ManagedObjectModel = BugModel.model, since: HistoryToken? = nil,
        includeValues: Bool = true,
        registeredOnly: Bool = true, insertsOf: String? = nil, matching: ObjectPredicate? = nil,
        timeout: Duration? = nil,
        logger: Logger = Logger(label: "bugsquasher.subscriber")
    ) throws {
        self.socketPath = socketPath
        self.includeValues = includeValues
        self.registeredOnly = registeredOnly
        self.insertsOf = insertsOf
        insertsMatching = matching
        self.logger = logger
        coding = WireCoding(model: model)
        store = try RemoteStore(socketPath: socketPath, timeout: timeout)
        let coordinator = try StoreCoordinator(model: model, store: store)
        context = ObjectContext(
            coordinator: coordinator, mergePolicy: .mergeByPropertyStoreTrump, name: "subscriber", logger: logger)
        // A consumer that stops reading keeps the newest events only, not an unbounded backlog.
        (refreshes, refreshContinuation) = AsyncStream.makeStream(
            of: RefreshEvent.self, bufferingPolicy: .bufferingNewest(10_000))
        let current = try store.tokenAtLoad ?? store.currentHistoryToken()
        if let since, since > current {
            // A token this store never issued, as `run()` meets it on a reconnect (TokenAhead).
            logger.error(
                "squasherd's store is behind the token to resume from (restored from a backup?); following its feed from its current token",
                metadata: ["since": "\(since)", "token": "\(current)"])
        }
        state = Mutex(State(token: since.map { min($0, current) } ?? current))
        let registrar = Registrar()
        store.registrationSink.withLock { sink in
            sink = { [weak registrar] added, removed in registrar?.subscriber?.queue(added: added, removed: removed) }
        }
        self.registrar = registrar
        registrar.subscriber = self
    }

    private let registrar: Registrar
    /// The connection registrations are sent on (opened on first use).
    private let registrationClient = Mutex<BlockingVarlinkClient?>(nil)

    /// Bytes received on the change feed so far.
    public var bytesReceived: Int { state.withLock { $0.bytesReceived } }

    /// The token of the newest save merged (what a restart passes as `since`).
    public var lastToken: HistoryToken? { state.withLock { $0.token } }

    /// Called with each event inside the context's isolation, right after the merge that made it.
    /// An error it throws ends ``run(onRefresh:)`` with that error (a consumer that can no longer
    /// take events: its output failed, say), rather than a reconnect.
    public typealias RefreshHandler =
        @Sendable (_ context: isolated ObjectContext, _ event: RefreshEvent) throws -> Void

    /// What a ``RefreshHandler`` threw, carried out of the feed past its reconnects.
    private struct HandlerFailure: Error {
        let error: any Error
    }

    /// Follows the change feed until the task is cancelled, reconnecting after failures.
    ///
    /// - Parameter onRefresh: called with each event in the context's isolation right after its merge,
    ///   where the refreshed objects can be read at once; its events do not go to ``refreshes``.
    /// - Throws: ``StoreReplaced`` when squasherd is back serving another store; whatever `onRefresh` threw.
    public func run(onRefresh: RefreshHandler? = nil) async throws {
        defer { refreshContinuation.finish() }
        while !Task.isCancelled {
            var failure: any Error = CancellationError()
            let ending: FeedReconnection.Ending
            do {
                try await followFeed(onRefresh: onRefresh)
                ending = .endedByDaemon
            } catch {
                failure = error
                ending = Task.isCancelled ? .cancelled : Self.ending(of: error)
            }
            state.withLock { $0.subscription = nil }
            // The registrations' connection goes with the feed: after a restart of squasherd it
            // leads to the process that ended, and the next subscription's first Register would
            // fail on it and end that feed too.
            registrationClient.withLock { $0 = nil }
            let action = state.withLock { $0.reconnection.feedEnded(ending) }
            switch action {
            case .stop:
                return
            case .fail:
                throw (failure as? HandlerFailure)?.error ?? failure
            case .reconnect(_, fromNow: true):
                // Registering the held objects again with their versions refreshes the ones the
                // store has newer.
                logger.error(
                    "squasherd's store is behind this subscriber's token (restored from a backup?); following its feed from now",
                    metadata: ["error": "\(failure)"])
                state.withLock { $0.token = nil }
            case .reconnect(let delay, fromNow: false):
                guard delay > .zero else { continue }
                // Said once; squasherd still away after that is the same news.
                if state.withLock({ $0.reconnection.failuresInARow }) == 1 {
                    logger.warning(
                        "change feed interrupted; reconnecting by itself (not logged again until it is back)",
                        metadata: [
                            // What happened, without a command's advice ("start it again,
                            // then retry"): the subscriber retries by itself.
                            "error":
                                "\(TransportError.squasherdConnectionFailure(in: failure)?.statement ?? "\(failure)")",
                            "token": "\(lastToken.map(\.description) ?? "-")",
                        ])
                }
                try? await Task.sleep(for: delay)
            }
        }
    }

    /// What a failure of the feed means for following it (see ``FeedReconnection``).
    private static func ending(of error: any Error) -> FeedReconnection.Ending {
        switch error {
        case is CancellationError: .cancelled
        case is HandlerFailure: .handlerFailed
        case is StoreReplaced: .storeReplaced
        case let error as VarlinkError where error.name == VarlinkError.messageTooLargeName: .refusedForGood
        case let error as VarlinkError where error.name == "io.bugsquasher.Changes.TokenAhead": .tokenAhead
        default: .failed
        }
    }

    private func followFeed(onRefresh: RefreshHandler?) async throws {
        // squasherd may have come back on another store (another state directory, a store
        // recreated): its IDs and tokens are not this context's.
        let served = try store.servedStoreIdentifier()
        guard served == context.coordinator.storeIdentifier else {
            throw StoreReplaced(held: context.coordinator.storeIdentifier, served: served)
        }
        let allHeld = store.heldVersions()
        // The Subscribe call carries the first registrations, and Register calls the rest once
        // subscribed: hundreds of thousands of IDs in one call would pass squasherd's
        // max_message_bytes, and be refused at every reconnect.
        let held = Array(allHeld.prefix(Self.registrationBatch))
        let heldLater = Array(allHeld.dropFirst(Self.registrationBatch))
        let heldVersions = Dictionary(allHeld, uniquingKeysWith: max)
        let parameters = SubscribeParameters(
            since: lastToken?.rawValue, registeredOnly: registeredOnly, includeValues: includeValues,
            register: held.map { $0.0.uriString }, versions: held.map(\.1),
            insertsOf: insertsOf, insertsMatching: insertsMatching?.text
        )
        try await VarlinkStream.call(
            path: socketPath, method: "io.bugsquasher.Changes.Subscribe", parameters: parameters
        ) { replies in
            for try await (event, bytes) in replies.decoding(SubscribeReply.self) {
                state.withLock { $0.bytesReceived += bytes + 1 }
                switch event.event {
                case "subscribed":
                    try subscribed(event, held: held, heldLater: heldLater, heldVersions: heldVersions)
                case "save", "refresh":
                    guard let wire = event.save else { continue }
                    try await merge(wire, isCatchUp: event.event == "refresh", onRefresh: onRefresh)
                case "resync":
                    logger.notice(
                        "squasherd asked for a resync", metadata: ["token": "\(event.resyncFrom ?? event.token)"])
                    // Resume after the last save sent, which is the last one merged: never
                    // behind what this context holds.
                    if let from = event.resyncFrom {
                        state.withLock { $0.token = max($0.token ?? .zero, HistoryToken(rawValue: from)) }
                    }
                    return
                default:
                    continue
                }
                try flushRegistrations()
            }
        }
    }

    /// The feed began: its subscription takes the registrations held beyond the Subscribe call's,
    /// and those whose versions may be older than the store's, for a catch-up.
    private func subscribed(
        _ event: SubscribeReply, held: [(ObjectID, Int64)], heldLater: [(ObjectID, Int64)],
        heldVersions: [ObjectID: Int64]
    ) throws {
        let reconnected = state.withLock { $0.reconnection.feedBegan() }
        if reconnected {
            logger.notice(
                "change feed back; resuming after token \(lastToken.map(\.description) ?? "\(event.token)")")
        }
        state.withLock { state in
            state.subscription = event.subscription
            if state.token == nil { state.token = HistoryToken(rawValue: event.token) }
            // Everything held is in the Subscribe call or the Register calls just
            // below; only later changes (a registration, a fault that loaded since)
            // are pending.
            state.pendingAdded.removeAll { heldVersions[$0.0] == $0.1 }
        }
        // Versions held now may be older than the store's: ask for a catch-up.
        try sendRegistrations(added: held.filter { $0.1 > 0 } + heldLater, removed: [])
    }

    /// Merges a save of the feed into the context, and hands the objects it refreshed to
    /// `onRefresh` (or to ``refreshes``).
    private func merge(_ wire: WireSave, isCatchUp: Bool, onRefresh: RefreshHandler?) async throws {
        let didSave = try coding.decode(wire, storeIdentifier: context.coordinator.storeIdentifier)
        store.noteVersions(didSave)
        let inserted =
            insertsOf.map { entity in
                didSave.inserted.lazy.map(\.objectID).filter { $0.entityName == entity }
            } ?? []
        let watchedKeys = insertsMatching?.keyPaths ?? []
        let watchedEntity = insertsOf
        let refresh = try await context.perform { context -> RefreshEvent? in
            let changedIntoWatch =
                watchedKeys.isEmpty
                ? []
                : didSave.updated.lazy.filter {
                    $0.objectID.entityName == watchedEntity && !watchedKeys.isDisjoint(with: $0.changedKeys)
                        && context.registeredObject(for: $0.objectID) == nil
                }.map(\.objectID)
            let result = context.merge(didSave)
            guard
                !result.refreshed.isEmpty || !result.deleted.isEmpty || !inserted.isEmpty
                    || !changedIntoWatch.isEmpty
            else { return nil }
            var refresh = RefreshEvent(
                token: didSave.token, refreshed: result.refreshed, deleted: result.deleted,
                inserted: inserted, isCatchUp: isCatchUp)
            refresh.changedIntoWatch = Array(changedIntoWatch)
            do { try onRefresh?(context, refresh) } catch { throw HandlerFailure(error: error) }
            return refresh
        }
        if !isCatchUp { state.withLock { $0.token = didSave.token } }
        if let refresh, onRefresh == nil { refreshContinuation.yield(refresh) }
    }

    /// Registrations made while the feed runs are sent in batches, between events and on queueing.
    fileprivate func queue(added: [(ObjectID, Int64)], removed: [ObjectID]) {
        state.withLock { state in
            state.pendingAdded += added
            state.pendingRemoved += removed
        }
        do {
            try flushRegistrations()
        } catch let error as VarlinkError where error.name == "io.bugsquasher.Changes.TooManyRegistrations" {
            // Kept pending and sent again with the next batch; until squasherd takes them,
            // changes to these objects do not arrive.
            logger.warning(
                "squasherd refuses more registrations for this subscriber; unregister (release) objects no longer held",
                metadata: ["error": "\(error)"])
        } catch {}
    }

    private func flushRegistrations() throws {
        let (subscription, added, removed) = state.withLock { state -> (String?, [(ObjectID, Int64)], [ObjectID]) in
            guard state.subscription != nil else { return (nil, [], []) }
            defer {
                state.pendingAdded.removeAll()
                state.pendingRemoved.removeAll()
            }
            return (state.subscription, state.pendingAdded, state.pendingRemoved)
        }
        guard subscription != nil else { return }
        do {
            try sendRegistrations(added: added, removed: removed)
        } catch {
            // Not lost: sent with the next batch, or with the next Subscribe after a reconnect.
            state.withLock { state in
                state.pendingAdded = added + state.pendingAdded
                state.pendingRemoved = removed + state.pendingRemoved
            }
            throw error
        }
    }

    /// How many object IDs one call registers or unregisters: about 750 kB, well within
    /// squasherd's max_message_bytes (16 MiB by default).
    static let registrationBatch = 10_000

    private func sendRegistrations(added: [(ObjectID, Int64)], removed: [ObjectID]) throws {
        guard let subscription = state.withLock({ $0.subscription }), !(added.isEmpty && removed.isEmpty) else {
            return
        }
        let client = try registrationClient.withLock { client in
            if let client { return client }
            let connected = try BlockingVarlinkClient(path: socketPath)
            client = connected
            return connected
        }
        do {
            for batch in added.chunks(ofCount: Self.registrationBatch) {
                let _: RegisterReply = try client.call(
                    "io.bugsquasher.Changes.Register",
                    RegisterParameters(
                        subscription: subscription, ids: batch.map { $0.0.uriString }, versions: batch.map { $0.1 }))
            }
            for batch in removed.chunks(ofCount: Self.registrationBatch) {
                let _: RegisterReply = try client.call(
                    "io.bugsquasher.Changes.Unregister",
                    RegisterParameters(subscription: subscription, ids: batch.map(\.uriString)))
            }
        } catch let error as VarlinkError where error.name == Self.subscriptionNotFound {
            // squasherd ended the subscription (as it began, when the token to resume from is
            // older than its retained history): the feed says why next, a `resync` or its end,
            // and the Subscribe after it carries every object held, these among them. Thrown,
            // this would end the feed before the resync's token, and each Subscribe from the
            // old token would end the same way.
            logger.debug("squasherd ended the subscription before its registrations", metadata: ["error": "\(error)"])
        } catch {
            // A broken connection is replaced on the next use; the feed reconnects and re-registers.
            registrationClient.withLock { $0 = nil }
            throw error
        }
    }

    /// The error `Register` and `Unregister` answer for a subscription that has ended.
    static let subscriptionNotFound = "io.bugsquasher.Changes.SubscriptionNotFound"
}

/// Lets the store's registration callback reach its subscriber without a retain cycle.
private final class Registrar: Sendable {
    private let reference = Mutex<WeakSubscriber?>(nil)
    private struct WeakSubscriber { weak var value: Subscriber? }

    var subscriber: Subscriber? {
        get { reference.withLock { $0?.value } }
        set { reference.withLock { $0 = WeakSubscriber(value: newValue) } }
    }
}

/// squasherd serves another store than the one a ``Subscriber`` was created on (it was restarted
/// on another state directory, or the store was recreated): the subscriber's objects and tokens
/// mean nothing there, so it stops. Create a new subscriber to hold objects of the store served.
public struct StoreReplaced: ExplainedError, Sendable {
    /// The store the subscriber's objects belong to.
    public var held: String
    /// The store squasherd serves now.
    public var served: String

    /// Creates the error.
    public init(held: String, served: String) {
        self.held = held
        self.served = served
    }

    /// Which store squasherd serves, and which the subscriber's objects belong to.
    public var statement: String {
        "squasherd now serves another store (\(served)) than the one this subscriber's objects and tokens belong to (\(held))."
    }

    /// Start the subscriber again.
    public var advice: String { "Start the subscriber again to hold objects of the store it serves." }
}
