/// How a ``Subscriber`` follows the change feed across its ends and failures, as a value: it
/// takes what ended the feed and says what to do next — reconnect (at once, or after a delay that
/// doubles up to two seconds while squasherd stays away), reconnect following the feed from now,
/// or stop. ``Subscriber/run(onRefresh:)`` carries the actions out; its resume token is the one
/// of the last save merged, so a reconnect misses nothing and merges nothing twice.
struct FeedReconnection: Sendable {
    /// What ended the feed.
    enum Ending: Sendable, Equatable {
        /// squasherd ended the stream: it is stopping, or asked for a resync.
        case endedByDaemon
        /// The connection failed, or squasherd could not be reached.
        case failed
        /// squasherd's store never issued the token to resume from (a store restored from an
        /// older backup): resuming would skip every save up to it.
        case tokenAhead
        /// The task was cancelled.
        case cancelled
        /// The handler of the events threw.
        case handlerFailed
        /// The Subscribe call itself is past squasherd's `max_message_bytes`: sent again, it
        /// would be refused again.
        case refusedForGood
        /// squasherd serves another store than the one this subscriber's objects came from.
        case storeReplaced
    }

    /// What to do next.
    enum Action: Sendable, Equatable {
        /// Subscribe again after `delay` (zero: at once); with `fromNow`, without a token.
        case reconnect(after: Duration, fromNow: Bool)
        /// Stop following, the caller having ended it.
        case stop
        /// Stop following, and throw what ended the feed to the caller.
        case fail
    }

    /// The first delay after a failure.
    static let firstDelay = Duration.milliseconds(100)
    /// The longest delay between attempts while squasherd stays away.
    static let maximumDelay = Duration.seconds(2)

    /// The delay before the next attempt after a failure.
    private(set) var delay = firstDelay
    /// The failures since the feed last began: the first is worth telling, the ones after it
    /// (squasherd still away) are not.
    private(set) var failuresInARow = 0

    /// The feed began (squasherd answered the Subscribe call): the next failure waits the first
    /// delay again. Returns whether it began after failures, a reconnection worth telling.
    mutating func feedBegan() -> Bool {
        defer { (delay, failuresInARow) = (Self.firstDelay, 0) }
        return failuresInARow > 0
    }

    /// The feed ended; what to do next.
    mutating func feedEnded(_ ending: Ending) -> Action {
        switch ending {
        case .endedByDaemon:
            delay = Self.firstDelay
            return .reconnect(after: .zero, fromNow: false)
        case .tokenAhead:
            return .reconnect(after: .zero, fromNow: true)
        case .failed:
            failuresInARow += 1
            defer { delay = min(delay * 2, Self.maximumDelay) }
            return .reconnect(after: delay, fromNow: false)
        case .cancelled:
            return .stop
        case .handlerFailed, .refusedForGood, .storeReplaced:
            return .fail
        }
    }
}
