import Dispatch
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

extension EventLoopFuture where Value: Sendable {
    /// The future's value, waiting for it on this thread, which may be an event loop of another
    /// group: the store is synchronous, and squasherd answers short calls on its servers' event
    /// loops. The store's connections run on ``PostgresEventLoops/group`` alone, so such a wait
    /// never waits for its own loop. (`wait()` refuses every event-loop thread.)
    /// With `connection`, the wait ends when the connection closes under it: postgres-nio can
    /// leave a statement's future pending when the server goes away as the statement is sent (an
    /// immediate restart of PostgreSQL), and the thread waiting for it held the store's
    /// connection for ever.
    func blockingValue(watching connection: PostgresConnection? = nil) throws -> Value {
        let result = Mutex<Result<Value, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        whenComplete { completed in
            result.withLock { $0 = completed }
            done.signal()
        }
        if let connection {
            while done.wait(timeout: .now() + .seconds(1)) == .timedOut {
                if connection.isClosed, result.withLock({ $0 == nil }) { throw ConnectionClosedUnderStatement() }
            }
        } else {
            done.wait()
        }
        return try result.withLock { $0! }.get()
    }
}

/// The event loops of the PostgreSQL stores' connections, apart from every other group.
enum PostgresEventLoops {
    /// One thread: the store's statements wait for each other anyway.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Runs `body`, an async call of postgres-nio (`copyFrom` has no other form), on `loop` and
    /// waits for it on this thread, as ``EventLoopFuture/blockingValue(watching:)`` does. The task runs on
    /// the loop itself, not on Swift's shared pool, whose few threads may all be blocked in
    /// waits like this one.
    static func run<T: Sendable>(
        on connection: PostgresConnection, _ body: @escaping @Sendable () async throws -> T
    ) throws -> T {
        let loop = connection.eventLoop
        let promise = loop.makePromise(of: T.self)
        Task(executorPreference: EventLoopTaskExecutor(loop: loop)) {
            do { promise.succeed(try await body()) } catch { promise.fail(error) }
        }
        return try promise.futureResult.blockingValue(watching: connection)
    }
}

/// A task executor running its jobs on one event loop.
final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    init(loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// A statement's connection closed while the statement waited for its answer (see
/// ``EventLoopFuture/blockingValue(watching:)``).
struct ConnectionClosedUnderStatement: Error, CustomStringConvertible {
    var description: String { "the connection to PostgreSQL closed while a statement waited for its answer" }
}
