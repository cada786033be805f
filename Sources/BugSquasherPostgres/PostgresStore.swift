public import BugSquasherGraph
import Foundation
public import Logging
import NIOCore
import NIOPosix
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
public final class PostgresStore: IncrementalStore, CommitObservable, Sendable {
    public var storeType: String { "PostgreSQL" }

    /// Where the database is.
    public let configuration: PostgresStoreConfiguration
    let logger: Logger

    struct Loaded: Sendable {
        let model: ManagedObjectModel
        let metadata: StoreMetadata
    }

    let loaded = Mutex<Loaded?>(nil)
    /// The one connection, opened on first use and again after it broke; its lock serializes
    /// the store's statements and transactions in this process.
    private let connection = Mutex<PostgresConnection?>(nil)
    private let registrations = Mutex<[ObjectID: Int]>([:])
    let commitHandlers = Mutex<[@Sendable (DidSave) -> Void]>([])

    /// A store in the database `configuration` names; nothing connects before the coordinator
    /// loads it.
    public init(configuration: PostgresStoreConfiguration, logger: Logger = Logger(label: "bugsquasher.postgres")) {
        self.configuration = configuration
        self.logger = logger
    }

    deinit {
        if let open = connection.withLock({ $0 }) { try? open.close().blockingValue() }
    }

    public func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void) {
        commitHandlers.withLock { $0.append(handler) }
    }

    // MARK: The connection

    /// Runs `body` on the store's connection, holding it: statements of other threads wait.
    /// A connection that broke is dropped, so that the next call opens a new one; the error
    /// becomes a ``GraphError/Code/storeIO`` that says which server and what happened.
    func withConnection<T>(_ action: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        try connection.withLock { current in
            do {
                let open: PostgresConnection
                if let current, !current.isClosed {
                    open = current
                } else {
                    open = try connect()
                    current = open
                }
                return try body(open)
            } catch let error as GraphError {
                throw error
            } catch {
                if let open = current, open.isClosed { current = nil }
                throw storeError(action, error)
            }
        }
    }

    private func connect() throws -> PostgresConnection {
        let connectionConfiguration: PostgresConnection.Configuration
        if let directory = configuration.socketDirectory {
            connectionConfiguration = .init(
                unixSocketPath: "\(directory)/.s.PGSQL.\(configuration.port)", username: configuration.user,
                password: configuration.password, database: configuration.database)
        } else {
            connectionConfiguration = .init(
                host: configuration.host ?? "localhost", port: configuration.port, username: configuration.user,
                password: configuration.password, database: configuration.database, tls: .disable)
        }
        let connection = try PostgresConnection.connect(
            on: PostgresEventLoops.group.next(), configuration: connectionConfiguration, id: 1,
            logger: logger
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
            .storeIO, "Could not \(action): PostgreSQL at \(configuration.address) cannot be reached (\(error)).",
            advice: "Check that the server runs and that this host may connect to it (pg_hba.conf).")
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

    func requireLoaded() throws -> Loaded {
        guard let current = loaded.withLock({ $0 }) else {
            throw GraphError(
                .invalidStore, "The PostgreSQL store at \(configuration.address) was used before loadMetadata(for:).",
                advice: "Open it through a StoreCoordinator.")
        }
        return current
    }
}
