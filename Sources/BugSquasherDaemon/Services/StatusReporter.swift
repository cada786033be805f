import Foundation
import Synchronization

/// The daemon's one-line status: idle, or the running job's progress and the subscribers.
final class StatusReporter: Sendable {
    private let hub: NotificationHub
    private let onStatus: @Sendable (String) -> Void
    private let progress = Mutex<ImportProgress?>(nil)

    init(hub: NotificationHub, onStatus: @escaping @Sendable (String) -> Void) {
        self.hub = hub
        self.onStatus = onStatus
    }

    var activeJob: String? { progress.withLock { $0?.job } }

    func update(_ progress: ImportProgress?) {
        self.progress.withLock { $0 = progress }
        publish()
    }

    func publish() {
        let line: String
        if let progress = progress.withLock({ $0 }) {
            let percent = progress.bytesTotal > 0 ? Double(progress.bytesDone) * 100 / Double(progress.bytesTotal) : 0
            line = String(
                format: "Importing job %@: %lld records read (%lld rejected), %.0f%%, %.0f records/s; %d subscribers",
                progress.job, progress.read, progress.rejected, percent, progress.rate, hub.count)
        } else {
            line = "Idle; \(hub.count) subscribers"
        }
        onStatus(line)
    }
}
