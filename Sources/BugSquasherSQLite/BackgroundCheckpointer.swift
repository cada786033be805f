import GRDB
import GRDBSQLite
import Logging
import Synchronization

/// Copies the WAL back into the database file on a connection of its own, so that commits do
/// not pay for it.
///
/// SQLite's default (`wal_autocheckpoint = 1000`) checkpoints inside the commit that takes the
/// WAL past 1,000 pages. During an import that is every few chunks, and that commit then holds
/// the writer — and every edit waiting for it — for the copy and its fsync: measured here, a
/// chunk's commit took 0.75 ms at the median and 11 ms at the 90th percentile. Instead, the
/// writer's WAL hook asks this checkpointer for a `PASSIVE` checkpoint each time the WAL has grown
/// by ``requestFrames`` pages since the last one, which runs beside the writer's transactions on
/// another thread.
///
/// SQLite starts the WAL over only after a checkpoint that copied all of it, which one running
/// beside commits rarely does; so past ``writerFrames`` the writer checkpoints in its commit as
/// before — copying only the pages the checkpointer has not yet — and the WAL starts over. The
/// WAL therefore stays near ``writerFrames`` pages (16 MiB with 4 KiB pages), a little past it
/// when the writer's checkpoint finds a background one running and tries again at its next
/// commit (21 MiB at most in the stress test).
final class BackgroundCheckpointer: Sendable {
    /// WAL pages written since the last background checkpoint past which the next is requested.
    static let requestFrames: CInt = 1_000
    /// WAL pages after a commit past which the writer checkpoints itself.
    static let writerFrames: CInt = 4_096

    private let connection = Mutex<DatabaseQueue?>(nil)
    private let pending = Atomic<Bool>(false)
    private let completed = Atomic<Int>(0)
    /// The WAL's length, in pages, when the last background checkpoint ran.
    private let checkpointedFrames = Atomic<CInt>(0)
    private let logger: Logger

    /// A checkpointer with no connection yet: requests are ignored until ``open(path:)``.
    init(logger: Logger) {
        self.logger = logger
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
        sqlite3_wal_hook(db.sqliteConnection, { context, connection, name, frames in
            if frames >= BackgroundCheckpointer.writerFrames {
                // The checkpointer fell behind, or the WAL needs to start over: copy what is
                // left now, as SQLite's own hook would.
                sqlite3_wal_checkpoint(connection, name)
            } else if let context {
                Unmanaged<BackgroundCheckpointer>.fromOpaque(context).takeUnretainedValue().committed(frames: frames)
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
        if frames - last >= Self.requestFrames { request() }
    }

    /// Runs a `PASSIVE` checkpoint on the checkpointer's thread, unless one is already waiting
    /// or running.
    private func request() {
        guard let queue = connection.withLock({ $0 }), !pending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.asyncWriteWithoutTransaction { [self] db in
            defer { pending.store(false, ordering: .releasing) }
            do {
                let (walFrames, _) = try db.checkpoint(.passive)
                checkpointedFrames.store(CInt(clamping: walFrames), ordering: .relaxed)
                completed.add(1, ordering: .relaxed)
            } catch {
                // The writer's own checkpoint past `writerFrames` still bounds the WAL.
                logger.warning("background checkpoint failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Waits for the checkpoints requested so far; returns how many have run since the store
    /// opened.
    func drain() -> Int {
        connection.withLock { $0 }?.writeWithoutTransaction { _ in }
        return completed.load(ordering: .relaxed)
    }

    /// Closes the checkpointer's connection once the checkpoints requested so far have run.
    func close() {
        try? connection.withLock { $0 }?.close()
    }
}
