import Foundation
import Synchronization

/// What went wrong lately, noted where it happens (a refused write, a failed job, a dropped
/// subscriber) and read by `Jobs.Status` to decide the daemon's ``DaemonHealth``.
final class HealthRecord: Sendable {
    private let facts = Mutex(DaemonHealth.Facts())

    /// The store could not take a write (an edit, a job's record, an import chunk).
    func refusedWrite(at date: Date = Date()) {
        facts.withLock { $0.lastRefusedWrite = date }
    }

    /// Import job `id` failed.
    func jobFailed(_ id: String, at date: Date = Date()) {
        facts.withLock { $0.lastFailedJob = (id, date) }
    }

    /// A subscriber fell too far behind and was told to resync.
    func droppedSubscriber(at date: Date = Date()) {
        facts.withLock { facts in
            if let last = facts.lastDroppedSubscriber, date.timeIntervalSince(last) >= DaemonHealth.window {
                facts.droppedSubscribers = 0
            }
            facts.droppedSubscribers += 1
            facts.lastDroppedSubscriber = date
        }
    }

    /// What was noted.
    var current: DaemonHealth.Facts { facts.withLock { $0 } }
}
