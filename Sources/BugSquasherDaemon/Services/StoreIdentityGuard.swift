import BugSquasherGraph
import ServiceLifecycle

/// Checks every second that the database still holds the store squasherd opened
/// (``IdentityChecking``; the store finds out at each heartbeat). A store dropped and made anew,
/// or another one restored in its place, while squasherd runs would have it hand out the new
/// store's objects under the old one's IDs and tokens; so it stops as for SIGTERM and exits with
/// status 1 — under systemd (`Restart=on-failure`) to start again on what the database holds now,
/// which its clients then tell from the store's new identifier.
struct StoreIdentityGuard: NamedService {
    let store: any IdentityChecking

    func run() async throws {
        // The store logged what it found, as it found it.
        await repeatUntilShutdown(every: .seconds(1)) { store.identityProblem() == nil }
    }
}
