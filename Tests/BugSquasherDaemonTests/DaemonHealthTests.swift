import Foundation
import Testing

@testable import BugSquasherDaemon

/// The health rules, on plain facts: no daemon, no clock but the one given.
@Suite("Daemon health")
struct DaemonHealthTests {
    let now = Date(timeIntervalSince1970: 1_000_000)

    @Test("nothing recorded is ok; each kind of trouble degrades the daemon for its window")
    func windows() {
        #expect(DaemonHealth(DaemonHealth.Facts(), storeProblem: nil, now: now).state == "ok")
        var facts = DaemonHealth.Facts()
        facts.lastRefusedWrite = now.addingTimeInterval(-60)
        facts.lastFailedJob = ("ab12cd34", now.addingTimeInterval(-1_800))
        facts.lastDroppedSubscriber = now.addingTimeInterval(-10)
        facts.droppedSubscribers = 3
        let degraded = DaemonHealth(facts, storeProblem: "The database has not answered.", now: now)
        #expect(degraded.state == "degraded")
        #expect(
            degraded.problems.map(\.code) == [
                "store-unavailable", "store-cannot-write", "job-failed", "subscribers-dropped",
            ])
        #expect(degraded.problems[2].message.contains("ab12cd34"))
        #expect(degraded.problems[3].message.hasPrefix("3 subscriber(s)"))
        // Past their windows (5 minutes; an hour for a job), they no longer count.
        let later = DaemonHealth(facts, storeProblem: nil, now: now.addingTimeInterval(3_600))
        #expect(later.state == "ok", "\(later.problems)")
        let stillJob = DaemonHealth(facts, storeProblem: nil, now: now.addingTimeInterval(600))
        #expect(stillJob.problems.map(\.code) == ["job-failed"])
    }

    @Test("dropped subscribers are counted within the window, from the first after a quiet one")
    func droppedCount() {
        let record = HealthRecord()
        record.droppedSubscriber(at: now)
        record.droppedSubscriber(at: now.addingTimeInterval(100))
        #expect(record.current.droppedSubscribers == 2)
        record.droppedSubscriber(at: now.addingTimeInterval(1_000))
        #expect(record.current.droppedSubscribers == 1)
    }
}
