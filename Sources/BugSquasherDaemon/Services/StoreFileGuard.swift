import BugSquasherGraph
import Logging
import ServiceLifecycle

/// Checks every second that the store's path still names the file the daemon has open. One
/// deleted or replaced while squasherd runs (`rm bugs.sqlite*`, a restore moved over it) takes
/// every later save with it when the daemon closes it; so squasherd stops taking saves, copies
/// what the open file holds beside it, and exits with status 1 — under systemd, to be restarted
/// on a store that an operator moved into place, rather than acknowledge saves that vanish.
struct StoreFileGuard: Service {
    let store: any FileBacked
    let loss: StoreFileLoss
    let logger: Logger

    func run() async throws {
        await repeatUntilShutdown(every: .seconds(1)) {
            guard var problem = store.fileProblem() else { return true }
            // An `rm -r` of the state directory removes its files one by one: once it is
            // through, what went is the directory, not the log it happened to remove first.
            try? await Task.sleep(for: .milliseconds(250))
            problem = store.fileProblem() ?? problem
            logger.critical(
                "\(problem) while squasherd ran: saves would be lost with it. Stopping, and copying what the open store holds beside it."
            )
            loss.lost(problem)
            return false
        }
    }
}
