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
        try PendingAnswer(self, watching: connection).value()
    }
}

/// The answer to a statement, for a thread that is not an event loop to wait for: the loop
/// fills it (a callback on the statement's future, or the task of
/// ``PostgresEventLoops/start(on:_:)``) and signals a semaphore, so neither reading an answer
/// that has arrived nor waiting for one asks anything more of the loop. A wait ends when the
/// connection it watches, if any, closes under the statement
/// (``EventLoopFuture/blockingValue(watching:)`` says why).
/// Why: docs/DESIGN-NOTES.md, "A save waits for the server twice".
final class PendingAnswer<Value: Sendable>: Sendable {
    /// The connection whose closing ends a wait, if any.
    private let connection: PostgresConnection?
    /// The answer once the event loop filled it (``fill(_:)``), which signals `arrival`.
    private let arrived = Mutex<Result<Value, any Error>?>(nil)
    private let arrival = DispatchSemaphore(value: 0)
    /// For an answer derived from another's, how to read it (instead of `arrived`).
    private let derived: (@Sendable () throws -> Value)?

    /// An answer the caller fills once with ``fill(_:)``, on any thread; a wait for it ends when
    /// `connection` closes first.
    fileprivate init(watching connection: PostgresConnection?, derived: (@Sendable () throws -> Value)? = nil) {
        self.connection = connection
        self.derived = derived
    }

    /// The answer `future` brings.
    convenience init(_ future: EventLoopFuture<Value>, watching connection: PostgresConnection?) {
        self.init(watching: connection)
        future.whenComplete { [self] in fill($0) }
    }

    /// Keeps `result` and wakes the thread waiting for it.
    func fill(_ result: Result<Value, any Error>) {
        arrived.withLock { $0 = result }
        arrival.signal()
    }

    /// The answer, waiting for it on this thread unless it has arrived.
    func value() throws -> Value {
        if let derived { return try derived() }
        while arrived.withLock({ $0 == nil }) {
            // The semaphore is signalled once: another waiter finds the answer at its next look.
            if arrival.wait(timeout: .now() + .seconds(1)) == .timedOut, let connection, connection.isClosed,
                arrived.withLock({ $0 == nil })
            {
                throw ConnectionClosedUnderStatement()
            }
        }
        return try arrived.withLock { $0! }.get()
    }

    /// The answer reduced to whether the statement worked.
    var done: PendingAnswer<Void> { PendingAnswer<Void>(watching: connection) { [self] in _ = try value() } }
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
        let answer = PendingAnswer<T>(watching: connection)
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
