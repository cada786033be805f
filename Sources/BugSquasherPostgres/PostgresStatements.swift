import BugSquasherGraph
import Foundation
import Logging
import NIOCore
import PostgresNIO

// Statements with `Value` parameters and rows read back as `Value`s.
extension PostgresStore {
    /// Runs one statement with `arguments` as `$1`, `$2`, … (then `arrays`, as `int8[]`
    /// parameters) and returns its rows. The rows are read as they come, through postgres-nio's
    /// future API: a statement whose rows may take more than one read (rows by key) must not go
    /// through its row sequence, whose wait for the consumer's demand between reads crashes
    /// postgres-nio 1.33.2 when the server closes the connection then (``PreparedPages`` reads
    /// the history's pages).
    /// Why: docs/DESIGN-NOTES.md, "Frequent statements are prepared once per connection".
    func run(_ sql: String, _ arguments: [Value], arrays: [[Int64]] = [], on connection: PostgresConnection) throws
        -> [PostgresRow]
    {
        try execute(sql, arguments, arrays: arrays, on: connection).rows
    }

    /// Runs one statement with parameters bound already and returns its rows.
    func run(_ sql: String, binds: PostgresBindings, on connection: PostgresConnection) throws -> [PostgresRow] {
        try connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).blockingValue(
            watching: connection
        ).rows
    }

    /// Runs one statement and returns how many rows it changed.
    func changeCount(_ sql: String, _ arguments: [Value], on connection: PostgresConnection) throws -> Int {
        try execute(sql, arguments, on: connection).metadata.rows ?? 0
    }

    private func execute(
        _ sql: String, _ arguments: [Value], arrays: [[Int64]] = [], on connection: PostgresConnection
    ) throws -> PostgresQueryResult {
        try query(sql, arguments, arrays: arrays, on: connection).blockingValue(watching: connection)
    }

    /// One statement sent, through postgres-nio's future API (see ``run(_:_:arrays:on:)``).
    private func query(_ sql: String, _ arguments: [Value], arrays: [[Int64]], on connection: PostgresConnection)
        throws -> EventLoopFuture<PostgresQueryResult>
    {
        connection.query(
            PostgresQuery(unsafeSQL: sql, binds: try Self.bindings(arguments, arrays: arrays)), logger: logger)
    }

    /// Sends one statement (unnamed, so that it goes out as one message) without waiting for its
    /// answer: a connection runs its statements in the order they were sent, so a statement sent
    /// after this one runs after it, and the answers come in that order.
    /// Why: docs/DESIGN-NOTES.md, "A save waits for the server twice".
    func send(_ sql: String, _ arguments: [Value] = [], arrays: [[Int64]] = [], on connection: PostgresConnection)
        throws -> PendingAnswer<PostgresQueryResult>
    {
        PendingAnswer(try query(sql, arguments, arrays: arrays, on: connection), watching: connection)
    }

    /// `arguments` as `$1`, `$2`, …, then `arrays` as `int8[]` parameters.
    static func bindings(_ arguments: [Value], arrays: [[Int64]] = []) throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: arguments.count + arrays.count)
        for argument in arguments { try bind(argument, to: &bindings) }
        for array in arrays { bindings.append(KeyArray(array)) }
        return bindings
    }

    static func bind(_ value: Value, to bindings: inout PostgresBindings) throws {
        switch value {
        case .null: bindings.appendNull()
        case .string(let text): bindings.append(PostgresText.encode(text))
        case .int64(let number): bindings.append(number)
        case .double(let number): bindings.append(number)
        case .bool(let flag): bindings.append(flag)
        case .date(let date): bindings.append(date.timeIntervalSince1970)
        case .data(let data): try bindings.append(data)
        }
    }

    /// Runs `body` in a transaction on `connection`: committed when it returns, rolled back when
    /// it throws. The `BEGIN` goes out without waiting for its answer (``send(_:_:arrays:on:)``):
    /// the body's first statement follows it.
    func transaction<T>(on connection: PostgresConnection, _ body: () throws -> T) throws -> T {
        let begun = try send("BEGIN", on: connection)
        let result: T
        do {
            result = try body()
            _ = try begun.value()
        } catch {
            _ = try? run("ROLLBACK", [], on: connection)
            throw error
        }
        _ = try run("COMMIT", [], on: connection)
        return result
    }

    /// The cells of a row of whole numbers.
    static func integers(_ row: PostgresRow) throws -> [Int64] {
        try row.map { try $0.decode(Int64.self) }
    }

    /// A row of `entity` read with ``PostgresSchema/columns(of:alias:)``.
    static func decode(_ row: PostgresRow, entity: EntityDescription, store: String) throws -> StoreRow {
        let cells = row.makeRandomAccess()
        let pk = try cells[0].decode(Int64.self)
        let version = try cells[1].decode(Int64.self)
        var attributes: [Value] = []
        attributes.reserveCapacity(entity.attributes.count)
        for (index, attribute) in entity.attributes.enumerated() {
            attributes.append(try value(cells[index + 2], as: attribute.type))
        }
        let base = entity.attributes.count + 2
        let toOne = try entity.toOneRelationships.enumerated().map { index, relationship -> ObjectID? in
            try cells[base + index].decode(Int64?.self).map {
                ObjectID(store: store, entity: relationship.destination, primaryKey: $0)
            }
        }
        return StoreRow(
            objectID: ObjectID(store: store, entity: entity.name, primaryKey: pk),
            snapshot: RowSnapshot(version: version, attributes: attributes, toOne: toOne))
    }

    private static func value(_ cell: PostgresCell, as type: AttributeType) throws -> Value {
        switch type {
        case .string: try cell.decode(String?.self).map { .string(PostgresText.decode($0)) } ?? .null
        case .int64: try cell.decode(Int64?.self).map { .int64($0) } ?? .null
        case .bool: try cell.decode(Bool?.self).map { .bool($0) } ?? .null
        case .double: try cell.decode(Double?.self).map { .double($0) } ?? .null
        case .date: try cell.decode(Double?.self).map { .date(Date(timeIntervalSince1970: $0)) } ?? .null
        case .data: try cell.decode(Data?.self).map { .data($0) } ?? .null
        }
    }
}
