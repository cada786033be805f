import Algorithms
public import BugSquasherGraph
import CSQLiteTuning
public import Foundation
import GRDB
public import Logging
import Synchronization

/// The default incremental store: one SQLite file in WAL mode, through one GRDB `DatabasePool`.
///
/// Open one `SQLiteStore` per file per process and share it: a ``PersistentStack`` puts its main
/// and writer coordinators on the same instance, so both use the same pool (readers in parallel,
/// one writer). Saves are single transactions that check row versions (optimistic locking),
/// write rows and join tables, and append the did-save to the `bs_history` table.
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
    private let logger: Logger
    private let pool: DatabasePool
    /// Holds bulk saves back for a moment after an interactive one (see ``EditsFirst``).
    private let editsFirst: EditsFirst?
    /// Checkpoints the WAL beside the writer's commits (see ``BackgroundCheckpointer``).
    let checkpointer: BackgroundCheckpointer
    private let isNewFile: Bool
    /// The file SQLite opened: ``url`` with symlinks resolved.
    private let file: String
    /// The file the store opened, and its write-ahead log (see ``fileProblem()``).
    private let openedFile: FileIdentity?
    private let openedLog: FileIdentity?

    private struct Loaded: Sendable {
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
    private struct EntityStatements: Sendable {
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

    private func statements(for id: ObjectID, in state: Loaded) throws -> EntityStatements {
        guard let statements = state.statements[id.entityName] else {
            throw GraphError(.invalidArgument, "\(id) names entity '\(id.entityName)', which the model does not have.")
        }
        return statements
    }

    private let loaded = Mutex<Loaded?>(nil)
    private let registrations = Mutex<[ObjectID: Int]>([:])
    private let commitHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])

    public func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void) {
        commitHandlers.withLock { $0.append(handler) }
    }

    /// Opens (or creates) the store file. The model is checked by ``loadMetadata(for:)``, which a
    /// ``StoreCoordinator`` calls.
    ///
    /// - Parameter editsFirst: when given, a bulk save (``SaveChanges/isBulk``) that gets the
    ///   writer less than its window after an interactive save committed gives the writer back
    ///   and waits for the window's end, so that the interactive save's subscribers are served
    ///   first. Bulk saves then must not run on a cooperative thread (they may block for the
    ///   window).
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
        if let problem = Self.notFilesProblem(path) { throw GraphError(.invalidStore, problem) }
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
        // SQLite reads an empty file as an empty database and drops the log beside it: a store
        // file truncated to nothing would silently become a new store.
        let logSize = Self.fileSize(path + "-wal") ?? 0
        if size == 0 && logSize > 0 && !interruptedCreation {
            throw GraphError(
                .invalidStore,
                "\(path) is empty, but its write-ahead log \(path)-wal holds \(logSize) bytes: the store file was truncated or replaced, and opening it would discard the log. Restore the store file from a backup; or, to start over with an empty store, move both files away."
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
                    "The write-ahead log \(path)-wal (\(logSize) bytes) \(problem). SQLite would ignore the whole log and discard every change it holds, which can be most of the store. Restore the store and its -wal from a backup; or, to accept losing what the log holds, move \(path)-wal away and start again."
                )
            case .damagedFrames(let problem):
                throw GraphError(
                    .invalidStore,
                    "The write-ahead log \(path)-wal (\(logSize) bytes) \(problem). SQLite would apply the log only up to the damage and discard the commits after it. Restore the store and its -wal from a backup; or, to keep what comes before the damage and lose the rest, copy both files somewhere safe, run `sqlite3 \(path) 'PRAGMA wal_checkpoint(TRUNCATE)'`, and start again."
                )
            case .endsMidFrame(let problem):
                // A crash while SQLite wrote a frame, or a power loss, leaves a log cut short
                // too: SQLite discards the unfinished transaction at its end, as it should.
                logger.warning(
                    "The write-ahead log \(path)-wal \(problem): SQLite discards the incomplete transaction at its end. After a crash or power loss that is expected; otherwise the file was cut short and commits at its end are lost.",
                    metadata: ["store.path": "\(path)"])
            }
        }
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

    /// Turns SQLite's memory statistics off, once, before this process opens its first
    /// connection: with them on, every allocation SQLite makes takes a global mutex, which
    /// the writer and the readers share (nothing here reads the statistics).
    private static let tuneSQLite: Void = {
        _ = bugsquasher_sqlite_disable_memory_statistics()
    }()

    /// What opening the store file failed with, said for the user.
    private static func openFailure(_ error: any Error, path: String) -> GraphError {
        switch error {
        case let error as DatabaseError where error.resultCode == .SQLITE_NOTADB:
            GraphError(
                .invalidStore, "\(path) is not an SQLite database. Move it away, or point the store at another file.",
                cause: error)
        case let error as DatabaseError:
            GraphError(
                .storeIO,
                "Could not open the store at \(path) (SQLite: \(error.message ?? "\(error.resultCode)")). \(openAdvice(error.resultCode, path: path))",
                cause: error)
        default:
            GraphError(
                .storeIO,
                "Could not open the store at \(path) (\(error)): check that the directory exists and is writable by this user.",
                cause: error)
        }
    }

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

    /// The file `path` names: a symlink's target (resolved also when the target does not exist
    /// yet, so a store is created where its link points), or `path` itself.
    public static func resolvedPath(_ path: String) -> String {
        if let real = realpath(path, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        // A dangling link: where it points, from the link's directory, with that resolved.
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) else { return path }
        let directory = (path as NSString).deletingLastPathComponent
        let absolute = target.hasPrefix("/") ? target : directory + "/" + target
        let parent = (absolute as NSString).deletingLastPathComponent
        guard let real = realpath(parent, nil) else { return absolute }
        defer { free(real) }
        return String(cString: real) + "/" + (absolute as NSString).lastPathComponent
    }

    /// The size of the file `path` names (through symlinks), or `nil` when there is none.
    private static func fileSize(_ path: String) -> Int? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return Int(status.st_size)
    }

    /// Why the store at `path` (symlinks resolved) cannot be opened when it, its write-ahead
    /// log or its shared-memory index exists and is not a regular file — a directory, a FIFO,
    /// which SQLite would report as something else or block on — or `nil`.
    public static func notFilesProblem(_ path: String) -> String? {
        for (companion, what) in [
            (path, "the store"), (path + "-wal", "its write-ahead log"), (path + "-shm", "its shared-memory index"),
        ] {
            if let kind = notRegularFile(companion) {
                return
                    "\(companion), \(what), is \(kind), not a file. Move it away, or point the store at another file."
            }
        }
        return nil
    }

    /// What `path` is when it exists and is not a regular file ("a directory", "a FIFO"), or `nil`.
    private static func notRegularFile(_ path: String) -> String? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        switch status.st_mode & S_IFMT {
        case S_IFREG: return nil
        case S_IFDIR: return "a directory"
        case S_IFIFO: return "a FIFO (named pipe)"
        case S_IFSOCK: return "a socket"
        case S_IFCHR, S_IFBLK: return "a device"
        default: return "not a regular file"
        }
    }

    /// What to do when SQLite cannot open the store, by its result code.
    private static func openAdvice(_ code: ResultCode, path: String) -> String {
        switch code.primaryResultCode {
        case .SQLITE_CORRUPT:
            "The file is damaged: restore it from a backup, or move it away to start with an empty store and re-import."
        case .SQLITE_FULL: "The disk is full: free space on the file system of \(path)."
        case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN, .SQLITE_AUTH:
            attributeProblem(path).map { $0 + "." }
                ?? "Check that the directory exists and that this user may write the file and its -wal and -shm companions (a -shm left read-only by another user blocks the open)."
        // A full disk fails the open of a store whose log or index cannot grow as an I/O error.
        default:
            fileSystemProblem(path).map { "The store cannot grow: \($0)." }
                ?? attributeProblem(path).map { $0 + "." }
                ?? "Check that the directory exists and is writable by this user, and that the disk is sound."
        }
    }

    deinit {
        // The pool's connections go first: the checkpointer must outlive every commit.
        try? pool.close()
        checkpointer.close()
    }

    // MARK: Metadata

    public func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata {
        if let current = loaded.withLock({ $0 }) {
            guard current.model.versionHash == model.versionHash else {
                throw GraphError(
                    .incompatibleModel,
                    "\(url.path) is already open with another model in this process; use one model per store.")
            }
            return current.metadata
        }
        let metadata: StoreMetadata = try wrap("open the store") {
            try pool.barrierWriteWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    guard try db.tableExists("bs_metadata") else {
                        guard try isEmpty(db) else {
                            throw GraphError(
                                .invalidStore,
                                "\(url.path) is an SQLite database but not a BugSquasher store (it has no bs_metadata table). Point the store at a new or empty file."
                            )
                        }
                        // A store's tables can live in its write-ahead log alone until the first
                        // checkpoint: a store file copied without its -wal, or whose -wal was lost,
                        // has a header and no tables. Created anew, it would be served as an empty
                        // store in place of the one that was there.
                        guard isNewFile else {
                            throw GraphError(
                                .invalidStore,
                                "\(url.path) is an SQLite file with no tables, so it is not a new store: its tables were in a write-ahead log (\(url.path)-wal) that is missing or was not applied, for example a store file copied without its -wal. Restore the store together with its -wal from a backup; or, if the store was created moments ago and squasherd stopped before its first save, delete the file to start over."
                            )
                        }
                        try SQLSchema.create(model, in: db)
                        let metadata = StoreMetadata(
                            storeIdentifier: UUID().uuidString, storeType: storeType,
                            modelVersionHash: model.versionHash)
                        try write(metadata, schema: model.schema, in: db)
                        logger.info(
                            "created store",
                            metadata: ["store.path": "\(url.path)", "store.id": "\(metadata.storeIdentifier)"])
                        return .commit
                    }
                    return .commit
                }
                if isNewFile {
                    // The new tables are committed (to the write-ahead log, which SQLite applies
                    // on every open): from here on, a store file without tables is one whose log
                    // was lost, and is refused.
                    try? FileManager.default.removeItem(atPath: Self.creationMarkerPath(for: file))
                }
                let metadata = try readAndMigrate(model: model, db: db)
                let expected = try SQLSchema.expected(model)
                let rebuilt = try SQLSchema.recreateMissingIndexes(expected, in: db)
                if !rebuilt.isEmpty {
                    logger.notice(
                        "re-created indexes the store lacked",
                        metadata: ["store.path": "\(url.path)", "store.indexes": "\(rebuilt.joined(separator: ", "))"])
                }
                let missing = try SQLSchema.missing(expected, in: db)
                guard missing.isEmpty else {
                    throw GraphError(
                        .invalidStore,
                        "\(url.path) does not have the tables its model needs (missing: \(missing.prefix(5).joined(separator: ", "))\(missing.count > 5 ? ", …" : "")); it was changed outside BugSquasher. Restore it from a backup, or move it away to start with an empty store and re-import."
                    )
                }
                // Tokens are never reused: a history whose newest saves were deleted by hand would
                // hand their tokens' successors to new saves, and a subscriber resuming after one
                // of the deleted tokens would skip saves without a word.
                let issued =
                    try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'bs_history'") ?? 0
                let newest = try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0
                guard issued <= newest else {
                    throw GraphError(
                        .invalidStore,
                        "\(url.path) has lost the newest saves of its history: tokens \(newest + 1) to \(issued) were issued but their rows are gone (deleted outside BugSquasher), so subscribers that saw them would skip saves. Restore the store from a backup."
                    )
                }
                return metadata
            }
        }
        loaded.withLock { $0 = Loaded(model: model, metadata: metadata) }
        return metadata
    }

    private func isEmpty(_ db: Database) throws -> Bool {
        try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'") == 0
    }

    private func write(_ metadata: StoreMetadata, schema: [EntitySchema], in db: Database) throws {
        let schemaJSON = String(decoding: try JSONEncoder().encode(schema), as: UTF8.self)
        for (key, value) in [
            ("storeIdentifier", metadata.storeIdentifier), ("storeType", metadata.storeType),
            ("modelVersionHash", metadata.modelVersionHash), ("modelSchema", schemaJSON),
        ] {
            try db.execute(
                sql: "INSERT OR REPLACE INTO bs_metadata(key, value) VALUES (?, ?)", arguments: [key, value])
        }
    }

    private func readAndMigrate(model: ManagedObjectModel, db: Database) throws -> StoreMetadata {
        let rows = try Row.fetchAll(db, sql: "SELECT key, value FROM bs_metadata")
        let values = Dictionary(
            rows.map { ($0["key"] as String, $0["value"] as String) }, uniquingKeysWith: { a, _ in a })
        guard let identifier = values["storeIdentifier"], let type = values["storeType"],
            let hash = values["modelVersionHash"],
            let schemaJSON = values["modelSchema"]
        else {
            throw GraphError(
                .invalidStore,
                "\(url.path) has damaged metadata (bs_metadata is missing keys). Restore the file from a backup, or re-import into a new store."
            )
        }
        guard type == storeType else {
            throw GraphError(.invalidStore, "\(url.path) is a '\(type)' store, not an SQLite store.")
        }
        var metadata = StoreMetadata(storeIdentifier: identifier, storeType: type, modelVersionHash: hash)
        guard hash != model.versionHash else { return metadata }
        let stored: [EntitySchema]
        do {
            stored = try JSONDecoder().decode([EntitySchema].self, from: Data(schemaJSON.utf8))
        } catch {
            throw GraphError(
                .invalidStore,
                "\(url.path) has a model description that cannot be read; restore the file from a backup.", cause: error
            )
        }
        let migration = try ModelMigration.plan(from: stored, to: model)
        try db.inTransaction(.immediate) {
            try SQLSchema.migrate(migration, in: db)
            metadata.modelVersionHash = model.versionHash
            try write(metadata, schema: model.schema, in: db)
            return .commit
        }
        logger.info(
            "migrated store",
            metadata: [
                "store.path": "\(url.path)",
                "added.attributes": "\(migration.addedAttributes.mapValues { $0.map(\.name) })",
            ])
        return metadata
    }

    private func requireLoaded() throws -> Loaded {
        guard let current = loaded.withLock({ $0 }) else {
            throw GraphError(
                .invalidStore,
                "SQLite store at \(url.path) used before loadMetadata(for:); open it through a StoreCoordinator.")
        }
        return current
    }

    // MARK: Requests

    public func execute(_ request: any StoreRequest) throws -> StoreResult {
        switch request {
        case let fetch as FetchDescription: return .fetched(try self.fetch(fetch))
        case let save as SaveChanges: return .saved(try self.save(save))
        default: throw unsupported(request)
        }
    }

    private func fetch(_ request: FetchDescription) throws -> StoreFetchResult {
        let state = try requireLoaded()
        let entity = try state.model.requireEntity(request.entityName)
        var query = SQLQuery(model: state.model, entity: entity, storeIdentifier: state.metadata.storeIdentifier)
        let sql = try query.select(request)
        let arguments = StatementArguments(query.arguments)
        let store = state.metadata.storeIdentifier
        return try wrap("fetch \(entity.name)") {
            try pool.read { db in
                let statement = query.isCacheable ? try db.cachedStatement(sql: sql) : try db.makeStatement(sql: sql)
                switch request.resultType {
                case .count:
                    return .count(try Int.fetchOne(statement, arguments: arguments) ?? 0)
                case .objectIDs:
                    let keys = try Int64.fetchAll(statement, arguments: arguments)
                    return .objectIDs(keys.map { ObjectID(store: store, entity: entity.name, primaryKey: $0) })
                case .rows:
                    var rows: [StoreRow] = []
                    let cursor = try Row.fetchCursor(statement, arguments: arguments)
                    while let row = try cursor.next() {
                        rows.append(Self.decode(row, entity: entity, store: store, model: state.model))
                    }
                    return .rows(rows)
                }
            }
        }
    }

    private static func decode(_ row: Row, entity: EntityDescription, store: String, model: ManagedObjectModel)
        -> StoreRow
    {
        let pk: Int64 = row[0]
        let version: Int64 = row[1]
        var attributes: [Value] = []
        attributes.reserveCapacity(entity.attributes.count)
        for (index, attribute) in entity.attributes.enumerated() {
            attributes.append(Value(row[index + 2] as DatabaseValue, as: attribute.type))
        }
        let base = entity.attributes.count + 2
        let toOne = entity.toOneRelationships.enumerated().map { index, relationship -> ObjectID? in
            (row[base + index] as Int64?).map {
                ObjectID(store: store, entity: relationship.destination, primaryKey: $0)
            }
        }
        return StoreRow(
            objectID: ObjectID(store: store, entity: entity.name, primaryKey: pk),
            snapshot: RowSnapshot(version: version, attributes: attributes, toOne: toOne))
    }

    // MARK: Save

    /// Runs an insert or update of one row; a clash with the entity's unique index becomes a
    /// ``GraphError/Code/constraintViolation`` that names the key and what to do.
    private static func executeKeepingKeysUnique(
        _ statement: consuming BoundStatement, entity: EntityDescription, attributes: [Value], updating: Bool
    ) throws {
        do {
            try statement.execute()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            let key =
                entity.uniqueKey.flatMap { entity.attributeIndex[$0] }.map {
                    "\(entity.uniqueKey!) = \(attributes[$0])"
                } ?? "its key"
            let remedy =
                updating
                ? "choose a value no other \(entity.name) has, or change that one first"
                : "fetch and update the existing object instead of inserting a second one"
            throw GraphError(
                .constraintViolation, "Another \(entity.name) already has \(key); \(remedy).", cause: error)
        }
    }

    private func save(_ changes: SaveChanges) throws -> DidSave {
        let state = try requireLoaded()
        guard let editsFirst, changes.isBulk else {
            // Bulk work gives way from the start of the transaction (see `write`).
            return try wrap("save") { try writeTransaction { db in try write(changes, in: db, state: state) } }
        }
        // A bulk save that gets the writer within an interactive save's window gives it back
        // (an empty transaction) and waits outside it, so that edits are not held up meanwhile.
        while true {
            let didSave = try wrap("save") {
                try pool.write { db -> DidSave? in
                    editsFirst.pause() > 0 ? nil : try write(changes, in: db, state: state)
                }
            }
            if let didSave { return didSave }
            editsFirst.yieldToInteractiveSaves()
        }
    }

    // One edit runs through far less here than a context's fetch and save: one transaction
    // reads the row and writes it (see ``AttributeEditable``).
    public func edit(_ id: ObjectID, attributes: [String: Value]) throws -> DidSave? {
        let state = try requireLoaded()
        let store = state.metadata.storeIdentifier
        guard !id.isTemporary, id.storeIdentifier == store else {
            throw GraphError(.invalidArgument, "\(id) is not an object of this store.")
        }
        let sql = try statements(for: id, in: state)
        let entity = sql.entity
        var changes: [(index: Int, value: Value)] = []
        for (name, value) in attributes.sorted(by: { $0.key < $1.key }) {
            guard let index = entity.attributeIndex[name] else {
                throw GraphError(.invalidArgument, "\(entity.name) has no attribute '\(name)'.")
            }
            if let problem = entity.attributes[index].problem(storing: value, in: entity.name, of: id) {
                throw GraphError(.validation, "The save was refused: \(problem).")
            }
            changes.append((index, value))
        }
        return try wrap("save") {
            try writeTransaction { db -> DidSave? in
                guard let current = try currentRow(id, sql: sql, store: store, model: state.model, db: db) else {
                    throw GraphError(.objectNotFound, "\(id) does not exist (it was deleted).")
                }
                var row = SaveChanges.Row(
                    objectID: id, expectedVersion: current.version, attributes: current.attributes,
                    toOne: current.toOne, changedKeys: [])
                for (index, value) in changes where row.attributes[index] != value {
                    row.attributes[index] = value
                    row.changedKeys.append(entity.attributes[index].name)
                }
                // Nothing changes: nothing is written, and no window opens for bulk work.
                guard !row.changedKeys.isEmpty else { return nil }
                var save = SaveChanges()
                save.updated = [row]
                return try write(save, in: db, state: state)
            }
        }
    }

    /// Writes a save's changes in the transaction of `db`: rows, links and the history row; the
    /// commit observers are called once it commits.
    private func write(_ changes: SaveChanges, in db: Database, state: Loaded) throws -> DidSave {
        // An interactive save: bulk work gives way from now, so that the import steps under way
        // reach a yield point before the did-save goes out, and again from the commit (below).
        let interactive = changes.isBulk ? nil : editsFirst
        if let interactive {
            interactive.openWindow()
            checkpointer.giveWay()
        }
        let model = state.model
        let store = state.metadata.storeIdentifier
        var didSave = DidSave(token: .zero, storeIdentifier: store)
        var conflicts: [MergeConflict] = []
        for row in changes.updated {
            let sql = try statements(for: row.objectID, in: state)
            let columns = sql.changedColumns(row.changedKeys)
            var statement = BoundStatement(try db.cachedStatement(sql: sql.update(columns: columns)))
            for column in columns {
                if column < row.attributes.count {
                    statement.bind(row.attributes[column])
                } else {
                    statement.bind(row.toOne[column - row.attributes.count]?.key)
                }
            }
            statement.bind(row.objectID.key)
            statement.bind(row.expectedVersion)
            try Self.executeKeepingKeysUnique(statement, entity: sql.entity, attributes: row.attributes, updating: true)
            if db.changesCount == 0 {
                conflicts.append(
                    MergeConflict(
                        objectID: row.objectID, cachedVersion: row.expectedVersion,
                        persisted: try currentRow(row.objectID, sql: sql, store: store, model: model, db: db)))
            } else {
                let snapshot = RowSnapshot(
                    version: row.expectedVersion + 1, attributes: row.attributes, toOne: row.toOne)
                didSave.updated.append(
                    ObjectChange(
                        objectID: row.objectID, version: snapshot.version, changedKeys: row.changedKeys,
                        values: snapshot))
            }
        }
        for deletion in changes.deleted {
            let sql = try statements(for: deletion.objectID, in: state)
            let entity = sql.entity
            let statement = try db.cachedStatement(sql: sql.delete)
            try statement.execute(arguments: [deletion.objectID.key, deletion.expectedVersion])
            if db.changesCount == 0,
                let current = try currentRow(deletion.objectID, sql: sql, store: store, model: model, db: db)
            {
                conflicts.append(
                    MergeConflict(
                        objectID: deletion.objectID, cachedVersion: deletion.expectedVersion, persisted: current))
                continue
            }
            try deleteLinks(of: deletion.objectID, entity: entity, model: model, db: db)
            didSave.deleted.append(
                ObjectChange(objectID: deletion.objectID, version: deletion.expectedVersion, changedKeys: []))
        }
        guard conflicts.isEmpty else {
            throw GraphError(
                .mergeConflict, "\(conflicts.count) object(s) changed in the store since this context loaded them.",
                conflicts: conflicts)
        }
        // Each entity's insert statement is looked up once per save, not once per row (GRDB's
        // statement cache hashes the whole SQL text).
        var inserts = ByEntity<(entity: EntityDescription, statement: Statement)>()
        for row in changes.inserted {
            let insert = inserts[
                try inserts.index(of: row.objectID.entityName) {
                    let sql = try statements(for: row.objectID, in: state)
                    return (sql.entity, try db.cachedStatement(sql: sql.insert))
                }]
            var statement = BoundStatement(insert.statement)
            statement.bind(row.objectID.key)
            for value in row.attributes { statement.bind(value) }
            for target in row.toOne { statement.bind(target?.key) }
            try Self.executeKeepingKeysUnique(
                statement, entity: insert.entity, attributes: row.attributes, updating: false)
            didSave.inserted.append(
                ObjectChange(
                    objectID: row.objectID, version: 1, changedKeys: [],
                    values: RowSnapshot(version: 1, attributes: row.attributes, toOne: row.toOne)))
        }
        for link in changes.linksRemoved {
            try db.cachedStatement(
                sql:
                    "DELETE FROM \(SQLSchema.joinTable(owner: link.source.entityName, relationship: link.relationship)) WHERE src = ? AND dst = ?"
            )
            .execute(arguments: [link.source.key, link.destination.key])
        }
        for link in changes.linksAdded {
            try db.cachedStatement(
                sql:
                    "INSERT OR IGNORE INTO \(SQLSchema.joinTable(owner: link.source.entityName, relationship: link.relationship)) (src, dst) VALUES (?, ?)"
            )
            .execute(arguments: [link.source.key, link.destination.key])
        }
        try db.cachedStatement(sql: "INSERT INTO bs_history (committed_at, payload) VALUES (?, ?)")
            .execute(arguments: [Date().timeIntervalSince1970, HistoryCoding.encode(didSave)])
        didSave.token = HistoryToken(rawValue: db.lastInsertedRowID)
        let handlers = commitHandlers.withLock { $0 }
        if !handlers.isEmpty || interactive != nil {
            // Runs on the writer after the commit, serialized with every other write: the
            // observers see saves in token order; a rollback hands off nothing. The window
            // bulk work gives way for starts before the did-save goes to the subscribers.
            let committed = didSave
            db.afterNextTransaction(onCommit: { _ in
                interactive?.openWindow()
                for handler in handlers { handler(committed) }
            })
        }
        return didSave
    }

    private func currentRow(
        _ id: ObjectID, sql: EntityStatements, store: String, model: ManagedObjectModel, db: Database
    ) throws -> RowSnapshot? {
        try Row.fetchOne(db.cachedStatement(sql: sql.selectByKey + " = ?"), arguments: [id.key])
            .map { Self.decode($0, entity: sql.entity, store: store, model: model).snapshot }
    }

    private func deleteLinks(of id: ObjectID, entity: EntityDescription, model: ManagedObjectModel, db: Database) throws
    {
        for relationship in entity.toManyRelationships {
            guard
                let inverse = model.entity(named: relationship.destination)?.relationship(named: relationship.inverse),
                inverse.isToMany
            else { continue }
            if relationship.ownsManyToManyLinks(in: entity.name) {
                try db.cachedStatement(
                    sql:
                        "DELETE FROM \(SQLSchema.joinTable(owner: entity.name, relationship: relationship.name)) WHERE src = ?"
                ).execute(arguments: [id.key])
            } else {
                try db.cachedStatement(
                    sql:
                        "DELETE FROM \(SQLSchema.joinTable(owner: relationship.destination, relationship: inverse.name)) WHERE dst = ?"
                ).execute(arguments: [id.key])
            }
        }
    }

    // MARK: Faults

    public func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        let state = try requireLoaded()
        let store = state.metadata.storeIdentifier
        let byEntity = Dictionary(
            grouping: objectIDs.filter { !$0.isTemporary && $0.storeIdentifier == store }, by: \.entityName)
        return try wrap("load values") {
            try pool.read { db in
                var result: [ObjectID: RowSnapshot] = [:]
                for (name, ids) in byEntity {
                    guard let sql = state.statements[name] else {
                        throw GraphError(
                            .invalidArgument, "\(ids[0]) names entity '\(name)', which the model does not have.")
                    }
                    for slice in ids.chunks(ofCount: 500) {
                        // A fault (one row) and a full batch reuse prepared statements.
                        let text =
                            slice.count == 1
                            ? sql.selectByKey + " = ?"
                            : sql.selectByKey + " IN (" + String(repeating: "?,", count: slice.count - 1) + "?)"
                        let statement =
                            slice.count == 1 || slice.count == 500
                            ? try db.cachedStatement(sql: text) : try db.makeStatement(sql: text)
                        let cursor = try Row.fetchCursor(statement, arguments: StatementArguments(slice.map(\.key)))
                        while let row = try cursor.next() {
                            let decoded = Self.decode(row, entity: sql.entity, store: store, model: state.model)
                            result[decoded.objectID] = decoded.snapshot
                        }
                    }
                }
                return result
            }
        }
    }

    public func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        let state = try requireLoaded()
        let model = state.model
        let (relationship, destination, inverse) = try model.toManyRelationship(name, of: objectID.entityName)
        let entity = try model.requireEntity(objectID.entityName)
        let sql: String
        if !inverse.isToMany {
            sql =
                "SELECT pk FROM \(SQLSchema.quote(destination.name)) WHERE \(SQLSchema.quote(inverse.name)) = ? ORDER BY pk"
        } else if relationship.ownsManyToManyLinks(in: entity.name) {
            sql =
                "SELECT dst FROM \(SQLSchema.joinTable(owner: entity.name, relationship: name)) WHERE src = ? ORDER BY dst"
        } else {
            sql =
                "SELECT src FROM \(SQLSchema.joinTable(owner: destination.name, relationship: inverse.name)) WHERE dst = ? ORDER BY src"
        }
        let keys = try wrap("load \(entity.name).\(name)") {
            try pool.read { db in try Int64.fetchAll(db, sql: sql, arguments: [objectID.key]) }
        }
        return keys.map { ObjectID(store: state.metadata.storeIdentifier, entity: destination.name, primaryKey: $0) }
    }

    public func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        let state = try requireLoaded()
        var counts = ByEntity<Int64>()
        for id in objectIDs { counts[counts.index(of: id.entityName) { 0 }] += 1 }
        // Each entity's first key, then the next one to hand out; in the order of `counts`.
        var nextKeys: [Int64] = try wrap("allocate primary keys") {
            try pool.write { db in
                try counts.entries.map { entity, count in
                    try db.execute(
                        sql: "INSERT INTO bs_sequence(entity, next) VALUES (?, 1) ON CONFLICT(entity) DO NOTHING",
                        arguments: [entity])
                    let next =
                        try Int64.fetchOne(
                            db, sql: "UPDATE bs_sequence SET next = next + ? WHERE entity = ? RETURNING next",
                            arguments: [count, entity]) ?? count + 1
                    return next - count
                }
            }
        }
        return objectIDs.map { id in
            // Every entity was counted above.
            let slot = counts.index(of: id.entityName)!
            defer { nextKeys[slot] += 1 }
            return ObjectID(store: state.metadata.storeIdentifier, entity: id.entityName, primaryKey: nextKeys[slot])
        }
    }

    // MARK: Registration

    public func didRegister(_ objectIDs: [ObjectID]) {
        registrations.withLock { counts in for id in objectIDs { counts[id, default: 0] += 1 } }
    }

    public func didUnregister(_ objectIDs: [ObjectID]) {
        registrations.withLock { counts in
            for id in objectIDs {
                let count = counts[id, default: 0] - 1
                counts[id] = count > 0 ? count : nil
            }
        }
    }

    /// How many registrations this process's contexts hold for an object.
    public func registrationCount(for objectID: ObjectID) -> Int {
        registrations.withLock { $0[objectID, default: 0] }
    }

    /// The IDs some context of this process has registered.
    public var registeredObjectIDs: Set<ObjectID> { registrations.withLock { Set($0.keys) } }

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

    /// A file's device and inode: which file a path names.
    struct FileIdentity: Equatable {
        let device: UInt64
        let inode: UInt64

        init?(path: String) {
            var status = stat()
            guard stat(path, &status) == 0 else { return nil }
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
        }
    }

    /// Why the store's path no longer names the file this store has open — the file or its
    /// write-ahead log was deleted, or replaced by another — or `nil` while it does. SQLite goes
    /// on writing to the files it has open, so saves made after that would be lost with them
    /// when the store closes.
    public func fileProblem() -> String? {
        if let openedFile {
            guard let now = FileIdentity(path: url.path) else {
                let directory = url.deletingLastPathComponent().path
                if !FileManager.default.fileExists(atPath: directory) {
                    return "the directory \(directory) (with \(url.lastPathComponent) in it) was moved or removed"
                }
                return "\(url.path) was deleted"
            }
            if now != openedFile { return "\(url.path) was replaced by another file" }
        }
        if let openedLog {
            guard let now = FileIdentity(path: file + "-wal") else {
                return "the write-ahead log \(file)-wal was deleted"
            }
            if now != openedLog { return "the write-ahead log \(file)-wal was replaced by another file" }
        }
        return nil
    }

    /// Why a file at `path` (the store, or a file beside it) cannot be written, as a person acts
    /// on it: its directory is gone, its file system is mounted read-only or has no room left
    /// (no free blocks, or no free inodes for a new file), or this user lacks the permission.
    public static func whyNotWritable(_ path: String) -> String {
        let directory = URL(filePath: path).deletingLastPathComponent().path
        if !FileManager.default.fileExists(atPath: directory) {
            return
                "its directory \(directory) no longer exists (moved or removed?); put it back, or restore the store there"
        }
        return fileSystemProblem(path) ?? attributeProblem(path)
            ?? "\(path) is not writable by this user; fix the permissions of the file and its directory"
    }

    /// What keeps the file system holding `path` from taking writes, as a person acts on it:
    /// mounted read-only, no free inodes, or no free blocks; `nil` when none of these.
    static func fileSystemProblem(_ path: String) -> String? {
        let directory = URL(filePath: path).deletingLastPathComponent().path
        var status = statvfs()
        guard statvfs(directory, &status) == 0 else { return nil }
        if status.f_flag & UInt(ST_RDONLY) != 0 {
            return
                "\(path) is on a file system mounted read-only; remount it read-write, or move the state directory to a writable one"
        }
        if status.f_files > 0, status.f_favail == 0 {
            return
                "the file system holding \(directory) has no free inodes left (too many files on it), so no file can be created there; delete files on it, or move the state directory to another file system"
        }
        if status.f_bavail == 0 {
            return
                "the file system holding \(directory) is full; free space on it, or move the state directory to another file system"
        }
        return nil
    }

    /// Why the system failed a read or write of the store at `path` (SQLite's `SQLITE_IOERR`,
    /// extended result `code`), as a person acts on it: its file system read-only (remounted so
    /// after disk errors), full or out of inodes, or one of its files marked immutable or
    /// append-only; otherwise the disk itself, with where to look.
    static func whyInputOutputFailed(_ path: String, code: Int32) -> String {
        if let problem = fileSystemProblem(path) ?? attributeProblem(path) { return problem }
        return
            "the system failed a read or write of \(path) (SQLite's disk I/O error, extended code \(code)); the kernel log (journalctl -k, or dmesg) tells whether the disk or its file system failed"
    }

    /// A file of the store at `path` (or its directory) marked immutable or append-only, as
    /// ``markProblem(of:)`` says it.
    static func attributeProblem(_ path: String) -> String? {
        markProblem(of: [path, path + "-wal", path + "-shm", URL(filePath: path).deletingLastPathComponent().path])
    }

    /// The first of `files` marked immutable or append-only (`chattr +i`, `+a`), which not even
    /// root may change, with the command that clears the mark; `nil` when none is, or when the
    /// file system has no such marks.
    public static func markProblem(of files: [String]) -> String? {
        #if os(Linux)
        let getFlags: UInt = 0x8008_6601  // FS_IOC_GETFLAGS
        let (immutable, appendOnly) = (0x10, 0x20)  // FS_IMMUTABLE_FL, FS_APPEND_FL
        for file in files {
            let fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var flags = 0
            guard withUnsafeMutablePointer(to: &flags, { ioctl(fd, getFlags, $0) }) == 0 else { continue }
            if flags & (immutable | appendOnly) != 0 {
                let mark = flags & immutable != 0 ? "immutable (chattr +i)" : "append-only (chattr +a)"
                return
                    "\(file) is marked \(mark), so not even root may change it; clear the mark with chattr -\(flags & immutable != 0 ? "i" : "a") \(file) (lsattr shows the marks)"
            }
        }
        #endif
        return nil
    }

    /// Whether `path` is on a file system mounted read-only (`ST_RDONLY`), where no permission
    /// change would help.
    public static func isOnReadOnlyFileSystem(_ path: String) -> Bool {
        var status = statvfs()
        return statvfs(path, &status) == 0 && status.f_flag & UInt(ST_RDONLY) != 0
    }

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
        try wrap("checkpoint") {
            _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        }
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
    private func writeTransaction<T>(_ body: (Database) throws -> T) throws -> T {
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

    private func wrap<T>(_ action: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as GraphError {
            throw error
        } catch let error as DatabaseError {
            switch error.resultCode {
            case .SQLITE_NOTADB, .SQLITE_CORRUPT:
                throw GraphError(
                    .invalidStore,
                    "Could not \(action): \(url.path) is damaged (\(error.message ?? "corrupt")). Restore it from a backup, or re-import into a new store.",
                    cause: error)
            case .SQLITE_FULL:
                throw GraphError(
                    .storeIO,
                    "Could not \(action): the disk holding \(url.path) is full. Free space on that file system; this save was not written, and those before it are kept.",
                    cause: error)
            case .SQLITE_BUSY, .SQLITE_LOCKED:
                throw GraphError(
                    .storeBusy,
                    "Could not \(action): another program has held the write lock of \(url.path) for more than \(Self.busyTimeoutSeconds) s (sqlite3 in an open transaction, a backup tool?). Nothing was written; retry once it lets go.",
                    cause: error)
            case .SQLITE_READONLY, .SQLITE_CANTOPEN, .SQLITE_PERM:
                throw GraphError(.storeIO, "Could not \(action): \(Self.whyNotWritable(url.path)).", cause: error)
            case .SQLITE_IOERR:
                throw GraphError(
                    .storeIO,
                    "Could not \(action): \(Self.whyInputOutputFailed(url.path, code: error.extendedResultCode.rawValue)).",
                    cause: error)
            case .SQLITE_ERROR where error.message?.contains("too many SQL variables") == true:
                // A request's fault, not the store's: said so, without the store's path.
                throw GraphError(
                    .invalidArgument,
                    "Could not \(action): the request has more values than SQLite takes in one statement (an IN list of hundreds of thousands?). Split it into requests of at most 10,000 values each.",
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
