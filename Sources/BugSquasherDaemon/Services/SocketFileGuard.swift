import BugSquasherTransport
import Logging
import ServiceLifecycle
import Synchronization

/// Checks every second that the socket files squasherd bound still name its sockets. One
/// removed while squasherd runs (`rm -r` of the runtime directory, a cleanup of `/run`) leaves a
/// daemon no client can reach, that looks alive to its service manager; so squasherd stops as
/// for SIGTERM and exits with status 1 — under systemd (`Restart=on-failure`) to start again
/// and bind them anew.
final class SocketFileGuard: Service {
    let paths: [String]
    private let ready: ReadyLatch
    private let logger: Logger
    /// The file each path named once its server bound it.
    private let bound = Mutex<[String: [UInt64]]>([:])
    private let found = Mutex<String?>(nil)

    init(paths: [String], ready: ReadyLatch, logger: Logger) {
        self.paths = paths
        self.ready = ready
        self.logger = logger
    }

    /// What happened to a socket file, once something did.
    var problem: String? { found.withLock { $0 } }

    /// Records the file `path` names now, just after its server bound it: a file put in its place
    /// before the first check is then noticed too.
    func bound(_ path: String) {
        let identity = VarlinkServer.identity(path)
        bound.withLock { $0[path] = identity }
    }

    func run() async throws {
        await repeatUntilShutdown(every: .seconds(1)) { [self] in
            // The servers bind the files before the daemon is ready.
            guard ready.isReady else { return true }
            for path in paths {
                let now = VarlinkServer.identity(path)
                // Recorded as its server bound it (none: it was gone at once).
                if let first = bound.withLock({ $0[path] }), now == first { continue }
                let problem = "the socket \(path) was \(now == nil ? "removed" : "replaced by another file")"
                logger.critical(
                    "\(problem) while squasherd ran: no client can reach squasherd through it any more. Stopping, so that squasherd starts again and binds it anew (under systemd, Restart=on-failure does)."
                )
                found.withLock { $0 = problem }
                return false
            }
            return true
        }
    }
}
