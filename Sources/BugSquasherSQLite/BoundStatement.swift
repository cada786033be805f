import BugSquasherGraph
import Foundation
import GRDB
import GRDBSQLite

/// Runs a cached GRDB statement with values bound through the SQLite C API.
///
/// A chunk's save binds every column of a thousand rows; `StatementArguments` would box each
/// value as an existential and convert it twice on the way. GRDB documents this use of
/// `Statement.sqliteStatement`; the statement stays GRDB's (cached, finalized by GRDB), only the
/// binding and stepping happen here, inside the transaction GRDB opened.
struct BoundStatement: ~Copyable {
    private let statement: Statement
    private let handle: OpaquePointer
    private var index: Int32 = 1
    /// The first failed bind (out of memory, a value over SQLite's size limit): `execute()`
    /// throws it instead of running with that parameter left NULL.
    private var bindFailure: Int32 = SQLITE_OK

    init(_ statement: Statement) {
        self.statement = statement
        handle = statement.sqliteStatement
        sqlite3_reset(handle)
    }

    /// Binds the next parameter.
    mutating func bind(_ value: Value) {
        switch value {
        case .null: note(sqlite3_bind_null(handle, index))
        case .string(var text):
            text.withUTF8 { bindText($0, copying: true) }
            return
        case .int64(let integer): note(sqlite3_bind_int64(handle, index, integer))
        case .double(let double): note(sqlite3_bind_double(handle, index, double))
        case .bool(let bool): note(sqlite3_bind_int64(handle, index, bool ? 1 : 0))
        case .date(let date): note(sqlite3_bind_double(handle, index, date.timeIntervalSince1970))
        case .data(let data):
            data.withUnsafeBytes { bytes in
                if let start = bytes.baseAddress, !bytes.isEmpty {
                    note(sqlite3_bind_blob(handle, index, start, Int32(bytes.count), sqliteTransient))
                } else {
                    note(sqlite3_bind_zeroblob(handle, index, 0))
                }
            }
        }
        index += 1
    }

    /// Binds `utf8` as the next parameter's text; without `copying`, SQLite reads the caller's
    /// bytes, which must stay valid until the statement has run and its bindings are cleared.
    private mutating func bindText(_ utf8: UnsafeBufferPointer<UInt8>, copying: Bool) {
        // `nil` is `SQLITE_STATIC`: SQLite reads the bytes where they are.
        let destructor: sqlite3_destructor_type? = copying ? sqliteTransient : nil
        utf8.withMemoryRebound(to: CChar.self) { chars in
            if let start = chars.baseAddress, !chars.isEmpty {
                // Text holding U+0000 goes in as its UTF-8 bytes: GRDB reads text as a C
                // string, which would end at the NUL (Jira descriptions with pasted crash
                // logs hold some). Reading a blob as a string attribute decodes it.
                if memchr(start, 0, chars.count) != nil {
                    note(sqlite3_bind_blob(handle, index, start, Int32(chars.count), destructor))
                } else {
                    note(sqlite3_bind_text(handle, index, start, Int32(chars.count), destructor))
                }
            } else {
                // A NULL pointer would bind NULL, not the empty string.
                note(sqlite3_bind_text(handle, index, "", 0, nil))
            }
        }
        index += 1
    }

    /// Binds `values`, then the keys of `toOne`, as the next parameters and runs the statement,
    /// as ``bind(_:)-(Value)`` for each and ``execute()`` would, without copying text: SQLite
    /// reads each string's bytes where the string keeps them, borrowed while the statement runs,
    /// and the bindings are cleared before this returns.
    ///
    /// Why: docs/DESIGN-NOTES.md, "Inserted text is bound where the string keeps it".
    mutating func execute(values: [Value], then toOne: [ObjectID?]) throws {
        defer { sqlite3_clear_bindings(handle) }
        try Self.bind(values, from: values.startIndex, into: &self) { statement in
            for target in toOne { statement.bind(target?.key) }
            try statement.execute()
        }
    }

    /// Binds `values[position...]` into `statement`, each string's bytes borrowed for as long as
    /// the rest is bound and `body` runs.
    private static func bind(
        _ values: [Value], from position: Int, into statement: inout BoundStatement,
        then body: (inout BoundStatement) throws -> Void
    ) throws {
        var position = position
        while position < values.endIndex {
            guard case .string(var text) = values[position] else {
                statement.bind(values[position])
                position += 1
                continue
            }
            try text.withUTF8 { utf8 in
                statement.bindText(utf8, copying: false)
                try bind(values, from: position + 1, into: &statement, then: body)
            }
            return
        }
        try body(&statement)
    }

    /// Binds the next parameter (`NULL` for `nil`).
    mutating func bind(_ integer: Int64?) {
        note(integer.map { sqlite3_bind_int64(handle, index, $0) } ?? sqlite3_bind_null(handle, index))
        index += 1
    }

    /// Runs the statement to completion; throws GRDB's `DatabaseError` (so constraint
    /// violations read as they do through GRDB).
    mutating func execute() throws {
        let code = bindFailure == SQLITE_OK ? sqlite3_step(handle) : bindFailure
        if code != SQLITE_DONE && code != SQLITE_ROW {
            let message = sqlite3_db_handle(handle).flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            sqlite3_reset(handle)
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
        }
        sqlite3_reset(handle)
    }

    private mutating func note(_ code: Int32) {
        if code != SQLITE_OK && bindFailure == SQLITE_OK { bindFailure = code }
    }
}

/// `SQLITE_TRANSIENT`: SQLite copies the bytes before the bind returns (the C macro does not
/// import into Swift).
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
