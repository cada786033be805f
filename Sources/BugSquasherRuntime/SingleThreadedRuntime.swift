import CConcurrencyHook
import Foundation
import Synchronization

/// Runs a process's Swift tasks on one thread that also waits for its sockets: a small run loop
/// (a job queue and `poll(2)`) becomes Swift concurrency's global executor, and the transport's
/// `VarlinkStream` reads its connection there without SwiftNIO.
///
/// For processes that mostly wait on a change feed, such as `squasherctl subscribe`, where each
/// notification should cost only the little code that handles it. Not for a process that needs
/// several cores, or that blocks its tasks for long: everything waits behind one thread.
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "A subscriber runs on one thread".
public enum SingleThreadedRuntime {
    /// Starts the run loop's thread and makes it the global executor; `true` when installed. Call
    /// it once, from the main thread, before any task starts (first thing in `main.swift`).
    @discardableResult
    public static func install() -> Bool {
        guard PollLoop.installed == nil, let loop = PollLoop.start() else { return false }
        // Set before the hook, which reads it for every job from then on.
        PollLoop.installed = loop
        guard
            bugsquasher_install_global_enqueue_hook({ job in
                PollLoop.installed!.enqueue(unsafeBitCast(job, to: UnownedJob.self))
            })
        else {
            // Another hook was there first: its executor runs the jobs; this loop stays idle.
            PollLoop.installed = nil
            return false
        }
        return true
    }

    /// Whether ``install()`` installed the run loop in this process.
    package static var isInstalled: Bool { PollLoop.installed != nil }

    /// Suspends until `fd` can be read (or was hung up), on the installed run loop.
    ///
    /// - Throws: `CancellationError` when the task is cancelled first.
    package static func readable(_ fd: CInt) async throws {
        guard let loop = PollLoop.installed else {
            preconditionFailure("SingleThreadedRuntime.readable needs the run loop installed")
        }
        try await loop.readable(fd)
    }
}

/// The run loop: jobs first, then `poll(2)` on the descriptors tasks wait for and on a pipe that
/// wakes it when a job comes from another thread (a signal handler's, a timer's).
private final class PollLoop: Sendable {
    // Set once, before the first job is enqueued; read by every enqueue.
    nonisolated(unsafe) static var installed: PollLoop?

    private struct State {
        var jobs: [UnownedJob] = []
        /// The loop waits in poll(2): an enqueue must wake it.
        var sleeping = false
        var waiters: [CInt: [Waiter]] = [:]
    }

    private struct Waiter {
        let id: Int
        let continuation: UnsafeContinuation<Void, any Error>
    }

    private let state = Mutex(State())
    private let wakeRead: CInt
    private let wakeWrite: CInt
    private let nextWaiter = Atomic<Int>(0)

    private init(wakeRead: CInt, wakeWrite: CInt) {
        self.wakeRead = wakeRead
        self.wakeWrite = wakeWrite
    }

    static func start() -> PollLoop? {
        var pipeFDs: [CInt] = [0, 0]
        guard bugsquasher_pipe2(&pipeFDs, O_NONBLOCK | O_CLOEXEC) == 0 else { return nil }
        let loop = PollLoop(wakeRead: pipeFDs[0], wakeWrite: pipeFDs[1])
        Thread {
            // Named by itself: corelibs Foundation's `Thread.name` names the thread only when
            // the thread has recorded its handle, which can come after the thread starts.
            bugsquasher_name_current_thread("run loop")
            loop.run()
        }.start()
        return loop
    }

    func enqueue(_ job: UnownedJob) {
        let wake = state.withLock { state in
            state.jobs.append(job)
            defer { state.sleeping = false }
            return state.sleeping
        }
        if wake { wakeUp() }
    }

    private func wakeUp() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    func readable(_ fd: CInt) async throws {
        let id = nextWaiter.wrappingAdd(1, ordering: .relaxed).oldValue
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                let (cancelled, wake) = state.withLock { state -> (Bool, Bool) in
                    guard !Task.isCancelled else { return (true, false) }
                    state.waiters[fd, default: []].append(Waiter(id: id, continuation: continuation))
                    // Called off the loop (a task resumed by a timer on another thread): the
                    // loop must poll this descriptor too.
                    defer { state.sleeping = false }
                    return (false, state.sleeping)
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
                if wake { wakeUp() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.waiters[fd]?.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters[fd]?.remove(at: index)
            }
            // Resuming enqueues the task, which wakes the loop from its poll.
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    private func run() -> Never {
        let executor = globalConcurrentExecutor.asUnownedTaskExecutor()
        // Kept from one turn to the next, so that a turn allocates nothing: the jobs to run
        // (swapped with the queue's array), the descriptors to poll, the waiters to resume.
        var jobs: [UnownedJob] = []
        var fds: [pollfd] = []
        var woken: [Waiter] = []
        var drained = [UInt8](repeating: 0, count: 64)
        while true {
            fds.removeAll(keepingCapacity: true)
            state.withLock { state in
                swap(&jobs, &state.jobs)
                guard jobs.isEmpty else { return }
                state.sleeping = true
                fds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
                for fd in state.waiters.keys { fds.append(pollfd(fd: fd, events: Int16(POLLIN), revents: 0)) }
            }
            if !jobs.isEmpty {
                for job in jobs { job.runSynchronously(on: executor) }
                jobs.removeAll(keepingCapacity: true)
                continue
            }
            let ready = poll(&fds, nfds_t(fds.count), -1)
            state.withLock { $0.sleeping = false }
            guard ready > 0 else { continue }
            if fds[0].revents != 0 {
                while read(wakeRead, &drained, drained.count) > 0 {}
            }
            state.withLock { state in
                for fd in fds.dropFirst() where fd.revents != 0 {
                    woken += state.waiters.removeValue(forKey: fd.fd) ?? []
                }
            }
            for waiter in woken { waiter.continuation.resume() }
            woken.removeAll(keepingCapacity: true)
        }
    }
}
