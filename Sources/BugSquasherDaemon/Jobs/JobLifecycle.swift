import BugSquasherModel

/// The decisions of an import job's life, apart from decoding, upserting and saving its chunks:
/// where a job may go from each ``JobState``, what happens between two chunks (go on, pause for
/// a shutdown, stop on request), what the runner does after a job (take the next, retry once a
/// store locked by another program can be written, record a failure), and what becomes of a
/// job's spooled input as it ends. ``ImportRunner`` asks it and carries the answers out; it does
/// no I/O, so its transitions are tested without a store.
struct JobLifecycle: Sendable {
    /// What the runner does before the next chunk.
    enum BetweenChunks: Sendable, Equatable {
        /// Import the next chunk.
        case importNext
        /// squasherd is stopping: let the chunk in flight commit, leave the job `running`, and
        /// resume it at the next start.
        case pauseForShutdown
        /// Someone asked to stop the job: let the chunk in flight commit, and end it `aborted`.
        case abort
    }

    /// How a job's run ended.
    enum Outcome: Sendable, Equatable {
        /// It ended (finished, failed or aborted, and recorded so), or paused for a shutdown.
        case ended
        /// The store's write lock was held by another program past the busy timeout.
        case storeBusy
        /// The database server could not be reached (restarting, cut off).
        case storeUnreachable
        /// It failed; its failure is to be recorded.
        case failed
    }

    /// What the runner does next.
    enum Next: Sendable, Equatable {
        /// Take the next runnable job.
        case takeNextJob
        /// Wait this long, then take the jobs up again: the busy job is still `running` and
        /// resumes from its last committed chunk, as after a restart.
        case retryAfter(Duration)
        /// Record the job failed, with its reason; a failure that cannot be recorded either
        /// is kept in memory, and the job is retried at the next start.
        case recordFailure
    }

    /// What becomes of a job's spooled input as the job ends.
    struct SpoolOnEnd: Sendable, Equatable {
        /// Moved aside before the end is recorded, so that whoever is told the job ended finds
        /// it gone; a finished job's stays until its end is recorded (resumed without it, the
        /// job would fail although every record was imported).
        var moveAsideFirst: Bool
        /// Put back when the end cannot be recorded, so that the job resumes with its input at
        /// the next start; an aborted job's goes all the same, never to be undone.
        var putBackIfUnrecorded: Bool
    }

    /// The longest wait between attempts on a store that another program keeps locked.
    static let longestBusyRetry = Duration.seconds(30)

    /// The longest wait between attempts on a database server that cannot be reached: an
    /// attempt costs nothing while it is away (refused at once), and the job should go on soon
    /// after it is back.
    static let longestUnreachableRetry = Duration.seconds(4)

    /// Attempts in a row that met a busy store.
    private(set) var busyRetries = 0

    /// Whether a job in `state` may move to `next`. A job ends once: a final state goes
    /// nowhere. A running job may run again (resumed after a restart or a busy store).
    static func canMove(from state: JobState, to next: JobState) -> Bool {
        switch (state, next) {
        case (.uploading, .queued), (.uploading, .failed), (.uploading, .aborted): true
        case (.queued, .running), (.queued, .failed), (.queued, .aborted): true
        case (.running, .running), (.running, .finished), (.running, .failed), (.running, .aborted): true
        default: false
        }
    }

    /// Before each chunk: a shutdown comes first, then an abort.
    static func betweenChunks(shuttingDown: Bool, abortRequested: Bool) -> BetweenChunks {
        if shuttingDown { return .pauseForShutdown }
        if abortRequested { return .abort }
        return .importNext
    }

    /// A job's run ended with `outcome`, after committing at least one chunk or not
    /// (`progressed`): what the runner does next. Busy stores are retried after 1, 2, 4, 8 and
    /// 16 s, then every 30 s; a server out of reach after 1, 2, then every 4 s (the runner goes on
    /// sooner when the store finds the server answering again). The back-off starts over once a
    /// job runs through, or commits a chunk before it stops again: an import that goes on
    /// between failures (sessions ended by a pooler or an administrator) is not made to wait as
    /// long as one that never gets through.
    mutating func jobEnded(_ outcome: Outcome, progressed: Bool = false) -> Next {
        if progressed { busyRetries = 0 }
        switch outcome {
        case .ended:
            busyRetries = 0
            return .takeNextJob
        case .storeBusy:
            busyRetries += 1
            return .retryAfter(min(.seconds(1 << min(busyRetries - 1, 5)), Self.longestBusyRetry))
        case .storeUnreachable:
            busyRetries += 1
            return .retryAfter(min(.seconds(1 << min(busyRetries - 1, 5)), Self.longestUnreachableRetry))
        case .failed:
            return .recordFailure
        }
    }

    /// The job queue could not be read, for a reason that passes (`.storeBusy`,
    /// `.storeUnreachable`) or not (`.failed`): how long to wait before reading it again, on a
    /// job's back-off; nil for `.failed`: the runner waits for the next submission (a running
    /// job resumes at the next start).
    mutating func queueUnreadable(_ reason: Outcome) -> Duration? {
        guard reason != .failed, case .retryAfter(let delay) = jobEnded(reason) else { return nil }
        return delay
    }

    /// What becomes of the spooled input of a job ending in `state`.
    static func spoolOnEnd(_ state: JobState) -> SpoolOnEnd {
        SpoolOnEnd(moveAsideFirst: state != .finished, putBackIfUnrecorded: state == .failed)
    }
}
