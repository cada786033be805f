import BugSquasherModel
import Testing

@testable import BugSquasherDaemon

/// An import job's lifecycle decisions, driven with plain events: no store, no spool.
@Suite("Import job lifecycle")
struct JobLifecycleTests {
    /// A running job may run again (resumed); nothing leaves a final state.
    @Test("a job goes uploading, queued, running and ends once; final states are final")
    func transitions() {
        let allowed: Set<[JobState]> = [
            [.uploading, .queued], [.uploading, .failed], [.uploading, .aborted],
            [.queued, .running], [.queued, .failed], [.queued, .aborted],
            [.running, .running], [.running, .finished], [.running, .failed], [.running, .aborted],
        ]
        for from in JobState.allCases {
            for to in JobState.allCases {
                #expect(JobLifecycle.canMove(from: from, to: to) == allowed.contains([from, to]), "\(from) → \(to)")
            }
        }
        // Illegal ones, named: no going back, no second end, no skipping the queue.
        #expect(!JobLifecycle.canMove(from: .finished, to: .aborted))
        #expect(!JobLifecycle.canMove(from: .running, to: .queued))
        #expect(!JobLifecycle.canMove(from: .uploading, to: .running))
    }

    /// An abort alone stops the job; with neither, the next chunk is imported.
    @Test("between chunks a shutdown pauses the job, even when an abort is requested")
    func betweenChunks() {
        #expect(JobLifecycle.betweenChunks(shuttingDown: false, abortRequested: false) == .importNext)
        #expect(JobLifecycle.betweenChunks(shuttingDown: false, abortRequested: true) == .abort)
        #expect(JobLifecycle.betweenChunks(shuttingDown: true, abortRequested: true) == .pauseForShutdown)
        #expect(JobLifecycle.betweenChunks(shuttingDown: true, abortRequested: false) == .pauseForShutdown)
    }

    /// A store locked by another program is retried after 1, 2, 4, 8, 16 s, then every 30 s; a job that
    /// runs through starts the back-off over.
    @Test("a locked store is retried with back-off; a failure is recorded")
    func busyRetriesAndFailures() {
        var lifecycle = JobLifecycle()
        let delays = (0..<8).map { _ in lifecycle.jobEnded(.storeBusy) }
        #expect(delays == [1, 2, 4, 8, 16, 30, 30, 30].map { .retryAfter(.seconds($0)) })
        #expect(lifecycle.jobEnded(.failed) == .recordFailure)
        #expect(lifecycle.busyRetries == 8)
        #expect(lifecycle.jobEnded(.ended) == .takeNextJob)
        #expect(lifecycle.jobEnded(.storeBusy) == .retryAfter(.seconds(1)))
    }

    /// A job that commits a chunk between two failures starts its back-off over: an import whose
    /// sessions are ended now and then goes on after a second, not after the longest wait.
    @Test("a job that committed a chunk before it stopped again starts its back-off over")
    func progressResetsBackOff() {
        var lifecycle = JobLifecycle()
        let stuck = (0..<4).map { _ in lifecycle.jobEnded(.storeUnreachable, progressed: false) }
        #expect(stuck == [1, 2, 4, 4].map { .retryAfter(.seconds($0)) })
        #expect(lifecycle.jobEnded(.storeUnreachable, progressed: true) == .retryAfter(.seconds(1)))
        #expect(lifecycle.jobEnded(.storeUnreachable, progressed: false) == .retryAfter(.seconds(2)))
        #expect(lifecycle.jobEnded(.storeBusy, progressed: true) == .retryAfter(.seconds(1)))
        #expect(lifecycle.busyRetries == 1)
        #expect(lifecycle.jobEnded(.failed, progressed: true) == .recordFailure)
        #expect(lifecycle.busyRetries == 0)
    }

    /// A job queue that cannot be read for now (a database server that does not answer) is read
    /// again on the same back-off, so that a running job resumes; any other failure waits for
    /// the next submission.
    @Test("a job queue out of reach for now is read again with back-off")
    func unreadableQueue() {
        var lifecycle = JobLifecycle()
        #expect(lifecycle.queueUnreadable(.storeBusy) == .seconds(1))
        #expect(lifecycle.jobEnded(.storeBusy) == .retryAfter(.seconds(2)))
        #expect(lifecycle.queueUnreadable(.storeBusy) == .seconds(4))
        #expect(lifecycle.queueUnreadable(.failed) == nil)
        #expect(lifecycle.jobEnded(.ended) == .takeNextJob)
        #expect(lifecycle.queueUnreadable(.storeUnreachable) == .seconds(1))
    }

    /// A database server out of reach is tried again every 4 s at most: an attempt costs nothing
    /// while it is away, and the job goes on soon after it is back.
    @Test("a server out of reach is retried every 4 s at most")
    func unreachableRetries() {
        var lifecycle = JobLifecycle()
        let delays = (0..<5).map { _ in lifecycle.jobEnded(.storeUnreachable) }
        #expect(delays == [1, 2, 4, 4, 4].map { .retryAfter(.seconds($0)) })
        #expect(lifecycle.queueUnreadable(.storeUnreachable) == .seconds(4))
    }

    /// A failed job's spool is put back if recording its end fails; an aborted job's goes all the same.
    @Test("a finished job's spool stays until its end is recorded")
    func spoolOnEnd() {
        #expect(JobLifecycle.spoolOnEnd(.finished) == .init(moveAsideFirst: false, putBackIfUnrecorded: false))
        #expect(JobLifecycle.spoolOnEnd(.failed) == .init(moveAsideFirst: true, putBackIfUnrecorded: true))
        #expect(JobLifecycle.spoolOnEnd(.aborted) == .init(moveAsideFirst: true, putBackIfUnrecorded: false))
    }
}
