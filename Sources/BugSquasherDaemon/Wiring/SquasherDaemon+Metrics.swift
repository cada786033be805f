import BugSquasherGraph
import BugSquasherMetrics
import BugSquasherModel
import BugSquasherStack
import BugSquasherTransport
import CoreMetrics
import Foundation
import Synchronization

/// What `Jobs.Metrics` answers: the exporter's text, once the daemon's collector is built;
/// `nil` in a process that did not bootstrap metrics.
final class MetricsText: Sendable {
    private let body = Mutex<(@Sendable () -> String?)?>(nil)

    /// Sets what answers.
    func set(_ text: @escaping @Sendable () -> String?) { body.withLock { $0 = text } }

    /// The metrics, or `nil`.
    func callAsFunction() -> String? { body.withLock { $0 }?() }
}

extension SquasherDaemon {
    /// Sets the gauges read at a scrape: subscribers and what waits for them, connections, the
    /// history token, the store's files or its server (``record(_:daemon:in:)``),
    /// jobs by state, the process's memory and descriptors. `daemon` is this daemon's ID among a
    /// shared store's daemons.
    static func metricsCollector(
        _ stack: PersistentStack, hub: NotificationHub, metrics: SquasherdMetrics, connectionLimit: ConnectionLimit,
        daemon: String
    ) -> @Sendable () -> Void {
        let file = (stack.store as? any FileBacked).map { ($0, FileStoreMetrics()) }
        let membership = stack.store as? any StoreMembership
        let shared = membership.map { _ in SharedStoreMetrics() }
        if let membership, let shared { membership.observeReachableAgain { shared.outages.increment() } }
        let refusedSeen = Mutex(0)
        return {
            metrics.subscribers.record(hub.count)
            metrics.pendingChanges.record(hub.pendingChanges)
            metrics.connectionsOpen.record(connectionLimit.openCount)
            let refused = connectionLimit.refusedCount
            let new = refusedSeen.withLock { seen in
                defer { seen = refused }
                return refused - seen
            }
            if new > 0 { metrics.connectionsRefused.increment(by: new) }
            if let token = try? stack.store.currentHistoryToken() { metrics.historyToken.record(token.rawValue) }
            if let (store, gauges) = file {
                gauges.size.record(Self.size(of: store.url.path))
                gauges.walSize.record(Self.size(of: store.url.path + "-wal"))
            }
            if let membership, let shared { record(membership, daemon: daemon, in: shared) }
            for (state, gauge) in metrics.jobs {
                let request = FetchDescription(
                    entityName: "ImportJob", predicate: Key("state") == .string(state.rawValue), resultType: .count)
                if case .count(let n) = try? stack.mainCoordinator.fetch(request) { gauge.record(n) }
            }
            if let bytes = ProcessMetrics.residentBytes() { metrics.residentMemory.record(bytes) }
            if let fds = ProcessMetrics.openDescriptors() { metrics.openDescriptors.record(fds) }
        }
    }

    /// A shared store's gauges: whether its server answers (1 or 0); while it does, how many
    /// saves this daemon has not published yet, and how many attached daemons answer or are
    /// silent (``StoreMember/isAnswering``). While it does not, those keep their last values:
    /// what the daemons did meanwhile cannot be read.
    private static func record(_ membership: any StoreMembership, daemon: String, in metrics: SharedStoreMetrics) {
        guard case .reachable = membership.reachability else { return metrics.reachable.record(0) }
        metrics.reachable.record(1)
        guard let members = try? membership.members() else { return }
        if let this = members.first(where: { $0.id == daemon }) { metrics.behind.record(this.behind) }
        let answering = members.count(where: \.isAnswering)
        metrics.answering.record(answering)
        metrics.silent.record(members.count - answering)
    }

    private static func size(of path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }
}
