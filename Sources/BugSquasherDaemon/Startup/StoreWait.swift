/// The decisions of a start that waits for a PostgreSQL server it cannot reach yet (one booting
/// on another host, one restarting), as a value: each failed attempt to open the store is an
/// event, and the answer is when to try again and whether to say so in the log, or to give up.
/// ``SquasherDaemon`` carries the answers out (the sleep, the log line, the status systemd shows).
///
/// Attempts are spaced 1, 2, 4, then every 5 seconds; the first failure is logged, and then one a
/// minute, so that a long outage does not fill the journal. After `limit` (`store_wait`) the start
/// gives up, and squasherd exits as for any store it cannot use. Why it waits at all:
/// docs/OPERATIONS.md, "Running on PostgreSQL".
struct StoreWait {
    /// What to do after an attempt failed.
    enum Action: Equatable {
        /// Try again after `delay`; `log` when this failure is to be logged.
        case retry(after: Duration, log: Bool)
        /// The wait is over: refuse to start.
        case giveUp
    }

    /// The longest wait.
    let limit: Duration
    /// The longest pause between two attempts.
    static let longestDelay = Duration.seconds(5)
    /// How often a failure is logged again while the wait goes on.
    static let logInterval = Duration.seconds(60)

    private var delay = Duration.seconds(1)
    private var loggedAt: Duration?

    /// A wait of at most `limit`; zero never waits.
    init(limit: Duration) { self.limit = limit }

    /// An attempt failed, `elapsed` after the first one began.
    mutating func failed(after elapsed: Duration) -> Action {
        guard elapsed < limit else { return .giveUp }
        let log = loggedAt.map { elapsed - $0 >= Self.logInterval } ?? true
        if log { loggedAt = elapsed }
        // The last pause ends at the limit, where the last attempt is made.
        let pause = min(delay, limit - elapsed)
        delay = min(delay * 2, Self.longestDelay)
        return .retry(after: pause, log: log)
    }
}
