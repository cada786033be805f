public import NIOCore
import NIOPosix

/// A thread of its own that is both a SwiftNIO event loop and a Swift task executor: a server
/// bound to ``loop`` and serving its connections on this executor reads a call, runs its
/// handler and writes the reply on one thread, without a hop between the loop and another
/// thread in either direction.
///
/// A server whose calls each do a short piece of work (an edit read, saved and answered, say)
/// gains from it: from a cold start (a client that calls now and then), each hop to a sleeping
/// thread costs a wake-up and cold caches, and the hop from the loop to a worker thread and back
/// can be a fifth of a short call's time. The handlers may block the thread (an edit
/// waits for the store's writer): only this loop's connections wait meanwhile.
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
