import Algorithms
public import BugSquasherGraph
import CSQLiteTuning
public import Foundation
import GRDB
public import Logging
import Synchronization

/// The default incremental store: one SQLite file in WAL mode, through one GRDB `DatabasePool`.
/// Open one per file per process and share it (a ``PersistentStack`` puts both its coordinators on
/// one): readers run in parallel, beside one writer. A save is one transaction that checks row
/// versions, writes rows and join tables, and appends the did-save to `bs_history`.
///
/// ```swift
/// let store = try SQLiteStore(url: URL(filePath: "/var/lib/squasherd/bugs.sqlite"))
/// let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
/// ```
public final class SQLiteStore: IncrementalStore, CommitObservable, AttributeEditable, SelfChecking, Checkpointing,
    FileBacked
{
    public var storeType: String { "SQLite" }

    /// The store file.
    public let url: URL
    let logger: Logger
    let pool: DatabasePool
    /// Holds bulk saves back for a moment after an interactive one (see ``EditsFirst``).
    let editsFirst: EditsFirst?
    /// Checkpoints the WAL beside the writer's commits (see ``BackgroundCheckpointer``).
    let checkpointer: BackgroundCheckpointer
    let isNewFile: Bool
    /// The file SQLite opened: ``url`` with symlinks resolved.
    let file: String
    /// The file the store opened, and its write-ahead log (see ``fileProblem()``).
    let openedFile: FileIdentity?
    let openedLog: FileIdentity?

    struct Loaded: Sendable {
        let model: ManagedObjectModel
        let metadata: StoreMetadata
        let statements: [String: EntityStatements]

        init(model: ManagedObjectModel, metadata: StoreMetadata) {
            self.model = model
            self.metadata = metadata
            statements = Dictionary(uniqueKeysWithValues: model.entities.map { ($0.name, EntityStatements($0)) })
        }
    }

    /// The SQL of an entity's writes and row reads, built once when the store opens.
    struct EntityStatements: Sendable {
        let entity: EntityDescription
        /// `SELECT <row columns> FROM <table> t WHERE pk`: completed with ` = ?` or ` IN (...)`.
        let selectByKey: String
        let insert: String
        let delete: String
        private let table: String
        /// `"name" = ?` for each attribute, then each to-one relationship.
        private let assignments: [String]
        /// A column's position in ``assignments`` (and in a row's attributes + to-ones) by name.
        private let columnIndex: [String: Int]

        init(_ entity: EntityDescription) {
            self.entity = entity
            table = SQLSchema.quote(entity.name)
            let names = entity.attributes.map(\.name) + entity.toOneRelationships.map(\.name)
            insert =
                "INSERT INTO \(table) (pk, _version, \(names.map(SQLSchema.quote).joined(separator: ", "))) VALUES (?, 1\(String(repeating: ", ?", count: names.count)))"
            assignments = names.map { "\(SQLSchema.quote($0)) = ?" }
            columnIndex = Dictionary(names.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            delete = "DELETE FROM \(table) WHERE pk = ? AND _version = ?"
            selectByKey = "SELECT \(SQLSchema.columns(of: entity)) FROM \(table) t WHERE pk"
        }

        /// The columns an update writes: those of the changed keys, in entity order (to-many
        /// relationships have none). Writing only these leaves the indexes of unchanged columns
        /// alone; the version check makes sure the other columns hold what the context saw.
        func changedColumns(_ changedKeys: [String]) -> [Int] {
            changedKeys.compactMap { columnIndex[$0] }.sorted()
        }

        /// `UPDATE` of some columns, with the version check: arguments are the columns' values,
        /// then pk, then the expected version.
        func update(columns: [Int]) -> String {
            var sql = "UPDATE \(table) SET _version = _version + 1"
            for column in columns { sql += ", " + assignments[column] }
            return sql + " WHERE pk = ? AND _version = ?"
        }
    }

    func statements(for id: ObjectID, in state: Loaded) throws -> EntityStatements {
        guard let statements = state.statements[id.entityName] else {
            throw GraphError(.invalidArgument, "\(id) names entity '\(id.entityName)', which the model does not have.")
        }
        return statements
    }

    let loaded = Mutex<Loaded?>(nil)
    private let registrations = RegistrationCounts()
    let commitHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])

    public func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void) {
        commitHandlers.withLock { $0.append(handler) }
    }

    /// Opens (or creates) the store file; ``loadMetadata(for:)``, which a ``StoreCoordinator`` calls,
    /// checks the model.
    ///
    /// - Parameter editsFirst: when given, a bulk save (``SaveChanges/isBulk``) that gets the writer
    ///   within its window gives it back and waits for the window's end: bulk saves must then not run
    ///   on a cooperative thread.
    /// - Throws: ``GraphError/Code/storeIO`` when the file cannot be opened (missing directory,
    ///   no permission), ``GraphError/Code/invalidStore`` when it is not an SQLite database.
    public init(url: URL, logger: Logger = Logger(label: "bugsquasher.sqlite"), editsFirst: EditsFirst? = nil) throws {
        Self.tuneSQLite
        self.url = url
        self.logger = logger
        self.editsFirst = editsFirst
        // SQLite opens the file a symlink points to and keeps the -wal and -shm beside it, so
        // every check below looks there too.
        let path = Self.resolvedPath(url.path)
        file = path
        if let why = Self.notFilesProblem(path) {
            throw GraphError(.invalidStore, why.problem + ".", advice: why.advice)
        }
        let size = Self.fileSize(path) ?? 0
        // A store is created under a marker file, removed once its tables are committed: a
        // process killed while it created the store leaves the marker beside a file with no
        // tables (or none at all), which is then created again instead of refused.
        let marker = Self.creationMarkerPath(for: path)
        if !FileManager.default.fileExists(atPath: path) {
            _ = FileManager.default.createFile(atPath: marker, contents: nil)
        }
        let interruptedCreation = FileManager.default.fileExists(atPath: marker)
        if interruptedCreation && size > 0 {
            logger.notice(
                "creating the store again: the process that began creating it stopped before it was done",
                metadata: ["store.path": "\(path)"])
        }
        isNewFile = size == 0 || interruptedCreation
        try Self.checkLog(of: path, storeSize: size, interruptedCreation: interruptedCreation, logger: logger)
        var configuration = Configuration()
        configuration.busyMode = .timeout(TimeInterval(Self.busyTimeoutSeconds))
        configuration.label = "bugsquasher.sqlite"
        let checkpointer = BackgroundCheckpointer(logger: logger, editsFirst: editsFirst)
        self.checkpointer = checkpointer
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            checkpointer.install(on: db)
        }
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            openedFile = FileIdentity(path: url.path)
            // Opening in WAL mode creates the log; SQLite keeps that file until it closes.
            openedLog = FileIdentity(path: path + "-wal")
            try checkpointer.open(path: path)
        } catch {
            // No store file was made: no creation is under way.
            if !FileManager.default.fileExists(atPath: path) { try? FileManager.default.removeItem(atPath: marker) }
            throw Self.openFailure(error, path: path)
        }
    }

    /// Refuses a store file truncated to nothing beside its write-ahead log, and a log whose
    /// header or frames are damaged; warns of a log cut short in its last frame.
    private static func checkLog(of path: String, storeSize size: Int, interruptedCreation: Bool, logger: Logger)
        throws
    {
        // SQLite reads an empty file as an empty database and drops the log beside it: a store
        // file truncated to nothing would silently become a new store.
        let logSize = Self.fileSize(path + "-wal") ?? 0
        if size == 0 && logSize > 0 && !interruptedCreation {
            throw GraphError(
                .invalidStore,
                "\(path) is empty, but its write-ahead log \(path)-wal holds \(logSize) bytes: the store file was truncated or replaced, and opening it would discard the log.",
                advice:
                    "Restore the store file from a backup; or, to start over with an empty store, move both files away."
            )
        }
        // A log no longer than its header holds no frame: SQLite reads it as empty.
        if logSize > WriteAheadLog.headerSize {
            switch WriteAheadLog.check(path: path + "-wal") {
            case .sound:
                break
            case .damagedHeader(let problem):
                throw GraphError(
                    .invalidStore,
                    "The write-ahead log \(path)-wal (\(logSize) bytes) \(problem). SQLite would ignore the whole log and discard every change it holds, which can be most of the store.",
                    advice:
                        "Restore the store and its -wal from a backup; or, to accept losing what the log holds, move \(path)-wal away and start again."
                )
            case .damagedFrames(let problem):
                throw GraphError(
                    .invalidStore,
                    "The write-ahead log \(path)-wal (\(logSize) bytes) \(problem). SQLite would apply the log only up to the damage and discard the commits after it.",
                    advice:
                        "Restore the store and its -wal from a backup; or, to keep what comes before the damage and lose the rest, copy both files somewhere safe, run `sqlite3 \(path) 'PRAGMA wal_checkpoint(TRUNCATE)'`, and start again."
                )
            case .endsMidFrame(let problem):
                // A crash while SQLite wrote a frame, or a power loss, leaves a log cut short
                // too: SQLite discards the unfinished transaction at its end, as it should.
                logger.warning(
                    "The write-ahead log \(path)-wal \(problem): SQLite discards the incomplete transaction at its end. After a crash or power loss that is expected; otherwise the file was cut short and commits at its end are lost.",
                    metadata: ["store.path": "\(path)"])
            }
        }
    }

    /// Turns SQLite's memory statistics off, once, before this process opens its first
    /// connection: with them on, every allocation SQLite makes takes a global mutex, which
    /// the writer and the readers share (nothing here reads the statistics).
    private static let tuneSQLite: Void = {
        _ = bugsquasher_sqlite_disable_memory_statistics()
    }()

    /// The file that marks the store at `path` as being created: it exists from before the store
    /// file does until the new store's tables are committed. A store file with no tables beside
    /// it is a creation that was interrupted, not a store whose write-ahead log was lost.
    public static func creationMarkerPath(for path: String) -> String { path + "-creating" }

    /// Whether the write-ahead log beside the store at `path` is long enough to hold a frame,
    /// and so perhaps a commit: its header, a frame's header and the smallest page. SQLite
    /// leaves an empty log behind at times, which holds nothing.
    public static func logMayHoldCommits(_ path: String) -> Bool {
        let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int ?? 0
        return size >= WriteAheadLog.headerSize + WriteAheadLog.frameHeaderSize + 512
    }

    /// How long a write waits for another program's write lock on the store.
    static let busyTimeoutSeconds = 30

    deinit {
        // The pool's connections go first: the checkpointer must outlive every commit.
        try? pool.close()
        checkpointer.close()
    }

    // MARK: Registration

    public func didRegister(_ objectIDs: [ObjectID]) { registrations.register(objectIDs) }

    public func didUnregister(_ objectIDs: [ObjectID]) { registrations.unregister(objectIDs) }

    /// How many registrations this process's contexts hold for an object.
    public func registrationCount(for objectID: ObjectID) -> Int { registrations.count(for: objectID) }

    /// The IDs some context of this process has registered.
    public var registeredObjectIDs: Set<ObjectID> { registrations.objectIDs }

    // MARK: History

    public func changes(after token: HistoryToken, limit: Int) throws -> [DidSave] {
        _ = try requireLoaded()
        return try wrap("read history") {
            try pool.read { db in
                let rows = try Row.fetchAll(
                    db, sql: "SELECT token, payload FROM bs_history WHERE token > ? ORDER BY token LIMIT ?",
                    arguments: [token.rawValue, limit])
                let store = try requireLoaded().metadata.storeIdentifier
                return try rows.map { row in
                    try HistoryCoding.decode(
                        row["payload"] as Data, store: store, token: HistoryToken(rawValue: row["token"]))
                }
            }
        }
    }

    public func currentHistoryToken() throws -> HistoryToken {
        try wrap("read history") {
            try pool.read { db in
                HistoryToken(rawValue: try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0)
            }
        }
    }

    // MARK: Maintenance

    /// Writes a consistent copy of the open store to a new file at `path`, with SQLite's online
    /// backup: what a store whose file was deleted while it was open still holds.
    public func writeCopy(to path: String) throws {
        try wrap("copy the store to \(path)") {
            let copy = try DatabaseQueue(path: path)
            try pool.backup(to: copy)
            try copy.close()
        }
    }

    /// Moves the WAL's content into the main file and truncates the WAL (for a clean shutdown).
    public func checkpoint() throws {
        // A background checkpoint still running holds SQLite's checkpoint lock, and a TRUNCATE
        // checkpoint meeting it fails at once with SQLITE_BUSY instead of waiting (a daemon
        // stopped right after a large save logged "checkpoint failed"): let it finish first.
        _ = checkpointer.drain()
        let start = ContinuousClock.now
        try wrap("checkpoint") {
            _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        }
        checkpointer.ran(.requested, since: start)
    }

    /// Calls `handler` after each checkpoint: the background ones, those a commit ran itself,
    /// and ``checkpoint()``'s.
    public func observeCheckpoints(_ handler: @escaping @Sendable (CheckpointRun) -> Void) {
        checkpointer.observe(handler)
    }

    /// Waits for the background checkpoints requested so far; returns how many of each kind
    /// have run since the store opened (for tests).
    func checkpointCounts() -> BackgroundCheckpointer.Counts {
        checkpointer.drain()
    }

    /// Runs SQLite's `PRAGMA quick_check` (structure, not index contents) and returns its
    /// findings (`["ok"]` when sound): fast enough for every start.
    public func quickCheck() throws -> [String] {
        try wrap("check the store") {
            try pool.read { db in try String.fetchAll(db, sql: "PRAGMA quick_check(20)") }
        }
    }

    /// Runs SQLite's `PRAGMA integrity_check` and returns its findings (`["ok"]` when sound).
    public func integrityCheck() throws -> [String] {
        try wrap("check integrity") {
            try pool.read { db in try String.fetchAll(db, sql: "PRAGMA integrity_check") }
        }
    }

    /// `pool.write`, with its `BEGIN IMMEDIATE` and `COMMIT` prepared once: GRDB compiles both
    /// for every transaction, about 30 µs of an edit's 0.5 ms on the write path (measured with
    /// `perf` on edits 20 ms apart, caches cold as they are between a user's edits). Rolls back
    /// when `body` or the commit fails, unless SQLite has already.
    func writeTransaction<T>(_ body: (Database) throws -> T) throws -> T {
        try pool.writeWithoutTransaction { db in
            try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
            do {
                let result = try body(db)
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
                return result
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
                throw error
            }
        }
    }

    func wrap<T>(_ action: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as GraphError {
            throw error
        } catch let error as DatabaseError {
            switch error.resultCode {
            case .SQLITE_NOTADB, .SQLITE_CORRUPT:
                throw GraphError(
                    .invalidStore,
                    "Could not \(action): \(url.path) is damaged (\(error.message ?? "corrupt")).",
                    advice: "Restore it from a backup, or re-import into a new store.",
                    cause: error)
            case .SQLITE_FULL:
                throw GraphError(
                    .storeIO,
                    "Could not \(action): the disk holding \(url.path) is full.",
                    advice: "Free space on that file system; this save was not written, and those before it are kept.",
                    cause: error)
            case .SQLITE_BUSY, .SQLITE_LOCKED:
                throw GraphError(
                    .storeBusy,
                    "Could not \(action): another program has held the write lock of \(url.path) for more than \(Self.busyTimeoutSeconds) s (sqlite3 in an open transaction, a backup tool?). Nothing was written.",
                    advice: "Retry once it lets go.",
                    cause: error)
            case .SQLITE_READONLY, .SQLITE_CANTOPEN, .SQLITE_PERM:
                let why = Self.whyNotWritable(url.path)
                throw GraphError(.storeIO, "Could not \(action): \(why.problem).", advice: why.advice, cause: error)
            case .SQLITE_IOERR:
                let why = Self.whyInputOutputFailed(url.path, code: error.extendedResultCode.rawValue)
                throw GraphError(.storeIO, "Could not \(action): \(why.problem).", advice: why.advice, cause: error)
            case .SQLITE_ERROR where error.message?.contains("too many SQL variables") == true:
                // A request's fault, not the store's: said so, without the store's path.
                throw GraphError(
                    .invalidArgument,
                    "Could not \(action): the request has more values than SQLite takes in one statement (an IN list of hundreds of thousands?).",
                    advice: "Split it into requests of at most 10,000 values each.",
                    cause: error)
            default:
                throw GraphError(
                    .storeIO, "Could not \(action) in \(url.path): \(error.message ?? "\(error.resultCode)").",
                    cause: error)
            }
        } catch {
            throw GraphError(.storeIO, "Could not \(action) in \(url.path).", cause: error)
        }
    }
}
