import NIOCore
import NIOPosix

/// Proves that the event loops serving the sockets still turn: a task submitted to each loop
/// must run. A wedged loop makes ``check()`` wait, and a watchdog built on it stop pinging.
public enum EventLoopProbe {
    /// Runs a no-op on every event loop of the shared group.
    public static func check() async throws {
        for loop in MultiThreadedEventLoopGroup.singleton.makeIterator() {
            try await loop.submit {}.get()
        }
    }
}
