import Foundation
import Glibc

/// Threads of squasherd's own, for work that runs for milliseconds or more without a suspension
/// point: a ``TaskExecutor``, used with `withTaskExecutorPreference(_:)`.
///
/// Import jobs' decoding and upserting (`import-N` threads, at `nice` `import_nice`), clients'
/// store reads (`read-N`) and saves to the store (`write-N`) run here, because on Swift's
/// cooperative pool, one thread per core, they would block the threads that answer requests,
/// send notifications and ping the watchdog.
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "Blocking work runs on threads of its own".
final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    /// Jobs waiting for a thread (guarded by `condition`).
    private var jobs: [UnownedJob] = []
    /// Threads that could not lower their priority (guarded by `condition`).
    private var unlowered = 0
    /// Runs on the job's thread before each job (a task's run up to its next suspension).
    private let beforeEachJob: (@Sendable () -> Void)?

    /// Starts `threads` threads named `name-0`, `name-1`, … at `nice` `priority` (0: the
    /// daemon's own). `beforeEachJob`, when given, runs on the job's thread before each job and
    /// may block it (bulk work giving way to edits, ``EditsFirst``).
    init(name: String, threads: Int, priority: Int32 = 0, beforeEachJob: (@Sendable () -> Void)? = nil) {
        self.beforeEachJob = beforeEachJob
        let started = DispatchSemaphore(value: 0)
        for index in 0..<threads {
            let thread = Thread { [self] in
                // The name `top -H` and `ps -L` show (Foundation's `Thread.name` may not reach the
                // kernel when set this early, and `pthread_setname_np` is not imported).
                try? "\(name)-\(index)".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
                // On Linux the nice value is per thread; `who` 0 is the calling thread.
                if priority != 0, setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, priority) != 0 {
                    condition.withLock { unlowered += 1 }
                }
                started.signal()
                runJobs()
            }
            thread.start()
        }
        for _ in 0..<threads { started.wait() }
    }

    /// Whether every thread runs at the `nice` value asked for (a seccomp filter or a missing permission can
    /// refuse it; the import then runs at the daemon's priority, as before).
    var isPriorityLowered: Bool { condition.withLock { unlowered == 0 } }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.withLock {
            jobs.append(job)
            condition.signal()
        }
    }

    private func runJobs() {
        while true {
            let job = condition.withLock {
                while jobs.isEmpty { condition.wait() }
                return jobs.removeFirst()
            }
            beforeEachJob?()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

extension ThreadExecutor {
    /// The threads clients' store reads run on: half the cores, at least 2 and at most 4, so
    /// that the store's 5 read connections always leave one for the daemon's own reads (a
    /// watchdog health check, `Jobs.Status`).
    static func readers() -> ThreadExecutor {
        ThreadExecutor(name: "read", threads: min(4, max(2, ProcessInfo.processInfo.activeProcessorCount / 2)))
    }

    /// The threads the `Jobs` calls run on (the status, the metrics, the jobs): two of their own,
    /// so that they neither queue behind clients' slow queries nor, waiting for a database gone
    /// silent, take the cooperative pool's threads and the timers that end such a wait.
    static func daemonCalls() -> ThreadExecutor {
        ThreadExecutor(name: "calls", threads: 2)
    }

    /// The threads import chunks and job records are saved on: two, so that a job's record
    /// waits for the chunk being saved on the store's writer, not for a thread behind it.
    static func writers() -> ThreadExecutor {
        ThreadExecutor(name: "write", threads: 2)
    }

    /// Runs `work` on these threads, off Swift's cooperative pool, and returns its result; not
    /// at all when the task was cancelled while it waited for a thread (a stopping daemon does
    /// not work through the queries of clients it is closing).
    func run<T: Sendable>(_ work: () throws -> T) async throws -> T {
        try await withTaskExecutorPreference(self) {
            try Task.checkCancellation()
            return try work()
        }
    }
}
