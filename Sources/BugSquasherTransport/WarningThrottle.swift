package import Logging
import Synchronization

/// Logs a warning that may repeat many times a second at most every ten seconds, saying how
/// many were left out in between.
package final class WarningThrottle: Sendable {
    private let state = Mutex<(last: ContinuousClock.Instant?, suppressed: Int)>((nil, 0))
    private let interval: Duration

    /// A throttle that logs at most once per `interval`.
    package init(interval: Duration = .seconds(10)) {
        self.interval = interval
    }

    /// Logs `message` unless one was logged less than the interval ago; `message` gets the
    /// text to append about left-out repeats (empty when there were none).
    package func warn(_ logger: Logger, _ message: (String) -> String) {
        let now = ContinuousClock.now
        let suppressed: Int? = state.withLock { state in
            if let last = state.last, now - last < interval {
                state.suppressed += 1
                return nil
            }
            defer { state = (now, 0) }
            return state.suppressed
        }
        guard let suppressed else { return }
        logger.warning("\(message(suppressed > 0 ? " (\(suppressed) more like this since the last warning)" : ""))")
    }
}
