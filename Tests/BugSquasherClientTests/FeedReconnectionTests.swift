import Testing

@testable import BugSquasherClient

/// The subscriber's reconnect and resume policy, driven with plain events.
@Suite("Feed reconnection policy")
struct FeedReconnectionTests {
    @Test(
        "failures back off from 100 ms, doubling to at most 2 s; a stream squasherd ended reconnects at once and starts the back-off over"
    )
    func backOff() {
        var policy = FeedReconnection()
        let delays = (0..<7).map { _ in policy.feedEnded(.failed) }
        #expect(
            delays
                == [100, 200, 400, 800, 1_600, 2_000, 2_000].map {
                    .reconnect(after: .milliseconds($0), fromNow: false)
                })
        #expect(policy.feedEnded(.endedByDaemon) == .reconnect(after: .zero, fromNow: false))
        #expect(policy.feedEnded(.failed) == .reconnect(after: .milliseconds(100), fromNow: false))
    }

    @Test("a token the store never issued follows the feed from now, at once, without touching the back-off")
    func tokenAhead() {
        var policy = FeedReconnection()
        _ = policy.feedEnded(.failed)
        #expect(policy.feedEnded(.tokenAhead) == .reconnect(after: .zero, fromNow: true))
        #expect(policy.delay == .milliseconds(200))
    }

    @Test(
        "cancellation stops; a failing handler, a refusal that would repeat and another store stop with the error, whatever came before"
    )
    func stops() {
        for ending in [FeedReconnection.Ending.handlerFailed, .refusedForGood, .storeReplaced] {
            var policy = FeedReconnection()
            _ = policy.feedEnded(.failed)
            #expect(policy.feedEnded(ending) == .fail, "\(ending)")
        }
        var policy = FeedReconnection()
        #expect(policy.feedEnded(.cancelled) == .stop)
    }
}
