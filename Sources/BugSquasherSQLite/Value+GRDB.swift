import BugSquasherGraph
import Foundation
import GRDB

extension Value {
    /// The value as SQLite stores it: dates as seconds since 1970, booleans as 0/1.
    var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        // As ``BoundStatement`` binds it: text with a NUL as its bytes, which GRDB keeps whole.
        case .string(let s): s.utf8.contains(0) ? Data(s.utf8).databaseValue : s.databaseValue
        case .int64(let i): i.databaseValue
        case .double(let d): d.databaseValue
        case .bool(let b): (b ? 1 : 0 as Int64).databaseValue
        case .date(let d): d.timeIntervalSince1970.databaseValue
        case .data(let d): d.databaseValue
        }
    }

    /// Reads a stored value back as the attribute's type.
    init(_ value: DatabaseValue, as type: AttributeType) {
        switch (value.storage, type) {
        case (.null, _): self = .null
        case (.string(let s), .string): self = .string(s)
        case (.int64(let i), .int64): self = .int64(i)
        case (.double(let d), .int64): self = .int64(Int64(d))
        case (.int64(let i), .double): self = .double(Double(i))
        case (.double(let d), .double): self = .double(d)
        case (.int64(let i), .bool): self = .bool(i != 0)
        case (.double(let d), .date): self = .date(Date(timeIntervalSince1970: d))
        case (.int64(let i), .date): self = .date(Date(timeIntervalSince1970: Double(i)))
        case (.blob(let d), .data): self = .data(d)
        case (.string(let s), .data): self = .data(Data(s.utf8))
        case (.blob(let d), .string): self = .string(String(decoding: d, as: UTF8.self))
        case (.int64(let i), .string): self = .string(String(i))
        case (.double(let d), .string): self = .string(String(d))
        default: self = .null
        }
    }
}
