import Testing

@testable import BugSquasherClient

/// The subscriber's reconnect and resume policy, driven with plain events.
@Suite("Feed reconnection policy")
struct FeedReconnectionTests {
    /// The back-off starts at 100 ms and doubles up to 2 s; a stream that squasherd ended starts it over.
    @Test("failures back off exponentially; a stream squasherd ended reconnects at once")
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

    /// A feed that began again after failures starts the back-off over, and is worth telling;
    /// one that began without failures before is not.
    @Test("a feed that begins again starts the back-off over, and tells of a reconnection")
    func beganAgain() {
        var policy = FeedReconnection()
        let first = policy.feedBegan()
        #expect(!first)
        _ = policy.feedEnded(.failed)
        _ = policy.feedEnded(.failed)
        #expect(policy.failuresInARow == 2)
        let again = policy.feedBegan()
        #expect(again)
        #expect(policy.failuresInARow == 0)
        #expect(policy.feedEnded(.failed) == .reconnect(after: .milliseconds(100), fromNow: false))
        #expect(policy.failuresInARow == 1)
    }

    @Test("a token the store never issued follows the feed from now, without back-off")
    func tokenAhead() {
        var policy = FeedReconnection()
        _ = policy.feedEnded(.failed)
        #expect(policy.feedEnded(.tokenAhead) == .reconnect(after: .zero, fromNow: true))
        #expect(policy.delay == .milliseconds(200))
    }

    /// A failing handler, a refusal that would repeat and another store stop it with the error, whatever
    /// came before.
    @Test("cancellation and unrecoverable errors stop the feed")
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
