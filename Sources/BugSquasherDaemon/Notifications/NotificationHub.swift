import BugSquasherGraph
import Foundation
import Synchronization

/// The subscribers of the change feed, and the fan-out of every committed save to them.
final class NotificationHub: Sendable {
    private let subscriptions = Mutex<[String: Subscription]>([:])
    /// Runs one publish's offers, so that the transport can batch the writes they make.
    private let batchingWrites: @Sendable (() -> Void) -> Void

    /// A hub whose publishes run inside `batchingWrites` (squasherd passes the transport's
    /// `ChannelWriteBatch.collecting`, so that the saves written at once to live subscribers
    /// reach each event loop in one task); by default they run as they are.
    init(batchingWrites: @escaping @Sendable (() -> Void) -> Void = { $0() }) {
        self.batchingWrites = batchingWrites
    }

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

    /// Which of other daemons' inserts of `entity` the subscribers look for, for a shared store
    /// to screen (``SharedStore/screenInsertsOfOthers(by:)``): every one when a subscriber
    /// takes every change or watches the entity without a predicate, those matching the
    /// watches' predicates otherwise, none when nobody watches it.
    ///
    /// A subscriber that joins while a save is screened misses nothing: the store screens and
    /// publishes a save with its connection held, which the subscriber waits for when it reads
    /// the token it starts after (`currentHistoryToken`), so the save is before its start.
    func insertInterest(of entity: String) -> InsertInterest {
        subscriptions.withLock { subscriptions in
            var watches: [InsertWatch] = []
            for subscription in subscriptions.values {
                if !subscription.registeredOnly { return .every }
                if let watch = subscription.insertWatch, watch.entity.name == entity { watches.append(watch) }
            }
            return InsertWatch.interest(of: watches)
        }
    }

    /// How many subscribers are connected (change feeds; not the followers of import jobs).
    var count: Int { subscriptions.withLock { $0.values.count { !$0.followsJob } } }

    /// Changed objects waiting in the subscribers' mailboxes, over all of them.
    var pendingChanges: Int { subscriptions.withLock { Array($0.values) }.reduce(0) { $0 + $1.pendingCount } }

    /// How many clients follow an import job (`Jobs.Watch`).
    var jobFollowerCount: Int { subscriptions.withLock { $0.values.count(where: \.followsJob) } }

    /// Saves were pruned from a shared store's history before this daemon read them: every
    /// subscriber is told to resync, and refetches what it holds when it resumes.
    func lostHistory() {
        for subscription in subscriptions.withLock({ Array($0.values) }) { subscription.lostHistory() }
    }

    /// Hands a committed save to every subscriber's mailbox; never waits for one.
    func publish(_ didSave: DidSave) {
        let all = subscriptions.withLock { Array($0.values) }
        var withoutValues: DidSave?
        let encodings = SharedEncodings()
        let index = SaveIndex(didSave)
        batchingWrites {
            for subscription in all {
                subscription.offer(
                    didSave,
                    withoutValues: {
                        if let withoutValues { return withoutValues }
                        let stripped = didSave.withoutValues
                        withoutValues = stripped
                        return stripped
                    }, encodings: encodings, index: index)
            }
        }
    }
}
