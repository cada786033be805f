import BugSquasherGraph
import GRDB
import GRDBSQLite
import Logging
import Synchronization

/// Copies the WAL back into the database file on a connection of its own, so that commits do
/// not pay for it.
///
/// The writer's WAL hook asks for a `PASSIVE` checkpoint each time the WAL has grown by
/// ``requestFrames`` pages since the last one. Past ``restartFrames`` every commit asks for one,
/// and one that copied everything also tries a `RESTART`, so that the WAL starts over; past
/// ``writerFrames`` the writer still checkpoints in its commit.
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "Checkpoints run beside commits".
final class BackgroundCheckpointer: Sendable {
    /// WAL pages written since the last background checkpoint past which the next is requested.
    static let requestFrames: CInt = 1_000
    /// WAL pages after a commit past which the writer checkpoints itself.
    static let writerFrames: CInt = 4_096
    /// WAL pages past which a background checkpoint that copied all of them also starts the WAL
    /// over (a `RESTART` checkpoint), so that the writer rarely has to.
    static let restartFrames: CInt = writerFrames / 2

    private let connection = Mutex<DatabaseQueue?>(nil)
    private let pending = Atomic<Bool>(false)
    private let completed = Atomic<Int>(0)
    private let restarts = Atomic<Int>(0)
    private let writerCheckpoints = Atomic<Int>(0)
    /// The WAL's length, in pages, when the last background checkpoint ran.
    private let checkpointedFrames = Atomic<CInt>(0)
    private let logger: Logger
    /// What a checkpoint waits for before it starts: the window after an interactive save, in
    /// which its copy and fsync would share the machine with the save's subscribers.
    private let editsFirst: EditsFirst?
    /// Whether a `PASSIVE` copy is running that ``giveWay()`` may interrupt. An interrupt must
    /// reach the connection only then: between checkpoints it would end the next one at once.
    private let interruptible = Mutex<Bool>(false)
    /// Checkpoints interrupted by an interactive save.
    private let interrupted = Atomic<Int>(0)
    /// Whether the last checkpoint was interrupted: the next one is not.
    private let lastInterrupted = Atomic<Bool>(false)
    /// Told of each checkpoint that ran (see ``observe(_:)``).
    private let observer = Mutex<(@Sendable (CheckpointRun) -> Void)?>(nil)

    /// A checkpointer with no connection yet: requests are ignored until ``open(path:)``.
    init(logger: Logger, editsFirst: EditsFirst? = nil) {
        self.logger = logger
        self.editsFirst = editsFirst
    }

    /// Opens the checkpointer's connection to the database at `path`.
    func open(path: String) throws {
        var configuration = Configuration()
        configuration.label = "bugsquasher.sqlite.checkpointer"
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        connection.withLock { $0 = queue }
    }

    /// Replaces SQLite's automatic checkpoint on `db` (a WAL hook replaces it) with requests to
    /// this checkpointer, which must live as long as `db` may commit.
    func install(on db: Database) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        sqlite3_wal_hook(
            db.sqliteConnection,
            { context, connection, name, frames in
                guard let context else { return SQLITE_OK }
                let checkpointer = Unmanaged<BackgroundCheckpointer>.fromOpaque(context).takeUnretainedValue()
                if frames >= BackgroundCheckpointer.writerFrames {
                    // The checkpointer fell behind, or could not start the WAL over: copy what is
                    // left now, as SQLite's own hook would.
                    checkpointer.writerCheckpoints.add(1, ordering: .relaxed)
                    let start = ContinuousClock.now
                    sqlite3_wal_checkpoint(connection, name)
                    checkpointer.ran(.writer, since: start)
                } else {
                    checkpointer.committed(frames: frames)
                }
                return SQLITE_OK
            }, context)
    }

    /// A commit left `frames` pages in the WAL: requests a checkpoint when ``requestFrames``
    /// were written since the last one.
    private func committed(frames: CInt) {
        var last = checkpointedFrames.load(ordering: .relaxed)
        if frames < last {
            // The WAL started over.
            last = 0
            checkpointedFrames.store(0, ordering: .relaxed)
        }
        if frames - last >= Self.requestFrames || frames >= Self.restartFrames { request() }
    }

    /// An interactive save got the writer: a checkpoint copying now stops (SQLite checks for an
    /// interrupt between two pages) and is run again after the save's window, so that its copy
    /// and fsync do not share the machine with the save's subscribers. The pages it copied are
    /// copied again then; a checkpoint that follows an interrupted one is not interrupted, so
    /// every checkpoint ends within two tries.
    func giveWay() {
        interruptible.withLock { copying in
            if copying { connection.withLock { $0 }?.interrupt() }
        }
    }

    /// Runs a `PASSIVE` checkpoint on the checkpointer's thread, unless one is already waiting
    /// or running.
    private func request() {
        guard let queue = connection.withLock({ $0 }), !pending.exchange(true, ordering: .acquiringAndReleasing) else {
            return
        }
        queue.asyncWriteWithoutTransaction { [self] db in
            var again = false
            defer {
                pending.store(false, ordering: .releasing)
                if again { request() }
            }
            // Not while an edit's subscribers refresh (at most one window; the writer's own
            // checkpoint past `writerFrames` still bounds the WAL meanwhile).
            editsFirst?.yieldToInteractiveSaves()
            do {
                // A statement clears an interrupt that arrived as the last copy ended.
                try db.execute(sql: "SELECT 1")
                let start = ContinuousClock.now
                let mayInterrupt = editsFirst != nil && !lastInterrupted.exchange(false, ordering: .relaxed)
                interruptible.withLock { $0 = mayInterrupt }
                let passive: (Int, Int)
                do {
                    defer { interruptible.withLock { $0 = false } }
                    passive = try db.checkpoint(.passive)
                } catch let error as DatabaseError where error.resultCode == .SQLITE_INTERRUPT {
                    interrupted.add(1, ordering: .relaxed)
                    lastInterrupted.store(true, ordering: .relaxed)
                    again = true
                    return
                }
                var (walFrames, copied) = passive
                if walFrames >= Int(Self.restartFrames), copied == walFrames {
                    // Everything is copied: start the WAL over now, if no transaction is running
                    // (this connection does not wait: SQLITE_BUSY otherwise, tried again at the
                    // next request). Taking the writer for the few frames committed since the
                    // copy is much shorter than the writer's own checkpoint past `writerFrames`.
                    if (try? db.checkpoint(.restart)) != nil {
                        walFrames = 0
                        restarts.add(1, ordering: .relaxed)
                    }
                }
                checkpointedFrames.store(CInt(clamping: walFrames), ordering: .relaxed)
                completed.add(1, ordering: .relaxed)
                ran(.background, since: start)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
                // Another checkpoint runs (the writer's own, past `writerFrames`, after a large
                // save): it does this one's work; the next commit asks again.
                logger.debug("background checkpoint skipped: another checkpoint runs", metadata: ["error": "\(error)"])
            } catch {
                // The writer's own checkpoint past `writerFrames` still bounds the WAL.
                logger.warning("background checkpoint failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Calls `handler` after each checkpoint from now on (replacing the one given before).
    func observe(_ handler: @escaping @Sendable (CheckpointRun) -> Void) {
        observer.withLock { $0 = handler }
    }

    /// Tells the observer that a checkpoint run by `kind` started at `start` ended now.
    func ran(_ kind: CheckpointRun.Kind, since start: ContinuousClock.Instant) {
        let handler = observer.withLock { $0 }
        handler?(CheckpointRun(kind: kind, duration: ContinuousClock.now - start))
    }

    /// Checkpoints since the store opened.
    struct Counts: Sendable, Hashable {
        /// Background checkpoints run.
        var background: Int
        /// Background checkpoints that also started the WAL over.
        var restarts: Int
        /// Checkpoints the writer ran in its commit, past ``BackgroundCheckpointer/writerFrames``.
        var writer: Int
        /// Background checkpoints interrupted by an interactive save (and run again after it).
        var interrupted = 0
    }

    /// Waits for the checkpoints requested so far, and for the new tries of those interrupted;
    /// returns how many of each kind have run.
    func drain() -> Counts {
        if let queue = connection.withLock({ $0 }) {
            // A try interrupted before this call queues its next try behind it: wait for that
            // one too (not for checkpoints that later saves request).
            for _ in 0..<2 {
                queue.writeWithoutTransaction { _ in }
                if !pending.load(ordering: .acquiring) { break }
            }
        }
        return Counts(
            background: completed.load(ordering: .relaxed), restarts: restarts.load(ordering: .relaxed),
            writer: writerCheckpoints.load(ordering: .relaxed),
            interrupted: interrupted.load(ordering: .relaxed))
    }

    /// Closes the checkpointer's connection once the checkpoints requested so far have run.
    func close() {
        try? connection.withLock { $0 }?.close()
    }
}
