import BugSquasherGraph
import Dispatch
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// Hands the commits of other processes to a ``PostgresStore``'s commit observers: a listener
/// on the store's hint channel reads the history after the last token delivered, delivers what
/// needs no wait on its event loop, and wakes a thread for the rest; the thread also looks once
/// a second, for a hint that never came (hints sent while the listener was disconnected are
/// lost). After a lost connection the listener reconnects by itself and the thread catches up
/// from the last token. The listening connection also sends the store's heartbeat, which
/// notices a network that drops packets.
/// Why it is built this way: docs/DESIGN-NOTES.md, "Other daemons' saves arrive as hints" and
/// "A heartbeat tells a dead network from a quiet one".
final class HistoryFollower: Sendable {
    /// Set once: when the follower stops, or a heartbeat's deadline passed.
    final class StopFlag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .acquiring) }
        func set() { value.store(true, ordering: .releasing) }
    }

    private let wake = DispatchSemaphore(value: 0)
    /// The newest token hinted since the thread last looked; `Int64.max` when something else
    /// woke it (a new listening connection), which always reads.
    final class NewestHint: Sendable {
        private let value = Atomic<Int64>(0)
        func note(_ token: Int64?) { value.max(token ?? .max, ordering: .sequentiallyConsistent) }
        func take() -> Int64 { value.exchange(0, ordering: .acquiringAndReleasing) }
        func peek() -> Int64 { value.load(ordering: .sequentiallyConsistent) }
    }

    private let hinted = NewestHint()
    /// The history as the listener read it after the newest hint, for the thread to deliver.
    final class ReadPage: Sendable {
        private let page = Mutex<HistoryPage?>(nil)
        func offer(_ read: HistoryPage) { page.withLock { $0 = read } }
        func take() -> HistoryPage? { page.withLock { $0.take() } }
    }

    private let read = ReadPage()
    private let stopped = StopFlag()
    private let store: WeakStore
    private let listener = Mutex<Task<Void, Never>?>(nil)

    init(store: PostgresStore) {
        self.store = WeakStore(store)
        let (configuration, channel, logger) = (try? store.connectionConfiguration(), store.hintChannel, store.logger)
        Thread.detachNewThread { [weak store, wake, hinted, read, stopped] in
            while !stopped.isSet {
                let woken = wake.wait(timeout: .now() + .seconds(1)) == .success
                guard let store, !stopped.isSet else { return }
                // A hint of this process's own save, or of one delivered already, needs no read
                // (a save of this process delivers the others' before it, and then itself); the
                // once-a-second look always reads.
                // The page may reach past the newest hint taken: a hint taken by the round
                // before, whose page the listener read after that round began.
                let page = read.take()
                let newest = max(hinted.take(), page?.records.last?.token ?? 0)
                if woken, store.isDelivered(through: newest) { continue }
                store.deliverCommitsOfOthers(hinted: woken && newest != .max ? newest : nil, read: page)
            }
        }
        guard let configuration else { return }  // the store's own connection says why
        // The listener runs on the event loop of the store's connections, which delivers its
        // notifications: every daemon receives every save's hint, its own included, and a hop
        // per hint to Swift's shared pool cost each daemon a thread wake-up per save. (It only
        // waits, never blocks: a blocked loop would stall every connection of the store.)
        let loop = PostgresEventLoops.group.next()
        listener.withLock {
            $0 = Task(executorPreference: EventLoopTaskExecutor(loop: loop)) {
                [box = self.store, wake, hinted, read, stopped] in
                await Self.listen(
                    configuration, on: loop, channel: channel, store: box, logger: logger, stopped: stopped
                ) {
                    hint, connection in
                    let token = hint.map { $0.token }
                    // A hint of a save delivered already (this process's own, mostly) wakes no one.
                    guard let store = box.store else { return }
                    if let token, store.isDelivered(through: token) { return }
                    // Another process's edit: this one's bulk work gives way (its own edits
                    // open the window as they save).
                    if let hint, !hint.isBulk { store.editsFirst?.openWindow() }
                    hinted.note(token)
                    // While a thread of this process holds the writing connection, the hint is
                    // most likely of its save, whose answer comes right after: that thread
                    // looks at the hint when it lets go (`lookAfterRelease`), so that the
                    // follower does not wake only to wait for the connection.
                    if token != nil, store.isWriting { return }
                    // Another process's save: its history rows are read here, on the loop that
                    // heard the hint, and delivered here when that needs no wait; the follower
                    // wakes to deliver what is left, finding the rows read.
                    if let token, let page = await store.readHistory(on: connection) {
                        store.deliverWithoutWaiting(page)
                        if store.isDelivered(through: token) { return }
                        read.offer(page)
                    }
                    wake.signal()
                }
            }
        }
    }

    /// Wakes the thread for a hint that came while the writing connection was held, unless the
    /// holder's save delivered it. (The hint is noted before the listener asks whether the
    /// connection is held, and the holder lets go before it looks here: one of the two sees
    /// the other.)
    func lookAfterRelease() {
        let newest = hinted.peek()
        guard newest != 0, let store = store.store, !store.isDelivered(through: newest) else { return }
        wake.signal()
    }

    /// Ends the thread and the listener.
    func stop() {
        stopped.set()
        wake.signal()
        listener.withLock { $0?.cancel() }
    }

    /// How often the listening connection sends a heartbeat, and how long one may go unanswered.
    static let heartbeatInterval = Duration.seconds(2)
    static let heartbeatDeadline = Duration.seconds(4)

    /// The store, held weakly: a store no one holds any more goes, and its follower with it.
    final class WeakStore: Sendable {
        weak let store: PostgresStore?
        init(_ store: PostgresStore?) { self.store = store }
    }

    /// Calls `hint` once listening on `channel` (with no hint), and for each notification
    /// (with the hint it carries), each with the listening connection, and sends the store's
    /// heartbeats, until the connection ends.
    private static func listen(
        on connection: PostgresConnection, channel: String, store: WeakStore,
        hint: @escaping @Sendable (Hint?, PostgresConnection) async -> Void
    ) async throws {
        try await connection.listen(on: channel) { notifications in
            store.store?.markReachable()
            await hint(nil, connection)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await notification in notifications {
                        await hint(Hint(notification.payload), connection)
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: heartbeatInterval)
                        guard let current = store.store else { return }
                        try await beat(current, on: connection)
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    /// One heartbeat; one that goes unanswered past the deadline closes the connection and
    /// throws ``Unanswered``. One the server refuses with an error (its table renamed, a
    /// permission taken away) was answered: the server is reachable and the session goes on, so
    /// nothing but the refusal is reported (``PostgresStore/noteHeartbeat(refusal:)``).
    private static func beat(_ store: PostgresStore, on connection: PostgresConnection) async throws {
        let fired = StopFlag()
        // Timed by the connection's event loop, not by a task of Swift's shared pool: threads of
        // that pool blocked on the store (calls waiting for the connection a statement to the
        // silent server holds) kept such a deadline from ever firing, and the daemon hung until
        // TCP gave up.
        let watchdog = connection.eventLoop.scheduleTask(in: .seconds(heartbeatDeadline.components.seconds)) {
            fired.set()
            _ = connection.close() as EventLoopFuture<Void>
        }
        defer { watchdog.cancel() }
        do {
            try await store.heartbeat(on: connection)
            store.markReachable()
            store.noteHeartbeat(refusal: nil)
        } catch let error as PSQLError where !fired.isSet && isRefusal(error) {
            store.markReachable()
            store.noteHeartbeat(refusal: PostgresStore.describe(error))
            // The store's tables, or its schema, are gone (dropped, or the database made anew).
            if let state = error.serverInfo?[.sqlState], ["42P01", "3F000"].contains(state) {
                store.noteIdentityProblem("the store's tables are gone from the \(store.place)")
            }
        } catch {
            throw fired.isSet ? Unanswered() : error
        }
    }

    /// Whether `error` is the server refusing one statement, its session going on (severity
    /// `ERROR`): not one ending the session (`FATAL`, as when the server shuts down), nor a
    /// connection that broke.
    static func isRefusal(_ error: PSQLError) -> Bool {
        error.code == .server && error.serverInfo?[.severity] == "ERROR"
    }

    /// A heartbeat the server did not answer in time.
    struct Unanswered: Error, CustomStringConvertible {
        var description: String { "no answer to a heartbeat within \(heartbeatDeadline)" }
    }

    /// Listens on `channel` and calls `hint` for each notification, reconnecting after a lost
    /// connection (and hinting then, with no token, so that what was sent meanwhile is read).
    private static func listen(
        _ configuration: PostgresConnection.Configuration, on loop: any EventLoop, channel: String, store: WeakStore,
        logger: Logger, stopped: StopFlag, hint: @escaping @Sendable (Hint?, PostgresConnection) async -> Void
    ) async {
        while !stopped.isSet, !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(
                    on: loop, configuration: configuration, id: 3, logger: logger)
                do {
                    try await listen(on: connection, channel: channel, store: store, hint: hint)
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                guard !Task.isCancelled, !stopped.isSet else { return }
                store.store?.markUnreachable(PostgresStore.describe(error), hung: error is Unanswered)
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}

/// A notification on the store's channel after a save commits: its token, then ` bulk` for a
/// save of bulk work (an import's chunk), which no one's bulk work gives way to (``EditsFirst``).
/// A payload that is not a hint (`nil`) makes the follower read the history all the same.
struct Hint: Sendable, Equatable {
    /// The save's token.
    let token: Int64
    /// Whether the save was bulk work.
    let isBulk: Bool

    /// What follows the token in a bulk save's hint.
    static let bulkMark = " bulk"

    /// The hint a notification's payload carries, if it is one.
    init?(_ payload: String) {
        let isBulk = payload.hasSuffix(Self.bulkMark)
        guard let token = Int64(isBulk ? String(payload.dropLast(Self.bulkMark.count)) : payload) else { return nil }
        (self.token, self.isBulk) = (token, isBulk)
    }
}
