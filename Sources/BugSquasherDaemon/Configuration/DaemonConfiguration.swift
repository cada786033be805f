public import BugSquasherErrors
public import BugSquasherPostgres
import BugSquasherProtocol
public import Foundation
import Logging

/// Where squasherd keeps its store and sockets, and its limits.
///
/// Resolution, first match wins: a command-line flag; systemd's `STATE_DIRECTORY` /
/// `RUNTIME_DIRECTORY`; the configuration file (`/etc/squasherd/squasherd.conf`, or `--config`);
/// the built-in default (`./run/state` and `./run/sockets`, so that a checkout runs without any
/// configuration).
public struct DaemonConfiguration: Sendable, Hashable {
    /// Directory of the store file and the import spool.
    public var stateDirectory: String
    /// Directory of the sockets.
    public var runtimeDirectory: String
    /// Records per import chunk (one importer context and one transaction each).
    public var chunkSize: Int = 1_000
    /// The `nice` value (0–19) of the threads that decode and upsert import chunks: above 0 the
    /// scheduler runs requests and subscribers first during an import.
    public var importPriority: Int = 10
    /// How long an import gives the machine to an edit after the edit commits (`import_yield_ms`;
    /// zero: never): its decoding, upserting and chunk saves pause meanwhile, so that the edit's
    /// subscribers refresh sooner (see ``EditsFirst``).
    public var importYield: Duration = .milliseconds(20)
    /// Permissions of the read socket (subscribe and read): everyone on the machine by default.
    public var readSocketMode: Int = 0o666
    /// Permissions of the write socket (import and write): owner and group only.
    public var writeSocketMode: Int = 0o660
    /// The longest Varlink message accepted.
    public var maximumMessageSize: Int = 16 * 1024 * 1024
    /// The bytes of incomplete Varlink messages held at once over all connections (at least
    /// ``maximumMessageSize``): a connection whose message would take the total further is closed.
    public var maximumIncomingBytes: Int = 256 * 1024 * 1024
    /// The bytes of large replies (64 KiB and more) not yet read by their clients, over all
    /// connections: a connection whose reply would take the total further is closed instead.
    public var maximumOutgoingBytes: Int = 256 * 1024 * 1024
    /// The longest input record (line) accepted; longer ones are rejected.
    public var maximumRecordBytes: Int = 8 << 20
    /// Changed objects a subscriber may have pending before it is told to resync.
    public var subscriberPendingLimit: Int = 100_000
    /// The most object IDs one subscription registers.
    public var maximumRegistrationsPerSubscriber: Int = 1_000_000
    /// The most object IDs all subscriptions register together (about 400 bytes each).
    public var maximumRegistrations: Int = 5_000_000
    /// The most client connections open at once over both sockets; `nil` fits it to the file
    /// descriptor limit (that limit less what ``ConnectionLimit/reservedDescriptors(descriptorLimit:)`` keeps for the store).
    public var maximumConnections: Int?
    /// How long an upload may go without a byte before it is abandoned (its job aborted, its
    /// spool file removed), so that a client that hangs does not hold an upload slot for good.
    public var uploadIdleTimeout: Duration = .seconds(600)
    /// The log level (`trace` … `critical`).
    public var logLevel: String = "info"
    /// Days the history keeps a save (`nil`: for ever); a subscriber away longer refetches what
    /// it holds (docs/OPERATIONS.md, "History retention").
    public var historyRetentionDays: Int? = 30
    /// The most saves the history keeps (`nil`: no limit).
    public var historyRetentionSaves: Int?
    /// Where the metrics endpoint listens (`metrics_listen = HOST:PORT`); `nil`, the default,
    /// serves none (a socket systemd passes still does).
    public var metricsListen: HostAndPort?

    /// How long squasherd waits at start for a PostgreSQL server it cannot reach (`store_wait`,
    /// seconds; zero: it does not wait), trying again every few seconds; a server that answers
    /// and refuses is never waited for.
    public var storeWait: Duration = .seconds(60)

    /// The store file.
    public var storePath: String { stateDirectory + "/bugs.sqlite" }
    /// The PostgreSQL database of the store (`store = postgresql://…`); `nil` for the SQLite
    /// file in the state directory, the default.
    public var postgres: PostgresStoreConfiguration?
    /// The store, as messages name it: its file, or its PostgreSQL schema and server.
    public var storeDescription: String {
        guard let postgres else { return storePath }
        return "schema \(postgres.schema) of \(postgres.database) at \(postgres.address)"
    }
    /// The spool directory of uploaded imports.
    public var spoolDirectory: String { stateDirectory + "/spool" }
    /// The read socket.
    public var readSocketPath: String { runtimeDirectory + "/squasherd.sock" }
    /// The write socket.
    public var writeSocketPath: String { runtimeDirectory + "/squasherd-write.sock" }

    /// Creates a configuration.
    public init(stateDirectory: String, runtimeDirectory: String) {
        self.stateDirectory = stateDirectory
        self.runtimeDirectory = runtimeDirectory
    }

    /// The most a configuration file may hold: a few `key = value` lines take a few KiB.
    static let maximumFileBytes = 1 << 20

    /// Reads a configuration file: a regular file of at most ``maximumFileBytes``, or `/dev/null`
    /// (an empty configuration); `nil` when there is no file at `path`. Anything else (a
    /// directory too) is refused before it is opened or read: a FIFO would block the start
    /// until someone writes to it, `/dev/zero` would be read until memory runs out.
    static func readConfigurationFile(_ path: String) throws -> Data? {
        var status = stat()
        var null = stat()
        guard stat(path, &status) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw DaemonError(
                "Cannot read the configuration file \(path) (\(String(cString: strerror(errno)))).",
                advice: "Check that it is readable by this user."
            )
        }
        let kind = status.st_mode & S_IFMT
        let isNull = kind == S_IFCHR && stat("/dev/null", &null) == 0 && status.st_rdev == null.st_rdev
        guard kind == S_IFREG || isNull else { throw notRegularFile(path, kind: kind) }
        guard status.st_size <= maximumFileBytes else {
            throw DaemonError(
                "The configuration file \(path) holds \(status.st_size) bytes, more than the \(maximumFileBytes) a configuration file may have (a few key = value lines).",
                advice: "Is it the right file?"
            )
        }
        // Read through a file handle, which also reads /dev/null (String(contentsOfFile:)
        // refuses a character device with a misleading "no permission"); no more than the limit
        // even if the file grew since.
        do {
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw DaemonError(
                    "Cannot open the configuration file \(path) (\(String(cString: strerror(errno)))).",
                    advice: "Check that it is readable by this user."
                )
            }
            defer { try? handle.close() }
            return try handle.read(upToCount: maximumFileBytes) ?? Data()
        } catch let error as DaemonError {
            throw error
        } catch {
            throw DaemonError(
                "Cannot read the configuration file \(path) (\((error as NSError).localizedDescription)).",
                advice: "Check that it is readable by this user."
            )
        }
    }

    /// Why the configuration file at `path`, of file type `kind`, which is neither a regular
    /// file nor `/dev/null`, is refused.
    private static func notRegularFile(_ path: String, kind: mode_t) -> DaemonError {
        if kind == S_IFDIR {
            return DaemonError(
                "The configuration file \(path) is a directory.",
                advice: "Pass the file itself (such as \(path)/squasherd.conf)."
            )
        }
        let what =
            switch kind {
            case S_IFIFO: "a FIFO (named pipe)"
            case S_IFSOCK: "a socket"
            case S_IFCHR, S_IFBLK: "a device"
            default: "not a regular file"
            }
        return DaemonError(
            "The configuration file \(path) is \(what).",
            advice: "Pass a regular file of key = value lines, or /dev/null for an empty configuration."
        )
    }

    /// Resolves the configuration from flags, environment, file and defaults.
    ///
    /// - Throws: ``DaemonError`` when the configuration file exists but has a line that is not
    ///   `key = value` or an unknown key or a bad value.
    public static func resolve(
        stateDirectory: String?, runtimeDirectory: String?, configFile: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> DaemonConfiguration {
        for (flag, value) in [
            ("--state-directory", stateDirectory), ("--runtime-directory", runtimeDirectory), ("--config", configFile),
        ] where value?.isEmpty == true {
            throw DaemonError("\(flag) is empty.", advice: "Give a path, or leave the option out for its default.")
        }
        let file = try ConfigurationFile.read(configFile ?? "/etc/squasherd/squasherd.conf", given: configFile != nil)
        // systemd passes colon-separated lists; the first entry is ours.
        func systemd(_ name: String) -> String? { environment[name]?.split(separator: ":").first.map(String.init) }
        var configuration = DaemonConfiguration(
            stateDirectory: stateDirectory ?? systemd("STATE_DIRECTORY") ?? file.values["state_directory"]
                ?? "run/state",
            runtimeDirectory: runtimeDirectory ?? systemd("RUNTIME_DIRECTORY") ?? file.values["runtime_directory"]
                ?? "run/sockets"
        )
        configuration.postgres = try file.postgresStore()
        try configuration.applyImportSettings(of: file)
        try configuration.applyLimits(of: file)
        try configuration.applyRetention(of: file)
        return configuration
    }

    /// Sets the import's and the sockets' settings the file gives.
    private mutating func applyImportSettings(of file: ConfigurationFile) throws {
        if let value = try file.integer(
            "chunk_size", in: ImportChunkSize.allowed, meaning: "records per import transaction")
        {
            self.chunkSize = value
        }
        if let value = try file.integer(
            "import_nice", in: 0...19, meaning: "0 is the daemon's own priority, 19 the lowest")
        {
            self.importPriority = value
        }
        if let value = try file.integer(
            "import_yield_ms", in: 0...1_000, meaning: "milliseconds an import pauses after an edit; 0 never pauses")
        {
            self.importYield = .milliseconds(value)
        }
        for key in ["read_socket_mode", "write_socket_mode"] {
            guard let value = try file.integer(key, radix: 8) else { continue }
            // Permission bits only: setuid, setgid and sticky mean nothing on a socket.
            guard value <= 0o777 else {
                throw DaemonError(
                    "\(file.at(key)): '\(key) = \(file.values[key] ?? "")' is not a socket's permissions.",
                    advice: "Use an octal mode from 0 to 0777, like 0660."
                )
            }
            if key == "read_socket_mode" {
                self.readSocketMode = value
            } else {
                self.writeSocketMode = value
            }
        }
    }

    /// Sets the limits the file gives: message and reply sizes, records, subscribers,
    /// registrations, connections, and the log level.
    private mutating func applyLimits(of file: ConfigurationFile) throws {
        if let value = try file.integer(
            "max_message_bytes", in: 65_536...(1 << 30), meaning: "bytes of one Varlink message")
        {
            self.maximumMessageSize = value
        }
        if let value = try file.integer(
            "max_incoming_bytes", in: 65_536...(1 << 40), meaning: "bytes of unfinished messages held at once")
        {
            self.maximumIncomingBytes = value
        }
        if let value = try file.integer(
            "max_outgoing_bytes", in: 65_536...(1 << 40), meaning: "bytes of large replies not yet read, held at once")
        {
            self.maximumOutgoingBytes = value
        }
        if let value = try file.integer(
            "max_record_bytes", in: 1_024...(1 << 30), meaning: "bytes of one import record")
        {
            self.maximumRecordBytes = value
        }
        if let value = try file.integer(
            "subscriber_pending_limit", in: 1...(1 << 40), meaning: "objects queued for one subscriber")
        {
            self.subscriberPendingLimit = value
        }
        if let value = try file.integer(
            "upload_idle_timeout", in: 1...86_400, meaning: "seconds an upload may wait for its next bytes")
        {
            self.uploadIdleTimeout = .seconds(value)
        }
        if let value = try file.integer("max_registrations_per_subscriber") {
            self.maximumRegistrationsPerSubscriber = value
        }
        if let value = try file.integer("max_registrations") { self.maximumRegistrations = value }
        if let value = try file.integer("max_connections") { self.maximumConnections = value > 0 ? value : nil }
        if let value = file.values["log_level"] {
            guard Logger.Level(rawValue: value) != nil else {
                throw DaemonError(
                    "\(file.at("log_level")): 'log_level = \(value)' is not a log level.",
                    advice: "Use trace, debug, info, notice, warning, error or critical."
                )
            }
            self.logLevel = value
        }
    }

    /// Sets how long the history keeps saves (0 keeps them for ever), and how long a start waits
    /// for a PostgreSQL server it cannot reach.
    private mutating func applyRetention(of file: ConfigurationFile) throws {
        if let value = try file.integer(
            "store_wait", in: 0...86_400,
            meaning: "seconds to wait at start for a PostgreSQL server that cannot be reached")
        {
            storeWait = .seconds(value)
        }
        if let value = try file.integer(
            "history_retention_days", in: 0...36_500, meaning: "days the history keeps a save; 0 keeps them for ever")
        {
            historyRetentionDays = value == 0 ? nil : value
        }
        if let value = try file.integer(
            "history_retention_saves", in: 0...(1 << 40), meaning: "saves the history keeps; 0 sets no limit")
        {
            historyRetentionSaves = value == 0 ? nil : value
        }
        if let value = file.values["metrics_listen"] {
            guard let colon = value.lastIndex(of: ":"), let port = Int(value[value.index(after: colon)...]),
                (0...65_535).contains(port), colon > value.startIndex
            else {
                throw DaemonError(
                    "\(file.at("metrics_listen")): 'metrics_listen = \(value)' is not an address.",
                    advice: "Give HOST:PORT, like 127.0.0.1:9464, or leave the line out for no metrics endpoint.")
            }
            metricsListen = HostAndPort(
                host: String(value[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: port)
        }
    }

    static let keys: Set<String> = [
        "history_retention_days", "history_retention_saves", "metrics_listen",
        "state_directory", "runtime_directory", "store", "store_wait", "chunk_size", "import_nice", "import_yield_ms",
        "read_socket_mode",
        "write_socket_mode",
        "max_message_bytes", "max_incoming_bytes", "max_outgoing_bytes", "max_record_bytes", "subscriber_pending_limit",
        "upload_idle_timeout", "max_registrations_per_subscriber", "max_registrations", "max_connections", "log_level",
    ]

    /// The `key = value` lines of a configuration file: the values, and the line each is on.
    static func parse(_ text: String, path: String) throws -> (values: [String: String], lines: [String: Int]) {
        var values: [String: String] = [:]
        var lines: [String: Int] = [:]
        // `isNewline`, not "\n": in a file with CRLF line ends, "\r\n" is one Character.
        for (index, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line =
                raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init)?
                .trimmingCharacters(in: .whitespaces) ?? ""
            guard !line.isEmpty else { continue }
            // Shown in a message, a NUL or another control character would be invisible.
            if let control = line.unicodeScalars.first(where: {
                $0.properties.generalCategory == .control && $0 != "\t"
            }) {
                throw DaemonError(
                    "\(path):\(index + 1): the line has a control character (U+\(String(format: "%04X", control.value))), which no value may hold.",
                    advice: "Remove it (the file may have been written by a program, not an editor)."
                )
            }
            let parts = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty else {
                throw DaemonError("\(path):\(index + 1): expected 'key = value', found '\(line)'.")
            }
            guard keys.contains(parts[0]) else {
                throw DaemonError(
                    "\(path):\(index + 1): unknown key '\(parts[0])'; known keys are \(keys.sorted().joined(separator: ", "))."
                )
            }
            if let first = lines[parts[0]] {
                throw DaemonError(
                    "\(path):\(index + 1): '\(parts[0])' is set twice (first on line \(first)).",
                    advice: "Keep one of the two.")
            }
            lines[parts[0]] = index + 1
            values[parts[0]] = parts[1]
        }
        return (values, lines)
    }
}

/// A daemon failure: what happened and, apart from it, what to do about it.
public struct DaemonError: ExplainedError, Sendable {
    /// What happened, without advice.
    public var statement: String
    /// What to do about it; empty when there is nothing to do.
    public var advice: String
    /// The statement followed by the advice.
    public var message: String { Self.joined(statement, advice) }
    /// Whether the failure is on squasherd's side, not in the input or the request: a disk it
    /// writes to is full or failing. The same request succeeds once the operator has dealt with
    /// what ``statement`` names, so a client is told to retry later rather than to change it.
    public var isUnavailable: Bool
    /// Creates an error; `unavailable` marks one on squasherd's side (see ``isUnavailable``).
    public init(_ statement: String, advice: String = "", unavailable: Bool = false) {
        self.statement = statement
        self.advice = advice
        self.isUnavailable = unavailable
    }
}

/// A configuration file's `key = value` lines, with where each key is, for messages.
struct ConfigurationFile {
    /// The file's path.
    let path: String
    /// The values, by key.
    var values: [String: String] = [:]
    /// The line each key is on.
    var lines: [String: Int] = [:]

    /// Reads and parses the file at `path`; an empty file when there is none and it was not
    /// `given` explicitly.
    static func read(_ path: String, given: Bool) throws -> ConfigurationFile {
        var file = ConfigurationFile(path: path)
        if let data = try DaemonConfiguration.readConfigurationFile(path) {
            guard let text = String(data: data, encoding: .utf8) else {
                throw DaemonError(
                    "The configuration file \(path) is not UTF-8 text.",
                    advice: "Write it as UTF-8 (key = value lines).")
            }
            (file.values, file.lines) = try DaemonConfiguration.parse(text, path: path)
        } else if given {
            throw DaemonError(
                "The configuration file \(path) does not exist.", advice: "Pass an existing file or leave --config out."
            )
        }
        return file
    }

    /// Where a key's value is, for its error: the file and the line.
    /// The PostgreSQL store of the `store` line; refused with a password in a file that users
    /// other than squasherd's may read.
    func postgresStore() throws -> PostgresStoreConfiguration? {
        guard let url = values["store"] else { return nil }
        var store: PostgresStoreConfiguration
        do {
            store = try PostgresStoreConfiguration(url: url)
            // As syslog names a process: one daemon's sessions can be told, and ended.
            store.applicationName = "squasherd[\(getpid())]"
        } catch let error as PostgresStoreError {
            throw DaemonError("\(at("store")): \(error.statement)", advice: error.advice)
        }
        var info = stat()
        if store.password != nil, stat(path, &info) == 0, info.st_mode & S_IROTH != 0 {
            throw DaemonError(
                "\(at("store")): the store's URL holds a password, and every user of this machine may read \(path).",
                advice:
                    "Give it with password_file= instead (under systemd, a credential: LoadCredential=postgres-password:… and password_file=/run/credentials/squasherd.service/postgres-password), or make the file readable by squasherd alone."
            )
        }
        return store
    }

    func at(_ key: String) -> String { lines[key].map { "\(path):\($0)" } ?? path }

    func integer(_ key: String, radix: Int = 10, in range: ClosedRange<Int>? = nil, meaning: String = "") throws
        -> Int?
    {
        guard let text = values[key] else { return nil }
        let body = text.hasPrefix("0o") ? String(text.dropFirst(2)) : text
        let value = Int(body, radix: radix)
        let digits = body.hasPrefix("-") || body.hasPrefix("+") ? body.dropFirst() : Substring(body)
        let isWhole = radix == 10 && !digits.isEmpty && digits.allSatisfy { $0.isASCII && $0.isNumber }
        // A value outside the range would not work (a message limit of 0 closes every
        // connection), so it is refused rather than clamped; so is one too large for any.
        if let range, isWhole, value.map({ !range.contains($0) }) ?? true {
            throw DaemonError(
                "\(at(key)): '\(key) = \(text)' is out of range.",
                advice: "Use \(range.lowerBound) to \(range.upperBound) (\(meaning))."
            )
        }
        if isWhole, value == nil {
            throw DaemonError("\(at(key)): '\(key) = \(text)' is too large.", advice: "Use at most \(Int.max).")
        }
        if radix == 10, value == nil, let number = Double(body), number.isFinite {
            throw DaemonError(
                "\(at(key)): '\(key) = \(text)' is not a whole number.",
                advice: "Write it without a fraction or exponent.")
        }
        guard let value, value >= 0 else {
            throw DaemonError(
                "\(at(key)): '\(key) = \(text)' is not \(radix == 8 ? "an octal mode like 0660" : "a non-negative number")."
            )
        }
        return value
    }
}

/// A TCP address in a configuration file, `HOST:PORT`.
public struct HostAndPort: Sendable, Hashable {
    /// The host name or address (an IPv6 address without its brackets).
    public var host: String
    /// The port; 0 lets the system choose.
    public var port: Int
}
