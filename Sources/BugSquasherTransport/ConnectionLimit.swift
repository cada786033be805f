import Foundation
import Logging
import Synchronization

/// How many connections a process's servers hold open together. Past ``maximum``, a server
/// closes each new connection at once and logs a warning; the last ``reservedForWriters`` places
/// are for the servers that may write.
/// Why it is built this way: docs/DESIGN-NOTES.md, "A server keeps descriptors in reserve".
public final class ConnectionLimit: Sendable {
    /// The most connections served at once, over every server sharing this limit.
    public let maximum: Int
    /// Places only connections to a server that may write can take: a tenth of ``maximum``,
    /// at most 64.
    public let reservedForWriters: Int
    private let open = Atomic<Int>(0)
    /// The most connections open at once since ``manyClosedSinceLastAsked(atLeast:)`` last
    /// said so.
    private let peak = Atomic<Int>(0)
    /// The connections open when ``manyClosedSinceLastAsked(atLeast:)`` last said so, while
    /// they kept falling at each call since; -1 otherwise.
    private let fallingFrom = Atomic<Int>(-1)
    private let refusals = WarningThrottle()
    private let refused = Atomic<Int>(0)

    /// Connections open now, over every server sharing this limit.
    public var openCount: Int { open.load(ordering: .relaxed) }
    /// Connections refused since the process started.
    public var refusedCount: Int { refused.load(ordering: .relaxed) }

    /// A limit of `maximum` connections (at least 1).
    public init(maximum: Int) {
        self.maximum = max(1, maximum)
        reservedForWriters = min(64, self.maximum / 10)
    }

    /// Descriptors kept for everything that is not a client connection: half the descriptor
    /// limit, at least 64 and at most 256. An idle daemon with a database uses a few dozen (its
    /// database connections, event loops, sockets and log); a busy one more, and connections
    /// accepted but not yet refused take some for a moment.
    public static func reservedDescriptors(descriptorLimit: Int) -> Int {
        min(256, max(64, descriptorLimit / 2))
    }

    /// The limit that fits the process's descriptor limit: that limit less the reserve (see
    /// ``reservedDescriptors(descriptorLimit:)``).
    ///
    /// Running out of descriptors is worse than refusing a connection: NIO then retries
    /// `accept` in a busy loop while connections wait in the backlog (its accept backoff does
    /// not apply to a listening socket that stays readable), one core at 100 %.
    public static func fitting(descriptorLimit: Int) -> ConnectionLimit {
        ConnectionLimit(maximum: descriptorLimit - reservedDescriptors(descriptorLimit: descriptorLimit))
    }

    /// Takes a place for a new connection to a server that may write (`writer`) or not; `false`
    /// (and a throttled warning, ending with `advice`) when none is left for it.
    func acquire(socket: String, writer: Bool, advice: String, logger: Logger) -> Bool {
        let limit = writer ? maximum : maximum - reservedForWriters
        let opened = open.wrappingAdd(1, ordering: .relaxed).newValue
        if opened <= limit {
            peak.max(opened, ordering: .relaxed)
            return true
        }
        open.subtract(1, ordering: .relaxed)
        refused.add(1, ordering: .relaxed)
        refusals.warn(logger) { suppressed in
            let kept = writer ? "" : " (the last \(self.reservedForWriters) are kept for the write socket)"
            return
                "Refused a connection on the \(socket) socket: \(limit) connections are open, the most this process serves there at once\(kept)\(suppressed). \(advice)"
        }
        return false
    }

    /// Gives back the place of a connection that ended.
    func release() {
        open.subtract(1, ordering: .relaxed)
    }

    /// Whether many connections closed since this last said so: the open ones fell by at least
    /// `count` from their peak since, and to half of it or less; or it said so last time and
    /// more have closed since (a burst that a caller asking now and then meets half closed).
    /// Each connection held about 10 kB, which the allocator keeps once freed, so that after a
    /// burst of clients (or one client that opened thousands) the caller gives it back to the
    /// system.
    public func manyClosedSinceLastAsked(atLeast count: Int = 1_000) -> Bool {
        let now = open.load(ordering: .relaxed)
        let high = peak.load(ordering: .relaxed)
        let falling = fallingFrom.load(ordering: .relaxed)
        guard (high - now >= count && now <= high / 2) || (falling >= 0 && now < falling) else {
            fallingFrom.store(-1, ordering: .relaxed)
            return false
        }
        // A connection opened meanwhile may raise the peak it replaces: the next burst is
        // then measured from a little lower, which only makes it count sooner.
        peak.store(now, ordering: .relaxed)
        fallingFrom.store(now, ordering: .relaxed)
        return true
    }
}

/// The process's limit on open file descriptors (`RLIMIT_NOFILE`).
public enum FileDescriptorLimit {
    /// The soft limit in force.
    public static var current: Int {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return 1024 }
        return Int(clamping: limit.rlim_cur)
    }

    /// Raises the soft limit to the hard limit, as a server that holds many connections should
    /// (the soft limit is often 1,024, the hard one far higher); returns the limits before and
    /// after. Under a seccomp filter that forbids `setrlimit`, the limit stays as it was: set
    /// `LimitNOFILE=` in the unit instead.
    @discardableResult
    public static func raiseToHardLimit() -> (before: Int, after: Int) {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return (1024, 1024) }
        let before = Int(clamping: limit.rlim_cur)
        guard limit.rlim_cur < limit.rlim_max else { return (before, before) }
        var raised = limit
        raised.rlim_cur = limit.rlim_max
        guard setrlimit(resource, &raised) == 0 else { return (before, before) }
        return (before, Int(clamping: raised.rlim_cur))
    }

    #if canImport(Glibc)
    private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let resource = RLIMIT_NOFILE
    #endif
}
