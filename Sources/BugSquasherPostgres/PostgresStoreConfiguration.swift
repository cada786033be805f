import Foundation

/// Where a ``PostgresStore`` finds its database: a server (TCP, or a Unix socket directory), a
/// database, a user, and the schema that holds the store's tables.
///
/// ```swift
/// let configuration = try PostgresStoreConfiguration(url: "postgresql://squasherd@db.example:5432/bugs")
/// let local = try PostgresStoreConfiguration(url: "postgresql:///bugs?host=/run/postgresql&user=squasherd")
/// ```
public struct PostgresStoreConfiguration: Sendable, Hashable {
    /// The server's host name or address; `nil` when ``socketDirectory`` is given.
    public var host: String?
    /// The directory of the server's Unix socket (`/run/postgresql`); `nil` for TCP.
    public var socketDirectory: String?
    /// The server's port (also part of the Unix socket's name).
    public var port: Int
    /// The user to connect as.
    public var user: String
    /// The password, when the server asks for one.
    public var password: String?
    /// The database.
    public var database: String
    /// The schema (namespace) of the store's tables: one database can hold several stores.
    public var schema: String

    /// Creates a configuration.
    public init(
        host: String? = nil, socketDirectory: String? = nil, port: Int = 5432, user: String,
        password: String? = nil, database: String, schema: String = "public"
    ) {
        self.host = host
        self.socketDirectory = socketDirectory
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.schema = schema
    }

    /// Reads a libpq-style connection URL: `postgresql://user:password@host:port/database`, with
    /// the query parameters `host` (a socket directory when it starts with `/`), `port`, `user`,
    /// `password` and `schema` (BugSquasher's own: the schema of the store's tables).
    public init(url text: String) throws {
        guard let components = URLComponents(string: text), ["postgresql", "postgres"].contains(components.scheme)
        else {
            throw PostgresStoreError.configuration(
                "'\(text)' is not a PostgreSQL URL.",
                advice: "Write it as postgresql://user@host:port/database (or ?host=/run/postgresql for a Unix socket)."
            )
        }
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        let known: Set<String> = ["host", "port", "user", "password", "schema", "dbname"]
        if let unknown = query.keys.sorted().first(where: { !known.contains($0) }) {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL has a parameter '\(unknown)' BugSquasher does not read.",
                advice: "Use host, port, user, password, dbname or schema.")
        }
        let host = query["host"] ?? components.host.flatMap { $0.isEmpty ? nil : $0 }
        let portText = query["port"] ?? components.port.map(String.init)
        guard let port = portText.map({ Int($0) }) ?? 5432, (1...65535).contains(port) else {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL's port '\(portText ?? "")' is not a port number.", advice: "Give 1 to 65535.")
        }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard let database = query["dbname"] ?? (path.isEmpty ? nil : path) else {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL '\(text)' names no database.", advice: "Add it as its path: postgresql://host/bugs."
            )
        }
        guard let user = query["user"] ?? components.user, !user.isEmpty else {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL '\(text)' names no user.", advice: "Add it: postgresql://user@host/database.")
        }
        let isSocket = host.map { $0.hasPrefix("/") } ?? true
        self.init(
            host: isSocket ? nil : host, socketDirectory: isSocket ? (host ?? "/run/postgresql") : nil, port: port,
            user: user, password: query["password"] ?? components.password, database: database,
            schema: query["schema"] ?? "public")
    }

    /// The server's address as people write it, for messages.
    public var address: String {
        if let socketDirectory { return "\(socketDirectory)/.s.PGSQL.\(port)" }
        return "\(host ?? "localhost"):\(port)"
    }
}
