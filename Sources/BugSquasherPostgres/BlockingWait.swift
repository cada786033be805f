import Dispatch
import NIOCore
import NIOPosix
import Synchronization

extension EventLoopFuture where Value: Sendable {
    /// The future's value, waiting for it on this thread, which may be an event loop of another
    /// group: the store is synchronous, and squasherd answers short calls on its servers' event
    /// loops. The store's connections run on ``PostgresEventLoops/group`` alone, so such a wait
    /// never waits for its own loop. (`wait()` refuses every event-loop thread.)
    func blockingValue() throws -> Value {
        let result = Mutex<Result<Value, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        whenComplete { completed in
            result.withLock { $0 = completed }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get()
    }
}

/// The event loops of the PostgreSQL stores' connections, apart from every other group.
enum PostgresEventLoops {
    /// One thread: the store's statements wait for each other anyway.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
}
