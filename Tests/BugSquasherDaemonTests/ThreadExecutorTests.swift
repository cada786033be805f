import Foundation
import Synchronization
import Testing

@testable import BugSquasherDaemon

@Suite("Thread executor")
struct ThreadExecutorTests {
    @Test("beforeEachJob runs on the executor's thread before each job, which waits on it")
    func beforeEachJobGatesEveryJob() async throws {
        // The import threads give way to edits here (EditsFirst): between any two steps of an
        // import, not only where the import's code asks.
        let calls = Atomic<Int>(0)
        let hold = Atomic<Bool>(true)
        let executor = ThreadExecutor(
            name: "gated", threads: 1,
            beforeEachJob: {
                calls.add(1, ordering: .relaxed)
                var spins = 0
                // 60 s at most: a bound for a broken test, far above how long the test task may
                // wait for a thread when the whole suite runs (a 10 s bound failed once at 44 s).
                while hold.load(ordering: .relaxed), spins < 60_000 {
                    usleep(1_000)
                    spins += 1
                }
            })
        // Whether the hold was released when the job ran.
        let job = Task { try await executor.run { !hold.load(ordering: .relaxed) } }
        let deadline = ContinuousClock.now + .seconds(60)
        while calls.load(ordering: .relaxed) == 0, ContinuousClock.now < deadline { await Task.yield() }
        try #require(calls.load(ordering: .relaxed) >= 1, "the hook did not run for the job")
        hold.store(false, ordering: .relaxed)
        #expect(try await job.value, "the job ran while the hook held its thread")
        let before = calls.load(ordering: .relaxed)
        for _ in 0..<5 { _ = try await executor.run { 0 } }
        #expect(calls.load(ordering: .relaxed) >= before + 5)
    }
}
