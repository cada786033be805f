import Foundation
import Synchronization

/// The daemon's one-line status: idle, the running job's progress or the job waiting for the
/// store, and the subscribers.
final class StatusReporter: Sendable {
    private let hub: NotificationHub
    private let onStatus: @Sendable (String) -> Void
    private let activity = Mutex<ImportActivity>(.idle)

    init(hub: NotificationHub, onStatus: @escaping @Sendable (String) -> Void) {
        self.hub = hub
        self.onStatus = onStatus
    }

    /// The job importing now, if any.
    var activeJob: String? {
        activity.withLock {
            if case .importing(let progress) = $0 { progress.job } else { nil }
        }
    }

    /// The job waiting for the store to take writes again, if any.
    var waitingJob: JobWait? {
        activity.withLock {
            if case .waiting(let wait) = $0 { wait } else { nil }
        }
    }

    /// Notes what the import runner does now, and publishes the status line unless it stays
    /// idle (the runner finds no job at start, before squasherd is ready).
    func update(_ activity: ImportActivity) {
        let wasIdle = self.activity.withLock { old in
            defer { old = activity }
            return old.isIdle
        }
        if wasIdle, activity.isIdle { return }
        publish()
    }

    func publish() {
        let line: String
        switch activity.withLock({ $0 }) {
        case .importing(let progress):
            let percent = progress.bytesTotal > 0 ? Double(progress.bytesDone) * 100 / Double(progress.bytesTotal) : 0
            line = String(
                format: "Importing job %@: %lld records read (%lld rejected), %.0f%%, %.0f records/s; %d subscribers",
                progress.job, progress.read, progress.rejected, percent, progress.rate, hub.count)
        case .waiting(let wait):
            line = "Job \(wait.job) waits to resume: \(wait.reason); \(hub.count) subscribers"
        case .idle:
            line = "Idle; \(hub.count) subscribers"
        }
        onStatus(line)
    }
}
