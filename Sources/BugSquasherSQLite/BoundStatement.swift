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
            text.withUTF8 { bytes in
                bytes.withMemoryRebound(to: CChar.self) { chars in
                    if let start = chars.baseAddress, !chars.isEmpty {
                        // Text holding U+0000 goes in as its UTF-8 bytes: GRDB reads text as a C
                        // string, which would end at the NUL (Jira descriptions with pasted crash
                        // logs hold some). Reading a blob as a string attribute decodes it.
                        if memchr(start, 0, chars.count) != nil {
                            note(sqlite3_bind_blob(handle, index, start, Int32(chars.count), sqliteTransient))
                        } else {
                            note(sqlite3_bind_text(handle, index, start, Int32(chars.count), sqliteTransient))
                        }
                    } else {
                        // A NULL pointer would bind NULL, not the empty string.
                        note(sqlite3_bind_text(handle, index, "", 0, sqliteTransient))
                    }
                }
            }
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

    /// Binds the next parameter (`NULL` for `nil`).
    mutating func bind(_ integer: Int64?) {
        note(integer.map { sqlite3_bind_int64(handle, index, $0) } ?? sqlite3_bind_null(handle, index))
        index += 1
    }

    /// Runs the statement to completion; throws GRDB's `DatabaseError` (so constraint
    /// violations read as they do through GRDB).
    consuming func execute() throws {
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
