import BugSquasherGraph
import Foundation
import Logging
import ServiceLifecycle

/// Prunes the store's history to the configured retention, at start and every few minutes, on
/// a thread of its own (the store's deletes are synchronous, in steps that never hold its
/// writer long). On a shared store every daemon prunes; whichever comes first does the work.
struct HistoryPruner: Service {
    let store: any HistoryPruning
    /// Saves older than this many days go (`nil`: no limit by age).
    let days: Int?
    /// Saves beyond this many go (`nil`: no limit by count).
    let saves: Int?
    let interval: Duration
    let logger: Logger

    func run() async throws {
        guard days != nil || saves != nil else { return }
        await pruneOnOwnThread()
        await repeatUntilShutdown(every: interval) {
            await pruneOnOwnThread()
            return true
        }
    }

    /// One pass, off the cooperative pool.
    private func pruneOnOwnThread() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                prune()
                done.resume()
            }
        }
    }

    /// One pass; a failure is logged and tried again at the next.
    private func prune() {
        let cutoff = days.map { Date().addingTimeInterval(-Double($0) * 86_400) }
        do {
            let deleted = try store.pruneHistory(before: cutoff, keepingNewest: saves)
            if deleted > 0 {
                logger.info(
                    "pruned the history",
                    metadata: [
                        "history.deleted": "\(deleted)",
                        "history.horizon": "\((try? store.historyHorizon().rawValue).map(String.init) ?? "?")",
                    ])
            }
        } catch {
            logger.warning("could not prune the history; trying again later", metadata: ["error": "\(error)"])
        }
    }
}
