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
    /// Whether and how the connection is encrypted (libpq's `sslmode`).
    public var tls: TLSMode = .disable
    /// A file whose content is the password (`password_file=`; a systemd credential, say).
    public var passwordFile: String?
    /// The name the server shows for this program's sessions (`application_name` in
    /// `pg_stat_activity`), so that an administrator can tell them, and end one program's.
    public var applicationName = "BugSquasher"

    /// libpq's `sslmode`, as far as BugSquasher follows it.
    public enum TLSMode: Sendable, Hashable {
        /// No TLS (`disable`; a Unix socket never uses TLS).
        case disable
        /// Encrypted, the server not verified (`require`).
        case require
        /// Encrypted, the server's certificate verified against `caFile` (the system's roots
        /// when `nil`), its name too when `checkName` (`verify-full`; `verify-ca` without it).
        case verify(caFile: String?, checkName: Bool)
    }

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
    /// `password`, `dbname`, `sslmode` (`disable` when absent) and `sslrootcert`, and
    /// BugSquasher's own `password_file` (a file holding the password alone) and `schema` (the
    /// schema of the store's tables). Any other parameter is refused, by name.
    public init(url text: String) throws {
        guard let components = URLComponents(string: text), ["postgresql", "postgres"].contains(components.scheme)
        else {
            throw PostgresStoreError.configuration(
                "'\(text)' is not a PostgreSQL URL.",
                advice: "Write it as postgresql://user@host:port/database (or ?host=/run/postgresql for a Unix socket)."
            )
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] {
            let (name, value) = (item.name, item.value ?? "")
            // Which of two values counts differs between programs: neither is taken.
            guard query.updateValue(value, forKey: name) == nil else {
                throw PostgresStoreError.configuration(
                    "The PostgreSQL URL gives the parameter '\(name)' more than once.", advice: "Give it once.")
            }
        }
        let known: Set<String> = [
            "host", "port", "user", "password", "schema", "dbname", "sslmode", "sslrootcert", "password_file",
        ]
        if let unknown = query.keys.sorted().first(where: { !known.contains($0) }) {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL has a parameter '\(unknown)' BugSquasher does not read.",
                advice: "Use host, port, user, password_file, dbname, schema, sslmode or sslrootcert.")
        }
        // An IPv6 address is written in brackets in the URL ([::1]), which are not part of it.
        let host =
            query["host"]
            ?? components.host.flatMap { host in
                host.isEmpty
                    ? nil : host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            }
        if let host, host.contains(",") {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL names several hosts (\(host)); BugSquasher connects to one.",
                advice: "Name one host; for failover, a DNS name or a proxy that follows the primary.")
        }
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
        if query["password"] != nil || components.password != nil, query["password_file"] != nil {
            throw PostgresStoreError.configuration(
                "The PostgreSQL URL gives both a password and a password_file.",
                advice: "Keep password_file= (the password out of the URL) and remove the password.")
        }
        let isSocket = host.map { $0.hasPrefix("/") } ?? true
        if isSocket, let mode = query["sslmode"], mode != "disable" {
            throw PostgresStoreError.configuration(
                "sslmode=\(mode) cannot apply to the Unix socket in \(host ?? "/run/postgresql"): PostgreSQL takes no TLS on its sockets, which only this host reaches.",
                advice: "Remove sslmode (and sslrootcert) for a socket, or connect over TCP (host=NAME) to have TLS.")
        }
        self.init(
            host: isSocket ? nil : host, socketDirectory: isSocket ? (host ?? "/run/postgresql") : nil, port: port,
            user: user, password: query["password"] ?? components.password, database: database,
            schema: query["schema"] ?? "public")
        passwordFile = query["password_file"]
        tls = try Self.tlsMode(query["sslmode"], rootCertificate: query["sslrootcert"])
    }

    /// The TLS mode of `sslmode` and `sslrootcert`.
    private static func tlsMode(_ mode: String?, rootCertificate: String?) throws -> TLSMode {
        switch mode ?? "disable" {
        case "disable": return .disable
        case "require": return .require
        case "verify-ca": return .verify(caFile: rootCertificate, checkName: false)
        case "verify-full": return .verify(caFile: rootCertificate, checkName: true)
        default:
            throw PostgresStoreError.configuration(
                "sslmode=\(mode ?? "") is not a mode BugSquasher supports.",
                advice: "Use disable, require, verify-ca or verify-full (prefer and allow are not offered).")
        }
    }

    /// The password to send: ``password``, or the content of ``passwordFile`` (its last line
    /// end left out).
    public func resolvedPassword() throws -> String? {
        guard let passwordFile else { return password }
        do {
            let text = try String(contentsOfFile: passwordFile, encoding: .utf8)
            return text.hasSuffix("\n") ? String(text.dropLast()) : text
        } catch {
            throw PostgresStoreError.configuration(
                "The PostgreSQL password file \(passwordFile) cannot be read (\(error.localizedDescription)).",
                advice: "Check the path and its permissions (with LoadCredential=, $CREDENTIALS_DIRECTORY/<name>).")
        }
    }

    /// The server's address as people write it, for messages.
    public var address: String {
        if let socketDirectory { return "\(socketDirectory)/.s.PGSQL.\(port)" }
        let host = host ?? "localhost"
        return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
