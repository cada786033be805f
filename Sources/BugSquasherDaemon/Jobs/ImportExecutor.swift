import Foundation
import Glibc

/// The threads import jobs decode and upsert on, at a lower scheduling priority.
///
/// Swift's cooperative pool has one thread per core. Decoding and upserting a chunk runs for
/// milliseconds without a suspension point, so on the pool two of those stages would leave no
/// thread for a request, and an edit or a subscriber's notification would wait for them. Here
/// they run on threads of their own, at a higher `nice` value, so the scheduler runs requests,
/// the change feed and subscriber processes first, and the import gets the rest of the CPU.
///
/// A ``TaskExecutor``: the runner processes a job under `withTaskExecutorPreference(_:)`, so the
/// job's child tasks and the importer contexts it calls (default actors) run here. A chunk's
/// save is not: it holds the store's writer, which edits wait for, so it runs at the daemon's
/// own priority.
final class ImportExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    /// Jobs waiting for a thread (guarded by `condition`).
    private var jobs: [UnownedJob] = []
    /// Threads that could not lower their priority (guarded by `condition`).
    private var unlowered = 0

    /// Starts `threads` threads at `nice` `priority` (0: the daemon's own).
    init(threads: Int, priority: Int32) {
        let started = DispatchSemaphore(value: 0)
        for index in 0..<threads {
            let thread = Thread { [self] in
                // The name `top -H` and `ps -L` show (Foundation's `Thread.name` may not reach the
                // kernel when set this early, and `pthread_setname_np` is not imported).
                try? "import-\(index)".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
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
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
