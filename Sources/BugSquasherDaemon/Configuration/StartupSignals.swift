import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// SIGTERM and SIGINT caught from the first moments of squasherd's process, before its service
/// group listens for them. Until then a signal's default action would end the process at once,
/// without a word and before anything is closed (a `systemctl stop` right after a start, a
/// Ctrl-C while a large store opens). Caught here instead, a stop asked for during start-up is
/// carried out as soon as the daemon runs: gracefully, with a log line, exit status 0.
///
/// ```swift
/// let signals = StartupSignals()       // first thing in main
/// daemon.startupSignals = signals
/// ```
public final class StartupSignals: Sendable {
    /// The dispatch sources: set up in `init`, cancelled in `deinit`, not touched in between.
    private nonisolated(unsafe) let sources: [any DispatchSourceSignal]
    /// The number of the first signal caught; 0 before one is.
    private let caught = Caught()

    private final class Caught: Sendable {
        let number = Atomic<Int32>(0)
    }

    /// Starts catching SIGTERM and SIGINT.
    public init() {
        let caught = caught
        sources = [SIGTERM, SIGINT].map { number in
            Glibc.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number)
            source.setEventHandler { _ = caught.number.compareExchange(expected: 0, desired: number, ordering: .relaxed) }
            source.resume()
            return source
        }
    }

    deinit { sources.forEach { $0.cancel() } }

    /// The first signal caught so far (`SIGTERM` or `SIGINT`), if any.
    var caughtSignal: String? {
        switch caught.number.load(ordering: .relaxed) {
        case 0: nil
        case SIGINT: "SIGINT"
        default: "SIGTERM"
        }
    }
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
