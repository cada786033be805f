import CConcurrencyHook
import NIOCore
import NIOPosix

/// Runs a process's Swift tasks and its socket I/O on one thread: NIO's shared event-loop group,
/// reduced to one loop, becomes Swift concurrency's global executor.
///
/// For processes that mostly wait on a change feed, such as `squasherctl subscribe`: a
/// notification is then read, decoded, merged and printed on the thread that received it,
/// instead of being handed from the event loop to a task on the cooperative pool and on to the
/// task that prints (half the context switches per notification; with 100 such processes on
/// 2 cores, the last refreshed after 13–14 ms instead of 15–19 ms). Not for a process that needs
/// several cores, or that blocks its tasks for long: everything waits behind one thread.
///
/// NIO's own `NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()`
/// looks the runtime's hook up with `dlsym`, which finds nothing in a binary linked with
/// `--static-swift-stdlib` (the hook is not exported there): it would return `false` and leave
/// the cooperative pool in place. This sets the same hook through a reference the linker
/// resolves, in static and dynamic builds alike.
public enum SingleThreadedRuntime {
    /// Installs the single thread; `true` when installed. Call it once, from the main thread,
    /// before anything uses NIO or starts a task (first thing in `main.swift`).
    @discardableResult
    public static func install() -> Bool {
        NIOSingletons.groupLoopCountSuggestion = 1
        return bugsquasher_install_global_enqueue_hook { job in
            // `any()` is the loop itself when called on it: no thread switch.
            MultiThreadedEventLoopGroup.singleton.any().executor.enqueue(ExecutorJob(unsafeBitCast(job, to: UnownedJob.self)))
        }
    }
}
