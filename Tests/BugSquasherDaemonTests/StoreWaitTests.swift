import Testing

@testable import BugSquasherDaemon

/// How a start waits for a PostgreSQL server it cannot reach, decided with plain durations: no
/// server, no clock.
@Suite("Store wait")
struct StoreWaitTests {
    @Test("attempts are spaced 1, 2, 4, then 5 s; the first failure is logged, then one a minute")
    func backoffAndLogging() {
        var wait = StoreWait(limit: .seconds(600))
        #expect(wait.failed(after: .zero) == .retry(after: .seconds(1), log: true))
        #expect(wait.failed(after: .seconds(1)) == .retry(after: .seconds(2), log: false))
        #expect(wait.failed(after: .seconds(3)) == .retry(after: .seconds(4), log: false))
        #expect(wait.failed(after: .seconds(7)) == .retry(after: .seconds(5), log: false))
        #expect(wait.failed(after: .seconds(59)) == .retry(after: .seconds(5), log: false))
        #expect(wait.failed(after: .seconds(60)) == .retry(after: .seconds(5), log: true))
        #expect(wait.failed(after: .seconds(100)) == .retry(after: .seconds(5), log: false))
        #expect(wait.failed(after: .seconds(121)) == .retry(after: .seconds(5), log: true))
    }

    @Test("the last pause ends at the limit, and the failure at or after it gives up")
    func givesUpAtTheLimit() {
        var wait = StoreWait(limit: .seconds(3))
        #expect(wait.failed(after: .zero) == .retry(after: .seconds(1), log: true))
        #expect(wait.failed(after: .milliseconds(2_500)) == .retry(after: .milliseconds(500), log: false))
        #expect(wait.failed(after: .seconds(3)) == .giveUp)
    }

    @Test("store_wait = 0 never waits")
    func zeroNeverWaits() {
        var wait = StoreWait(limit: .zero)
        #expect(wait.failed(after: .zero) == .giveUp)
    }
}
