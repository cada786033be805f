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
public enum SingleThreadedRuntime {
    /// Installs the single thread; `true` when installed. Call it once, from the main thread,
    /// before anything uses NIO or starts a task (first thing in `main.swift`).
    @discardableResult
    public static func install() -> Bool {
        NIOSingletons.groupLoopCountSuggestion = 1
        return NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}
