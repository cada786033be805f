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

/// The answer to a statement, for a thread that is not an event loop to wait for: the loop
/// fills it and signals a semaphore, so neither reading an answer that has arrived nor waiting
/// for one asks anything of the loop. (A wait on the statement's future, `blockingValue`,
/// registers a callback through the loop: one more wake of it while the answer is not in.) Like
/// ``EventLoopFuture/blockingValue(watching:)``, a wait ends when the connection closes under
/// the statement.
/// Why: docs/DESIGN-NOTES.md, "A save waits for the server twice".
final class PendingAnswer<Value: Sendable>: Sendable {
    private let connection: PostgresConnection
    /// The answer once the event loop filled it (``fill(_:)``), which signals `arrival`.
    private let arrived = Mutex<Result<Value, any Error>?>(nil)
    private let arrival = DispatchSemaphore(value: 0)
    /// For an answer derived from another's, how to read it (instead of `arrived`).
    private let derived: (@Sendable () throws -> Value)?

    private init(connection: PostgresConnection, derived: (@Sendable () throws -> Value)? = nil) {
        self.connection = connection
        self.derived = derived
    }

    /// The answer `future` brings.
    convenience init(_ future: EventLoopFuture<Value>, connection: PostgresConnection) {
        self.init(connection: connection)
        future.whenComplete { [self] in fill($0) }
    }

    /// An answer the caller fills once with ``fill(_:)``, on any thread.
    static func unfilled(on connection: PostgresConnection) -> PendingAnswer<Value> {
        PendingAnswer(connection: connection)
    }

    /// Keeps `result` and wakes the thread waiting for it.
    func fill(_ result: Result<Value, any Error>) {
        arrived.withLock { $0 = result }
        arrival.signal()
    }

    /// The answer, waiting for it on this thread unless it has arrived.
    func value() throws -> Value {
        if let derived { return try derived() }
        if let result = arrived.withLock({ $0 }) { return try result.get() }
        while arrival.wait(timeout: .now() + .seconds(1)) == .timedOut {
            if connection.isClosed, arrived.withLock({ $0 == nil }) { throw ConnectionClosedUnderStatement() }
        }
        // Signalled once: a later call finds the answer kept.
        return try arrived.withLock { $0! }.get()
    }

    /// The answer reduced to whether the statement worked.
    var done: PendingAnswer<Void> { PendingAnswer<Void>(connection: connection) { [self] in _ = try value() } }
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
        let answer = PendingAnswer<T>.unfilled(on: connection)
        Task(executorPreference: EventLoopTaskExecutor(loop: connection.eventLoop)) {
            do { answer.fill(.success(try await body())) } catch { answer.fill(.failure(error)) }
        }
        return answer
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
