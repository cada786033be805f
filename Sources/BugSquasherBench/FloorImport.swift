import Foundation
import GRDBSQLite

/// The write side's floor for an import of real data: the rows a squasherd import wrote (its
/// bugs, comments, people, projects, components and bug–component links), read into memory
/// before the clock starts, inserted into an empty store of the same schema, indexes and pragmas
/// through SQLite's C API alone (prepared statements, no GRDB, no object graph), one transaction
/// per chunk of bugs with their comments and links. What no importer writing those rows can beat.
struct FloorImport {
    /// One table's rows, each the values of `columns` in order.
    struct Table {
        var name: String
        var columns: [String]
        var rows: [[SQLiteCell]]
    }

    /// A value as SQLite stores it.
    enum SQLiteCell {
        case null
        case integer(Int64)
        case real(Double)
        case text(String)
    }

    /// The entity tables inserted, and the column that ties a row to its chunk's bug (nil: all
    /// rows go in with the first chunk, as an importer creates them when first met).
    static let tables: [(name: String, bugColumn: String?)] = [
        ("Project", nil), ("Person", nil), ("Component", nil), ("Bug", "pk"), ("Comment", "bug"),
        ("Bug_components", "src"),
    ]

    let source: String
    let chunk: Int

    /// Reads the rows and the schema from `source`, then times their insert into `destination`;
    /// returns the seconds and how many rows of each table went in.
    func run(into destination: String) throws -> (seconds: Double, counts: [String: Int]) {
        let from = try Connection(path: source, readOnly: true)
        var schema: [String] = []
        try from.each(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type DESC"
        ) { statement in
            schema.append(String(cString: sqlite3_column_text(statement, 0)))
        }
        var loaded: [Table] = []
        for (name, _) in Self.tables { loaded.append(try from.table(name)) }
        let to = try Connection(path: destination, readOnly: false)
        try to.execute("PRAGMA journal_mode = WAL")
        try to.execute("PRAGMA synchronous = NORMAL")
        for statement in schema { try to.execute(statement) }

        // Rows grouped by the chunk of their bug (bugs in primary-key order, `chunk` at a time).
        let bugs = loaded[3].rows.map { row -> Int64 in
            if case .integer(let pk) = row[0] { return pk }
            return 0
        }
        var chunkOfBug: [Int64: Int] = [:]
        for (index, pk) in bugs.enumerated() { chunkOfBug[pk] = index / chunk }
        let chunks = max(1, (bugs.count + chunk - 1) / chunk)
        var grouped = [[Table]](
            repeating: loaded.map { Table(name: $0.name, columns: $0.columns, rows: []) }, count: chunks)
        for (tableIndex, (_, bugColumn)) in Self.tables.enumerated() {
            let table = loaded[tableIndex]
            let column = bugColumn.flatMap { table.columns.firstIndex(of: $0) }
            for row in table.rows {
                var target = 0
                if let column, case .integer(let pk) = row[column] { target = chunkOfBug[pk] ?? 0 }
                grouped[target][tableIndex].rows.append(row)
            }
        }
        let inserts = try loaded.map { table in
            try to.prepare(
                "INSERT INTO \"\(table.name)\" (\(table.columns.map { "\"\($0)\"" }.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: table.columns.count).joined(separator: ", ")))"
            )
        }
        defer { for statement in inserts { sqlite3_finalize(statement) } }

        let start = ContinuousClock.now
        for tables in grouped {
            try to.execute("BEGIN")
            for (index, table) in tables.enumerated() {
                for row in table.rows { try to.insert(row, with: inserts[index]) }
            }
            try to.execute("COMMIT")
        }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return (seconds, Dictionary(uniqueKeysWithValues: loaded.map { ($0.name, $0.rows.count) }))
    }

    /// An SQLite connection through the C API.
    final class Connection {
        let handle: OpaquePointer
        let path: String

        init(path: String, readOnly: Bool) throws {
            var handle: OpaquePointer?
            let flags = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
            guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK, let handle else {
                throw FloorError("cannot open \(path)")
            }
            self.handle = handle
            self.path = path
        }

        deinit { sqlite3_close_v2(handle) }

        func execute(_ sql: String) throws {
            guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else { throw failure(sql) }
        }

        func prepare(_ sql: String) throws -> OpaquePointer {
            var statement: OpaquePointer?
            guard sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK,
                let statement
            else { throw failure(sql) }
            return statement
        }

        func each(_ sql: String, _ body: (OpaquePointer) throws -> Void) throws {
            let statement = try prepare(sql)
            defer { sqlite3_finalize(statement) }
            while sqlite3_step(statement) == SQLITE_ROW { try body(statement) }
        }

        /// Every row of `name`, in primary-key order (`rowid` where there is one).
        func table(_ name: String) throws -> Table {
            var columns: [String] = []
            try each("SELECT name FROM pragma_table_info('\(name)') ORDER BY cid") { statement in
                columns.append(String(cString: sqlite3_column_text(statement, 0)))
            }
            var rows: [[SQLiteCell]] = []
            try each("SELECT * FROM \"\(name)\" ORDER BY \(columns.contains("pk") ? "pk" : "src, dst")") { statement in
                rows.append(
                    (0..<Int32(columns.count)).map { index in
                        switch sqlite3_column_type(statement, index) {
                        case SQLITE_INTEGER: .integer(sqlite3_column_int64(statement, index))
                        case SQLITE_FLOAT: .real(sqlite3_column_double(statement, index))
                        case SQLITE_TEXT: .text(String(cString: sqlite3_column_text(statement, index)))
                        default: .null
                        }
                    })
            }
            return Table(name: name, columns: columns, rows: rows)
        }

        func insert(_ row: [SQLiteCell], with statement: OpaquePointer) throws {
            for (offset, cell) in row.enumerated() {
                let index = Int32(offset + 1)
                switch cell {
                case .null: sqlite3_bind_null(statement, index)
                case .integer(let value): sqlite3_bind_int64(statement, index, value)
                case .real(let value): sqlite3_bind_double(statement, index, value)
                case .text(let value):
                    // SQLITE_TRANSIENT: SQLite copies the bytes, as a C importer's bind of a
                    // buffer it reuses would.
                    _ = value.withCString { text in
                        sqlite3_bind_text(
                            statement, index, text, Int32(value.utf8.count),
                            unsafeBitCast(-1, to: sqlite3_destructor_type.self))
                    }
                }
            }
            guard sqlite3_step(statement) == SQLITE_DONE else { throw failure("insert") }
            sqlite3_reset(statement)
        }

        private func failure(_ what: String) -> FloorError {
            FloorError("\(path): \(String(cString: sqlite3_errmsg(handle))) (\(what.prefix(200)))")
        }
    }

    /// What went wrong, said plainly.
    struct FloorError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
