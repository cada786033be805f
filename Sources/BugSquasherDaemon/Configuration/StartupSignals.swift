import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// SIGTERM and SIGINT caught from the first moments of squasherd's process, before its service
/// group listens for them, so that a stop asked for during start-up (a `systemctl stop` right after a
/// start) is carried out gracefully once the daemon runs, not by the signal's silent default action.
///
/// ```swift
/// let signals = await StartupSignals()       // first thing in main
/// daemon.startupSignals = signals
/// ```
public final class StartupSignals: Sendable {
    private let first = Mutex<UnixSignal?>(nil)

    /// Starts catching SIGTERM and SIGINT (swift-service-lifecycle's `UnixSignalsSequence`,
    /// read for the life of the process; the service group reads its own).
    public init() async {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        Task { [self] in
            for await signal in signals { first.withLock { $0 = $0 ?? signal } }
        }
    }

    /// The first signal caught so far, if any.
    var caughtSignal: UnixSignal? { first.withLock { $0 } }
}

/// Stops the group at once, gracefully, when a signal came while squasherd started; otherwise
/// runs until the group shuts down. The group's own signal handling takes over from here.
struct StartupStopService: Service {
    let signals: StartupSignals
    let logger: Logger

    func run() async throws {
        if let signal = signals.caughtSignal {
            logger.notice("\(signal) arrived while squasherd was starting; stopping now that it can do so cleanly")
            return
        }
        try? await gracefulShutdown()
    }
}
