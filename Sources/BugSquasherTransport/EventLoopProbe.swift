import NIOCore
import NIOPosix

/// Proves that the event loops serving the sockets still turn: a task submitted to each loop
/// must run. A wedged loop makes ``check()`` wait, and a watchdog built on it stop pinging.
///
/// The write socket's own loop (an ``EventLoopExecutor``) is not probed: its edits wait on it for
/// the store's writer, up to SQLite's busy timeout when another program holds the write lock,
/// and a restart would not end that wait.
public enum EventLoopProbe {
    /// Runs a no-op on every event loop of the shared group.
    public static func check() async throws {
        for loop in MultiThreadedEventLoopGroup.singleton.makeIterator() {
            try await loop.submit {}.get()
        }
    }
}
