public import NIOCore
import NIOPosix

/// A thread of its own that is both a SwiftNIO event loop and a Swift task executor: a server
/// bound to ``loop`` and serving its connections on this executor reads a call, runs its
/// handler and writes the reply on one thread, without a hop between the loop and another
/// thread in either direction. Handlers may block it; only this loop's connections wait meanwhile.
/// Why it is built this way: docs/DESIGN-NOTES.md, "A short call stays on one thread".
public final class EventLoopExecutor: TaskExecutor, Sendable {
    /// The event loop: channels bound to it do their I/O here, and tasks preferring this
    /// executor run here between its I/O.
    public let loop: any EventLoop
    private let group: MultiThreadedEventLoopGroup

    /// Starts the thread.
    public init() {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        loop = group.next()
    }

    /// Runs `job` on the loop's thread, after what the loop has queued before it.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Stops the thread once the channels on it are closed.
    public func shutdown() async throws {
        try await group.shutdownGracefully()
    }
}
