import BugSquasherTransport
import ServiceLifecycle

/// Gives the memory of many connections that closed back to the system, checking every two
/// seconds: glibc keeps what they held (about 10 kB each) in its arenas, so that 10,000 clients
/// connected at once (or one client that opened 10,000 connections and held them) would leave
/// squasherd's resident size about 100 MB above where it idles, for good, once they closed.
struct ClosedConnectionsTrimmer: Service {
    let limit: ConnectionLimit

    func run() async throws {
        await repeatUntilShutdown(every: .seconds(2)) {
            if limit.manyClosedSinceLastAsked() { returnFreedMemory() }
            return true
        }
    }
}
