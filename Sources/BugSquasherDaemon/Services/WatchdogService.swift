import BugSquasherGraph
import BugSquasherStack
import BugSquasherTransport
import Logging
import ServiceLifecycle

/// Pings the watchdog at half its interval, but only after proving health: the store answers a
/// read and every event loop runs a task. If either hangs, the pings stop and the service
/// manager restarts the daemon.
struct WatchdogService: Service {
    let stack: PersistentStack
    let interval: Duration
    let ready: ReadyLatch
    let logger: Logger
    let onHealthy: @Sendable () -> Void

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    do {
                        // Pings start once the daemon is ready (READY=1 comes first).
                        if ready.isReady {
                            _ = try stack.store.currentHistoryToken()
                            try await EventLoopProbe.check()
                            onHealthy()
                        }
                    } catch is CancellationError {
                        return
                    } catch {
                        logger.error("health check failed; not pinging the watchdog", metadata: ["error": "\(error)"])
                    }
                    try await Task.sleep(for: ready.isReady ? interval / 2 : .milliseconds(20))
                }
            }
        } catch is CancellationError {}
    }
}
