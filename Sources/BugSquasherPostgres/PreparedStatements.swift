import BugSquasherGraph
import Logging
import PostgresNIO
import Synchronization

/// The names of the statements the store prepares on the server: each of its frequent
/// statements answered in one read (an edit's one-statement save, a save's token, a row by key)
/// is parsed and planned once per connection and then only bound and executed, which halves the
/// server's work for a small statement. A statement is named by its text and the kinds of its
/// parameters; past ``limit`` names, statements run unprepared.
/// Why it is built this way: docs/DESIGN-NOTES.md, "Frequent statements are prepared once per
/// connection".
final class PreparedNames: Sendable {
    /// How many statements one process names at most (each connection holds the ones it ran).
    static let limit = 256

    private struct State {
        var names: [String: String] = [:]
        var issued = 0
    }

    private let state = Mutex(State())

    /// The name of `sql` with parameters of `kinds`, given one now if it has none; `nil` once
    /// ``limit`` names were given.
    func name(for sql: String, kinds: String) -> String? {
        let key = kinds + "\u{0}" + sql
        return state.withLock { state in
            if let name = state.names[key] { return name }
            guard state.issued < Self.limit else { return nil }
            state.issued += 1
            let name = "bs_\(state.issued)"
            state.names[key] = name
            return name
        }
    }

    /// Forgets the name of `sql`, whose preparation may have failed: postgres-nio keeps a failed
    /// preparation's error for the name as long as the connection lives, so the statement gets
    /// a new name the next time.
    func retire(_ sql: String, kinds: String) {
        _ = state.withLock { $0.names.removeValue(forKey: kinds + "\u{0}" + sql) }
    }

    /// Whether an error of a prepared statement may have come from its preparation (and so
    /// stays with its name): every server error but the classes only an execution raises
    /// (data exceptions such as a batch's version check, integrity violations, rollbacks of
    /// deadlocks). A lost connection takes its prepared statements with it.
    static func mayHaveFailedPreparing(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return !["22", "23", "40"].contains(String(state.prefix(2)))
    }
}

/// A statement of the store's run as a named prepared statement through postgres-nio's
/// `PostgresPreparedStatement`, whose name and text are static: they are read from a task-local
/// value that ``PostgresStore/runPrepared(_:_:on:)`` binds around each execution.
struct DynamicStatement: PostgresPreparedStatement {
    /// The name and text of the statement being executed in this task.
    struct Text: Sendable {
        var name = ""
        var sql = ""
    }

    @TaskLocal static var current = Text()
    static var name: String { current.name }
    static var sql: String { current.sql }

    let bindings: PostgresBindings

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

extension PostgresStore {
    /// Runs `sql` with `arguments` as a prepared statement (see ``PreparedNames``), or as an
    /// unnamed one once the store named as many as it names, and returns its rows.
    func runPrepared(_ sql: String, _ arguments: [Value], on connection: PostgresConnection) throws -> [PostgresRow] {
        try runPrepared(sql, binds: Self.bindings(arguments), kinds: Self.kinds(arguments), on: connection)
    }

    /// Runs `sql` with parameters bound already, as ``runPrepared(_:_:on:)`` does; `kinds` tells
    /// statements of one text apart whose parameters' types differ (none, when the statement
    /// casts each parameter to one type).
    func runPrepared(
        _ sql: String, binds bindings: PostgresBindings, kinds: String = "", on connection: PostgresConnection
    )
        throws -> [PostgresRow]
    {
        guard let name = preparedNames.name(for: sql, kinds: kinds) else {
            return try run(sql, binds: bindings, on: connection)
        }
        let (names, logger) = (preparedNames, logger)
        return try PostgresEventLoops.run(on: connection) {
            try await Self.execute(
                sql, named: name, kinds: kinds, binds: bindings, names: names, logger: logger, on: connection)
        }
    }

    /// Executes the statement named `name`; static, so that the task running it on the event
    /// loop holds no reference to the store (the store's last reference must not go there).
    private static func execute(
        _ sql: String, named name: String, kinds: String, binds bindings: PostgresBindings, names: PreparedNames,
        logger: Logger, on connection: PostgresConnection
    ) async throws -> [PostgresRow] {
        do {
            return try await DynamicStatement.$current.withValue(.init(name: name, sql: sql)) {
                var rows: [PostgresRow] = []
                for try await row in try await connection.execute(DynamicStatement(bindings: bindings), logger: logger)
                {
                    rows.append(row)
                }
                return rows
            }
        } catch let error as PSQLError where PreparedNames.mayHaveFailedPreparing(error) {
            names.retire(sql, kinds: kinds)
            throw error
        }
    }
}

extension PostgresStore {
    /// The kinds of parameters `arguments` bind as: a prepared statement's parameter types are
    /// fixed by its first execution, so statements alike but for these are prepared apart.
    fileprivate static func kinds(_ arguments: [Value]) -> String { String(arguments.map(\.bindingKind)) }
}

extension Value {
    /// The kind of parameter the value binds as (see `PostgresStore.kinds(_:)`).
    fileprivate var bindingKind: Character {
        switch self {
        case .null: "n"
        case .string: "s"
        case .int64: "i"
        case .double, .date: "d"
        case .bool: "b"
        case .data: "x"
        }
    }
}

/// The history's page statements, prepared once per connection through postgres-nio's
/// `PreparedQuery`, whose rows are read as they come. A page can take more than one read, and a
/// statement prepared through ``DynamicStatement`` hands its rows only to postgres-nio's async
/// row sequence, which pauses between reads; an end of stream in that pause crashes
/// postgres-nio 1.33.2 (see `PostgresStore.run`). A page is read on every hint of another
/// daemon's save, so it stays prepared: parsed and planned afresh it cost an edit from daemon A to
/// a subscriber on daemon B 0.2 to 0.3 ms. Its cells come in binary whatever they say
/// (`PostgresCell.binary`).
/// Why: docs/DESIGN-NOTES.md, "Frequent statements are prepared once per connection".
final class PreparedPages: Sendable {
    private struct Key: Hashable {
        var connection: ObjectIdentifier
        var sql: String
    }

    /// The statements prepared, with their connections (kept until closed, so that no other
    /// connection takes an identifier while its entry is here).
    private let prepared = Mutex<[Key: (connection: PostgresConnection, query: PreparedQuery)]>([:])

    /// The rows of `sql` with `arguments` as `$1`, `$2`, … on `connection`, preparing it there
    /// first when new to it. The preparation is a statement of its own, answered before the
    /// execution goes out: a page is read outside any transaction, where a statement of another
    /// task sent in between changes nothing.
    func rows(_ sql: String, _ arguments: [Int64], on connection: PostgresConnection) -> EventLoopFuture<
        [PostgresRow]
    > {
        let key = Key(connection: ObjectIdentifier(connection), sql: sql)
        let ready: EventLoopFuture<PreparedQuery>
        if let query = prepared.withLock({ $0[key]?.query }) {
            ready = connection.eventLoop.makeSucceededFuture(query)
        } else {
            ready = connection.prepare(query: sql).map { [self] query in
                self.prepared.withLock { entries in
                    entries = entries.filter { !$0.value.connection.isClosed }
                    entries[key] = (connection, query)
                }
                return query
            }
        }
        let binds = arguments.map { PostgresData(int64: $0) }
        return ready.flatMap { $0.execute(binds) }.flatMapErrorThrowing { [self] error in
            _ = self.prepared.withLock { $0.removeValue(forKey: key) }
            throw error
        }
    }
}

extension PostgresCell {
    /// The cell in binary, as every `Bind` of postgres-nio 1.33.2 asks the server to answer:
    /// a statement prepared through its `PreparedQuery` labels its cells text, which they are
    /// not.
    var binary: PostgresCell {
        PostgresCell(
            bytes: bytes, dataType: dataType, format: .binary, columnName: columnName, columnIndex: columnIndex)
    }
}
