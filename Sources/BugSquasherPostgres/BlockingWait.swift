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

/// The answer to a statement sent without waiting for it (`PostgresStore.send`), kept as it
/// arrives: reading an answer that has arrived takes no trip through the event loop, which a
/// wait on the future takes even when it is complete (a thread wake-up each way).
final class PendingAnswer<Value: Sendable>: Sendable {
    private let future: EventLoopFuture<Value>
    private let connection: PostgresConnection
    private let arrived = Mutex<Result<Value, any Error>?>(nil)

    init(_ future: EventLoopFuture<Value>, connection: PostgresConnection) {
        self.future = future
        self.connection = connection
        future.whenComplete { [self] result in self.arrived.withLock { $0 = result } }
    }

    /// The answer, waiting for it on this thread unless it has arrived
    /// (``EventLoopFuture/blockingValue(watching:)``).
    func value() throws -> Value {
        if let result = arrived.withLock({ $0 }) { return try result.get() }
        return try future.blockingValue(watching: connection)
    }

    /// The answer reduced to whether the statement worked.
    var done: PendingAnswer<Void> { PendingAnswer<Void>(future.map { _ in () }, connection: connection) }
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
        try start(on: connection, body).value()
    }

    /// Starts `body` on `connection`'s loop as ``run(on:_:)`` does, without waiting for it: what
    /// this thread sends on the connection afterwards goes out after what `body` sends before it
    /// first waits (the loop runs its jobs in the order they came).
    static func start<T: Sendable>(
        on connection: PostgresConnection, _ body: @escaping @Sendable () async throws -> T
    ) -> PendingAnswer<T> {
        let loop = connection.eventLoop
        let promise = loop.makePromise(of: T.self)
        Task(executorPreference: EventLoopTaskExecutor(loop: loop)) {
            do { promise.succeed(try await body()) } catch { promise.fail(error) }
        }
        return PendingAnswer(promise.futureResult, connection: connection)
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
