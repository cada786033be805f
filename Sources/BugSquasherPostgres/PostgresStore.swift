public import BugSquasherGraph
import Foundation
public import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// The incremental store on PostgreSQL: the SQLite store's layout and meaning in a database
/// that several daemons on several hosts share. History tokens come from one counter row that
/// every save updates last, just before it commits, so they are gapless and in commit order
/// whichever process commits.
/// Why it is built this way: docs/DESIGN-NOTES.md, "PostgreSQL tokens come from one counter row".
///
/// ```swift
/// let store = PostgresStore(configuration: try PostgresStoreConfiguration(url: "postgresql://squasherd@db/bugs"))
/// let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
/// ```
public final class PostgresStore: IncrementalStore, CommitObservable, SharedStore, Sendable {
    public var storeType: String { "PostgreSQL" }

    /// Where the database is.
    public let configuration: PostgresStoreConfiguration
    let logger: Logger

    struct Loaded: Sendable {
        let model: ManagedObjectModel
        let metadata: StoreMetadata
    }

    let loaded = Mutex<Loaded?>(nil)
    /// The connection of saves and everything else that writes or follows the history, and the
    /// connection of fetches, so that an importer fetches its next chunk's rows while the chunk
    /// before saves. Each is opened on first use and again after it broke; its lock serializes
    /// its statements and transactions in this process.
    private let writing = ConnectionSlot(id: 1)
    private let reading = ConnectionSlot(id: 2)
    /// The names of the statements this process prepares on its connections.
    let preparedNames = PreparedNames()
    private let registrations = RegistrationCounts()
    let commitHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])
    /// The observers of the other processes' saves only (``SharedStore``).
    let otherHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])
    /// Which of other processes' inserts this process's observers look for (``SharedStore``).
    let insertInterest = Mutex<(@Sendable (String) -> InsertInterest)?>(nil)
    /// The observers of saves pruned before this process read them (``SharedStore``).
    let gapHandlers = Mutex<[@Sendable (HistoryToken) -> Void]>([])
    /// The newest token handed to the commit observers; read and written with the connection
    /// held, so that deliveries are serialized in token order.
    let delivered = Mutex<Int64?>(nil)
    /// The newest token of this process's own saves, set as each commits, before it and the
    /// saves before it are delivered (with the writing connection held): a hint up to here
    /// needs no read of the history.
    let committedHere = Mutex<Int64>(0)
    /// The rows of objects recent saves updated, as those saves left them, kept in token order
    /// with the deliveries (see ``remember(_:)``): an edit starts from one without reading it.
    let recentRows = Mutex<[ObjectID: RowSnapshot]>([:])
    /// Follows the other processes' commits once someone observes commits.
    private let follower = Mutex<HistoryFollower?>(nil)
    /// How many threads hold or wait for the writing connection.
    private let writingHolders = Atomic<Int>(0)
    /// What an interactive save opens, here or in another process (see ``init(configuration:logger:editsFirst:)``).
    let editsFirst: EditsFirst?
    /// This process's row among the daemons attached, and whether the server answers.
    let health = Mutex(Health())

    /// A store in the database `configuration` names; nothing connects before the coordinator
    /// loads it.
    /// With `editsFirst`, bulk work of this process gives way to interactive saves, this
    /// process's and the other processes' alike (``EditsFirst``; the hint of another process's
    /// save says whether it was bulk).
    public init(
        configuration: PostgresStoreConfiguration, logger: Logger = Logger(label: "bugsquasher.postgres"),
        editsFirst: EditsFirst? = nil
    ) {
        self.configuration = configuration
        self.logger = logger
        self.editsFirst = editsFirst
    }

    deinit {
        follower.withLock { $0?.stop() }
        for slot in [writing, reading] {
            guard let open = slot.connection.withLock({ $0 }) else { continue }
            // The last reference can go on the connections' event loop (a task of the store's
            // that ran there ends), which must not wait for itself: there the close goes on alone.
            if open.eventLoop.inEventLoop {
                let _: EventLoopFuture<Void> = open.close()
            } else {
                try? open.close().blockingValue()
            }
        }
    }

    /// Calls `handler` after each commit to the store, this process's and every other's
    /// (other daemons on other hosts), serially and in token order, from the next one on. The
    /// other processes' saves come without values.
    public func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void) {
        commitHandlers.withLock { $0.append(handler) }
        startFollowing()
    }

    public func observeCommitsOfOthers(_ handler: @escaping @Sendable (DidSave) -> Void) {
        otherHandlers.withLock { $0.append(handler) }
        startFollowing()
    }

    public func screenInsertsOfOthers(by interest: @escaping @Sendable (_ entity: String) -> InsertInterest) {
        insertInterest.withLock { $0 = interest }
    }

    /// Starts the follower of the other processes' saves, from the store's newest token.
    func startFollowing() {
        if delivered.withLock({ $0 }) == nil, let token = try? currentHistoryToken() {
            delivered.withLock { $0 = $0 ?? token.rawValue }
        }
        follower.withLock { follower in
            guard follower == nil else { return }
            follower = HistoryFollower(store: self)
        }
    }

    // MARK: The connection

    /// Runs `body` on the store's writing connection, holding it: statements of other threads
    /// wait. A connection that broke is dropped, so that the next call opens a new one; the error
    /// becomes a ``GraphError/Code/storeIO`` that says which server and what happened.
    func withConnection<T>(_ action: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        writingHolders.add(1, ordering: .sequentiallyConsistent)
        defer {
            writingHolders.subtract(1, ordering: .sequentiallyConsistent)
            follower.withLock { $0 }?.lookAfterRelease()
        }
        return try with(writing, action, body)
    }

    /// Whether a thread holds or waits for the writing connection (other than the follower
    /// delivering other processes' saves): it looks at the hints that came meanwhile when it
    /// lets go (see ``HistoryFollower``).
    var isWriting: Bool { writingHolders.load(ordering: .sequentiallyConsistent) > 0 }

    /// Runs `body` on the store's reading connection, as ``withConnection(_:_:)`` on the writing
    /// one: for statements that only read rows, which see every commit that has returned.
    func withReadingConnection<T>(_ action: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        try with(reading, action, body)
    }

    private func with<T>(_ slot: ConnectionSlot, _ action: String, _ body: (PostgresConnection) throws -> T) throws
        -> T
    {
        try slot.connection.withLock { current in
            do {
                let open: PostgresConnection
                if let current, !current.isClosed {
                    open = current
                } else {
                    open = try connect(id: slot.id)
                    current = open
                    slot.live.withLock { $0 = open }
                }
                return try body(open)
            } catch let error as GraphError {
                throw error
            } catch let error as PostgresStoreError {
                throw GraphError(.storeIO, error.statement, advice: error.advice)
            } catch {
                if let open = current, open.isClosed { current = nil }
                throw storeError(action, error)
            }
        }
    }

    /// Closes the store's connections from any thread: a statement waiting on one fails, and the
    /// next one connects again.
    func closeOpenConnection() {
        for slot in [writing, reading] {
            slot.live.withLock { open in
                if let open, !open.isClosed { open.close().whenComplete { _ in } }
                open = nil
            }
        }
    }

    /// How postgres-nio connects to the server: the password read, the TLS context made, and
    /// a server that does not answer given up on after five seconds.
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let password = try configuration.resolvedPassword()
        var connection: PostgresConnection.Configuration
        if let directory = configuration.socketDirectory {
            connection = .init(
                unixSocketPath: "\(directory)/.s.PGSQL.\(configuration.port)", username: configuration.user,
                password: password, database: configuration.database)
        } else {
            connection = .init(
                host: configuration.host ?? "localhost", port: configuration.port, username: configuration.user,
                password: password, database: configuration.database, tls: try tlsContext())
        }
        connection.options.connectTimeout = .seconds(5)
        return connection
    }

    private func tlsContext() throws -> PostgresConnection.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch configuration.tls {
        case .disable: return .disable
        case .require: tls.certificateVerification = .none
        case .verify(let caFile, let checkName):
            tls.certificateVerification = checkName ? .fullVerification : .noHostnameVerification
            if let caFile { tls.trustRoots = .file(caFile) }
        }
        return .require(try NIOSSLContext(configuration: tls))
    }

    /// The channel of the store's commit hints: `NOTIFY` after each save, with its token.
    var hintChannel: String { String(decoding: Array("bs_\(configuration.schema)".utf8.prefix(63)), as: UTF8.self) }

    private func connect(id: Int) throws -> PostgresConnection {
        let connection = try PostgresConnection.connect(
            on: PostgresEventLoops.group.next(), configuration: try connectionConfiguration(), id: id, logger: logger
        ).blockingValue()
        _ = try connection.query(
            PostgresQuery(unsafeSQL: "SET search_path TO \(PostgresSchema.quote(configuration.schema))"),
            logger: logger
        ).blockingValue()
        return connection
    }

    /// What went wrong with the server, for a person.
    func storeError(_ action: String, _ error: any Error) -> GraphError {
        if let psql = error as? PSQLError, let message = psql.serverInfo?[.message] {
            return GraphError(
                .storeIO, "Could not \(action): PostgreSQL at \(configuration.address) said: \(message).",
                advice: "See the server's log for more.", cause: psql)
        }
        return GraphError(
            .storeIO,
            "Could not \(action): PostgreSQL at \(configuration.address) cannot be reached (\(Self.describe(error))).",
            advice: "Check that the server runs and that this host may connect to it (pg_hba.conf).")
    }

    /// A failure with no words from the server, in words: postgres-nio's own description hides
    /// what happened (its code and the underlying error say it).
    static func describe(_ error: any Error) -> String {
        guard let psql = error as? PSQLError else { return "\(error)" }
        switch psql.code {
        case .clientClosedConnection: return "the connection was closed here: the server had stopped answering"
        case .serverClosedConnection: return "the server closed the connection (it stopped or restarted)"
        default: return psql.underlying.map { "\(psql.code): \($0)" } ?? "\(psql.code)"
        }
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
        let store = try requireLoaded().metadata.storeIdentifier
        return try withConnection("read the history") { connection in
            let rows = try run(
                "SELECT token, payload FROM bs_history WHERE token > $1 ORDER BY token LIMIT $2",
                [.int64(token.rawValue), .int64(Int64(limit))], on: connection)
            return try rows.map { row in
                let cells = row.makeRandomAccess()
                return try HistoryCoding.decode(
                    try cells[1].decode(Data.self), store: store,
                    token: HistoryToken(rawValue: try cells[0].decode(Int64.self)))
            }
        }
    }

    public func currentHistoryToken() throws -> HistoryToken {
        _ = try requireLoaded()
        return try withConnection("read the history") { connection in
            let rows = try run("SELECT token FROM bs_counter WHERE id = 1", [], on: connection)
            return HistoryToken(rawValue: try rows.first?.decode(Int64.self) ?? 0)
        }
    }

    /// Hands the commit observers the saves in the history after the last one delivered (and
    /// before `limit`, when given): the other processes' saves, which this one learns of from the
    /// history. Runs with the connection held, so deliveries never interleave.
    func deliverHistory(
        before limit: Int64?, store: String, read page: HistoryPage? = nil, on connection: PostgresConnection
    ) throws {
        let handlers = commitHandlers.withLock { $0 } + otherHandlers.withLock { $0 }
        guard var last = delivered.withLock({ $0 }) else {
            if let limit { delivered.withLock { $0 = limit - 1 } }
            return
        }
        // A page the listener read is used when it goes on from the last save delivered.
        var page = page.map { HistoryPage(records: $0.records.filter { $0.token > last }, isWhole: $0.isWhole) }
        if page?.records.first?.token != last + 1 { page = nil }
        while limit.map({ last + 1 < $0 }) ?? true {
            let current = try page ?? readHistory(after: last, before: limit, on: connection)
            page = nil
            for record in current.records {
                // Tokens have no gaps: a missing one was pruned (retention) before it was read.
                if record.token > last + 1 { reportGap(after: last, through: record.token - 1) }
                var didSave = try HistoryCoding.decode(
                    record.payload, store: store, token: HistoryToken(rawValue: record.token),
                    model: loaded.withLock { $0?.model })
                try attachValues(to: &didSave, on: connection)
                remember(didSave)
                for handler in handlers { handler(didSave) }
                last = record.token
                delivered.withLock { $0 = record.token }
            }
            if current.isWhole { break }
        }
    }

    /// The statement of ``readHistory(after:before:on:)`` and ``readHistory(on:)``, on the
    /// history table as `table` names it.
    private static func historyPageSQL(_ table: String) -> String {
        "SELECT token, payload FROM \(table) WHERE token > $1 AND token < $2 ORDER BY token LIMIT 1000"
    }

    /// The history rows after `last` (and before `limit`), a page of at most 1,000.
    private func readHistory(after last: Int64, before limit: Int64?, on connection: PostgresConnection) throws
        -> HistoryPage
    {
        try HistoryPage(
            runPrepared(Self.historyPageSQL("bs_history"), [.int64(last), .int64(limit ?? .max)], on: connection))
    }

    /// The history rows after the last save delivered, read on the event loop that received a
    /// hint (the listener's connection), so that the follower's thread finds them read when it
    /// wakes instead of asking that loop to read them and waiting again; `nil` before the first
    /// delivery or when the read fails (the follower then reads as usual).
    func readHistory(on connection: PostgresConnection) async -> HistoryPage? {
        guard let last = delivered.withLock({ $0 }) else { return nil }
        return try? await readHistory(after: last, on: connection)
    }

    /// The history rows after `last`, a page of at most 1,000, read on a connection that may not
    /// have the store's schema on its search path (the listening connection has not).
    func readHistory(after last: Int64, on connection: PostgresConnection) async throws -> HistoryPage {
        let sql = Self.historyPageSQL("\(PostgresSchema.quote(configuration.schema)).bs_history")
        return try HistoryPage(await executePrepared(sql, [.int64(last), .int64(.max)], on: connection))
    }

    /// Saves of at most this many objects write their updated rows into the history, so that
    /// the other daemons need not read them (an edit's row, in one round trip instead of two).
    static let valuesInHistoryUpToObjects = 16

    /// The history row's payload of `didSave`.
    static func historyPayload(_ didSave: DidSave) -> Data {
        HistoryCoding.encode(didSave, withValues: didSave.objectCount <= valuesInHistoryUpToObjects)
    }

    /// Saves of other processes with at most this many objects are delivered with their values.
    static let valuesUpToObjects = 1_000
    /// Larger saves are delivered with the values of at most this many inserts of the entities
    /// whose every insert is looked for (``InsertInterest/every``; an import's chunk of bugs).
    static let insertValuesUpToObjects = 5_000

    /// The values of another process's save, read once here for every observer of this process
    /// (the history keeps none but a small save's own rows): a small save's changes, and the
    /// inserts the observers look for (``screenInsertsOfOthers(by:)``), which the server
    /// screens; those they do not look for are left out. A row a later save changed keeps its
    /// values out (they would not be this save's).
    private func attachValues(to didSave: inout DidSave, on connection: PostgresConnection) throws {
        guard let state = loaded.withLock({ $0 }) else { return }
        let isSmall = didSave.objectCount <= Self.valuesUpToObjects
        // Small saves carry their updated rows (see `historyPayload`): those are not read again.
        var reading = isSmall ? didSave.updated.filter { $0.values == nil }.map(\.objectID) : []
        var rows: [ObjectID: RowSnapshot] = [:]
        var leftOut = Set<ObjectID>()
        let insertsByEntity = Dictionary(
            grouping: didSave.inserted.filter { $0.values == nil }, by: \.objectID.entityName)
        let interest = insertInterest.withLock { $0 }
        var every: [ObjectID] = []
        for (entity, inserts) in insertsByEntity {
            // Without a screen, a small save's inserts are read and a large one's left without values.
            guard let interest else {
                if isSmall { every += inserts.map(\.objectID) }
                continue
            }
            switch interest(entity) {
            case .none: leftOut.formUnion(inserts.map(\.objectID))
            case .every: every += inserts.map(\.objectID)
            case .matching(let predicate):
                guard let found = try screened(inserts, of: entity, matching: predicate, state: state, on: connection)
                else { continue }
                for insert in inserts where found[insert.objectID] == nil { leftOut.insert(insert.objectID) }
                rows.merge(found) { $1 }
            }
        }
        if isSmall || every.count <= Self.insertValuesUpToObjects { reading += every }
        if !reading.isEmpty { rows.merge(try self.rows(for: reading, state: state, on: connection)) { $1 } }
        if !leftOut.isEmpty { didSave.inserted.removeAll { leftOut.contains($0.objectID) } }
        for index in didSave.inserted.indices {
            let change = didSave.inserted[index]
            if let row = rows[change.objectID], row.version == change.version { didSave.inserted[index].values = row }
        }
        for index in didSave.updated.indices {
            let change = didSave.updated[index]
            if let row = rows[change.objectID], row.version == change.version { didSave.updated[index].values = row }
        }
    }

    /// The rows of `inserts` (of `entity`) that match `predicate`, screened by the server. A row
    /// changed again since matches or not as it is now (the caller keeps it without values).
    /// `nil` when the predicate cannot be screened (the server or the store refused it): the
    /// inserts then stay, without values, and pass every watch, rather than stop the delivery of
    /// every later save. A broken connection throws, and the delivery is tried again.
    private func screened(
        _ inserts: [ObjectChange], of entity: String, matching predicate: ObjectPredicate, state: Loaded,
        on connection: PostgresConnection
    ) throws -> [ObjectID: RowSnapshot]? {
        let refusal: String
        do {
            let description = try state.model.requireEntity(entity)
            var select = PostgresSelect(
                model: state.model, entity: description, storeIdentifier: state.metadata.storeIdentifier)
            // Unnamed: the predicate changes as subscribers come and go (see `PreparedNames`).
            let sql = try select.rows(among: inserts.map(\.objectID.key), matching: predicate)
            let rows = try run(sql, binds: select.bindings, on: connection)
            return try Self.snapshots(rows, entity: description, store: state.metadata.storeIdentifier)
        } catch let error as PSQLError where error.serverInfo != nil {
            refusal = error.serverInfo?[.message] ?? "\(error.code)"
        } catch let error as GraphError {
            refusal = "\(error)"
        }
        logger.warning(
            "could not match other daemons' inserts against the subscribers' watches; they go to every watch",
            metadata: ["entity": "\(entity)", "error": "\(refusal)"])
        return nil
    }

    /// Delivers the saves other processes committed since the last one delivered (the follower
    /// calls this on each hint, and once a second). With `hinted`, the newest token hinted: once
    /// the connection is free, a save of this process may have delivered it meanwhile (its hint
    /// can arrive before the save's own answer), and then there is nothing to read.
    /// With `page`, the history as the listener read it after the hint (see
    /// ``readHistory(on:)``).
    func deliverCommitsOfOthers(hinted: Int64? = nil, read page: HistoryPage? = nil) {
        guard isObserved, let store = loaded.withLock({ $0?.metadata.storeIdentifier }) else { return }
        do {
            // Not counted as writing (`isWriting`): while this delivers one save, the listener
            // reads the history a new hint announces, for the next round to find read.
            try with(writing, "read the history") { connection in
                if let hinted, isDelivered(through: hinted) { return }
                try deliverHistory(before: nil, store: store, read: page, on: connection)
                // The listener may have read the page before the newest save hinted committed.
                if let hinted, !isDelivered(through: hinted) {
                    try deliverHistory(before: nil, store: store, on: connection)
                }
            }
        } catch {
            logger.warning("could not read other daemons' saves; retrying", metadata: ["error": "\(error)"])
        }
    }

    /// The most rows ``recentRows`` keeps, and the most objects a save may update for its rows
    /// to be kept (an import's chunk would only push out the rows of edits).
    static let recentRowLimit = 1_024
    static let rememberedUpdatesPerSave = 16

    /// Keeps the rows `didSave` updated, with their values, and forgets those it updated without
    /// values or deleted. Called as each save is delivered, in token order, so that a row kept is
    /// the newest one delivered; an edit that starts from a row another process changed since
    /// fails its version check and reads again.
    func remember(_ didSave: DidSave) {
        guard !didSave.updated.isEmpty || !didSave.deleted.isEmpty else { return }
        recentRows.withLock { rows in
            for change in didSave.deleted { rows[change.objectID] = nil }
            let keep = didSave.updated.count <= Self.rememberedUpdatesPerSave
            for change in didSave.updated { rows[change.objectID] = keep ? change.values : nil }
            if rows.count > Self.recentRowLimit { rows.removeAll(keepingCapacity: true) }
        }
    }

    /// Whether the saves up to `token` are delivered, or being delivered by the save of this
    /// process that committed it.
    func isDelivered(through token: Int64) -> Bool {
        token <= max(delivered.withLock { $0 ?? .max }, committedHere.withLock { $0 })
    }

    /// Whether anyone observes commits, this process's or the others'.
    var isObserved: Bool { !commitHandlers.withLock({ $0.isEmpty }) || !otherHandlers.withLock({ $0.isEmpty }) }

    func requireLoaded() throws -> Loaded {
        guard let current = loaded.withLock({ $0 }) else {
            throw GraphError(
                .invalidStore, "The PostgreSQL store at \(configuration.address) was used before loadMetadata(for:).",
                advice: "Open it through a StoreCoordinator.")
        }
        return current
    }
}

/// One of the store's connections: the connection, whose lock serializes its statements, and
/// the same connection reachable while a statement holds that lock, so that a heartbeat that
/// went unanswered can close it (see ``PostgresStore/markUnreachable(_:hung:)``).
final class ConnectionSlot: Sendable {
    let id: Int
    let connection = Mutex<PostgresConnection?>(nil)
    let live = Mutex<PostgresConnection?>(nil)

    init(id: Int) { self.id = id }
}

/// Rows of the history in token order, as read by one statement.
struct HistoryPage: Sendable {
    /// One history row: a save's token and its encoded did-save.
    struct Record: Sendable {
        let token: Int64
        let payload: Data
    }

    var records: [Record]
    /// Whether the page holds every row there was after its first (it is shorter than a page).
    var isWhole: Bool
}

extension HistoryPage {
    /// The rows of a `token, payload` statement limited to 1,000.
    init(_ rows: [PostgresRow]) throws {
        records = try rows.map { row in
            let cells = row.makeRandomAccess()
            return Record(token: try cells[0].decode(Int64.self), payload: try cells[1].decode(Data.self))
        }
        isWhole = rows.count < 1_000
    }
}
