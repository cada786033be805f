import BugSquasherGraph
import Dispatch
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// Hands the commits of other processes to a ``PostgresStore``'s commit observers: a listener
/// on the store's hint channel wakes a thread that reads the history after the last token
/// delivered; the thread also looks once a second, for a hint that never came (hints sent while
/// the listener was disconnected are lost). After a lost connection the listener reconnects by
/// itself and the thread catches up from the last token.
/// Why it is built this way: docs/DESIGN-NOTES.md, "Other daemons' saves arrive as hints".
final class HistoryFollower: Sendable {
    /// Set once, when the follower stops.
    final class StopFlag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .acquiring) }
        func set() { value.store(true, ordering: .releasing) }
    }

    private let wake = DispatchSemaphore(value: 0)
    private let stopped = StopFlag()
    private let listener = Mutex<Task<Void, Never>?>(nil)

    init(store: PostgresStore) {
        let (configuration, channel, logger) = (try? store.connectionConfiguration(), store.hintChannel, store.logger)
        Thread.detachNewThread { [weak store, wake, stopped] in
            while !stopped.isSet {
                _ = wake.wait(timeout: .now() + .seconds(1))
                guard let store, !stopped.isSet else { return }
                store.deliverCommitsOfOthers()
            }
        }
        guard let configuration else { return }  // the store's own connection says why
        listener.withLock {
            $0 = Task { [wake, stopped] in
                await Self.listen(configuration, channel: channel, logger: logger, stopped: stopped) { wake.signal() }
            }
        }
    }

    /// Ends the thread and the listener.
    func stop() {
        stopped.set()
        wake.signal()
        listener.withLock { $0?.cancel() }
    }

    /// Calls `hint` once listening on `channel`, and for each notification, until the
    /// connection ends.
    private static func listen(
        on connection: PostgresConnection, channel: String, logger: Logger, lost: inout Bool,
        hint: @escaping @Sendable () -> Void
    ) async throws {
        let wasLost = lost
        lost = false
        try await connection.listen(on: channel) { notifications in
            if wasLost {
                logger.notice("listening for other daemons' saves again", metadata: ["channel": "\(channel)"])
            }
            hint()
            for try await _ in notifications { hint() }
        }
    }

    /// Listens on `channel` and calls `hint` for each notification, reconnecting after a lost
    /// connection (and hinting then, so that what was sent meanwhile is read).
    private static func listen(
        _ configuration: PostgresConnection.Configuration, channel: String, logger: Logger, stopped: StopFlag,
        hint: @escaping @Sendable () -> Void
    ) async {
        var lost = false
        while !stopped.isSet, !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(
                    on: PostgresEventLoops.group.next(), configuration: configuration, id: 2, logger: logger)
                do {
                    try await listen(on: connection, channel: channel, logger: logger, lost: &lost, hint: hint)
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                if !lost, !Task.isCancelled {
                    logger.warning(
                        "lost the connection that hears of other daemons' saves; reconnecting (their saves are read from the history meanwhile)",
                        metadata: ["error": "\(error)"])
                    lost = true
                }
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}
