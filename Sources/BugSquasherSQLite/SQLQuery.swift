import BugSquasherGraph
import BugSquasherSQL
import Foundation
import GRDB

/// Compiles a ``FetchDescription`` to SQL: joins for to-one key paths, a `WHERE` clause with the
/// same meaning as in-memory evaluation, `ORDER BY` (primary key last, for a stable order),
/// `LIMIT`/`OFFSET`.
struct SQLQuery {
    let model: ManagedObjectModel
    let entity: EntityDescription
    let storeIdentifier: String
    private var paths: KeyPathJoins
    private(set) var arguments: [DatabaseValue] = []
    /// Whether the SQL has few enough shapes to be kept as a prepared statement: the whole
    /// request is one comparison of an attribute (a look-up by key, such as an import job's by
    /// its ID), or one `IN` list of an attribute (an upsert's or a relationship's lookup by key)
    /// whose length is rounded up to a power of two (see ``paddedCount(_:)``).
    private(set) var isCacheable = false

    init(model: ManagedObjectModel, entity: EntityDescription, storeIdentifier: String) {
        self.model = model
        self.entity = entity
        self.storeIdentifier = storeIdentifier
        paths = KeyPathJoins(model: model, entity: entity)
    }

    /// The full `SELECT` for a fetch.
    mutating func select(_ request: FetchDescription) throws -> String {
        if request.sort.isEmpty, request.limit == nil, request.offset == 0 {
            switch request.predicate {
            case .isIn(let keyPath, let values)?:
                isCacheable =
                    !keyPath.contains(".") && !values.contains(where: \.isNull) && values.count <= Self.paddedLimit
            case .compare(let keyPath, _, _)?:
                isCacheable = !keyPath.contains(".")
            default:
                break
            }
        }
        let whereClause = try request.predicate.map { try condition($0) } ?? "1"
        let order =
            try Self.distinctSort(request.sort).map { "\(try column($0.keyPath)) \($0.ascending ? "ASC" : "DESC")" } + [
                "t.pk ASC"
            ]
        let head: String
        switch request.resultType {
        case .count: head = "SELECT count(*)"
        case .objectIDs: head = "SELECT t.pk"
        // Only the attributes asked for: a bug's text is not read to compare its key and digest.
        case .rows: head = "SELECT \(SQLSchema.columns(of: entity, only: request.attributesToFetch))"
        }
        var sql =
            "\(head) FROM \(SQLSchema.quote(entity.name)) t \(paths.joins.joined(separator: " ")) WHERE \(whereClause)"
        if request.resultType != .count { sql += " ORDER BY \(order.joined(separator: ", "))" }
        if request.limit != nil || request.offset > 0 {
            sql += " LIMIT \(request.limit ?? -1) OFFSET \(request.offset)"
        }
        if request.resultType == .count && (request.limit != nil || request.offset > 0) {
            sql = "SELECT count(*) FROM (\(sql.replacingOccurrences(of: "SELECT count(*)", with: "SELECT t.pk")))"
        }
        return sql
    }

    /// The most key paths a fetch sorts by.
    static let maximumSortKeys = 32

    /// The sort without its repeated key paths (the first of each decides the order; the others
    /// add nothing), refused past ``maximumSortKeys``: SQLite 3.40 crashes the process on an
    /// `ORDER BY` of 64 terms or more over a join, and no order needs that many.
    static func distinctSort(_ sort: [SortKey]) throws -> [SortKey] {
        var seen = Set<String>()
        let distinct = sort.filter { seen.insert($0.keyPath).inserted }
        guard distinct.count <= maximumSortKeys else {
            throw GraphError(
                .invalidArgument, "The fetch sorts by \(distinct.count) key paths.",
                advice: "Give at most \(maximumSortKeys).")
        }
        return distinct
    }

    private mutating func condition(_ predicate: ObjectPredicate) throws -> String {
        switch predicate {
        case .all:
            return "1"
        case .and(let items):
            return items.isEmpty ? "1" : "(" + (try items.map { try condition($0) }).joined(separator: " AND ") + ")"
        case .or(let items):
            return items.isEmpty ? "0" : "(" + (try items.map { try condition($0) }).joined(separator: " OR ") + ")"
        case .not(let item):
            // Two-valued, as the in-memory evaluation: a comparison with null is false there,
            // and its negation true, where SQL's NOT of unknown stays unknown.
            return "NOT COALESCE(\(try condition(item)), 0)"
        case .isIn(let keyPath, let values):
            return try inList(keyPath, values)
        case .relationship(let keyPath, let target):
            let column = try column(keyPath, relationship: true)
            guard let target else { return "\(column) IS NULL" }
            guard !target.isTemporary, target.storeIdentifier == storeIdentifier else { return "0" }
            arguments.append(target.key.databaseValue)
            return "\(column) = ?"
        case .compare(let keyPath, let op, let value):
            return try comparison(keyPath, op, value)
        }
    }

    /// `keyPath IN (values)`, with a null among the values as `IS NULL`.
    private mutating func inList(_ keyPath: String, _ values: [Value]) throws -> String {
        let column = try column(keyPath)
        let nonNull = values.filter { !$0.isNull }
        var parts: [String] = []
        if let last = nonNull.last {
            // Repeating the last value changes nothing in an IN list, and bounds the number
            // of distinct statements (they are prepared once and kept when cacheable).
            let count = Self.paddedCount(nonNull.count)
            parts.append("\(column) IN (?\(String(repeating: ",?", count: count - 1)))")
            arguments += nonNull.map(\.databaseValue)
            arguments += repeatElement(last.databaseValue, count: count - nonNull.count)
        }
        if nonNull.count != values.count { parts.append("\(column) IS NULL") }
        return parts.isEmpty ? "0" : "(" + parts.joined(separator: " OR ") + ")"
    }

    /// `keyPath op value`, with null compared as the in-memory evaluation compares it, and text
    /// searched as UTF-8 bytes.
    private mutating func comparison(_ keyPath: String, _ op: ComparisonOperator, _ value: Value) throws -> String {
        let (column, attribute) = try resolve(keyPath)
        switch op {
        case .equal where value.isNull: return "\(column) IS NULL"
        case .notEqual where value.isNull: return "\(column) IS NOT NULL"
        case .equal:
            arguments.append(value.databaseValue)
            return "\(column) = ?"
        case .notEqual:
            arguments.append(value.databaseValue)
            return "\(column) IS NOT ?"
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            guard !value.isNull else { return "0" }
            arguments.append(value.databaseValue)
            let symbol = [ComparisonOperator.less: "<", .lessOrEqual: "<=", .greater: ">", .greaterOrEqual: ">="][
                op]!
            return "\(column) \(symbol) ?"
        case .contains, .containsCaseInsensitive, .beginsWith:
            // Compared as UTF-8 bytes: text holding U+0000 is stored as a blob of its
            // bytes (see `Value.databaseValue`), and so is such a needle.
            let isText =
                attribute?.type == .string ? "typeof(\(column)) IN ('text', 'blob')" : "typeof(\(column)) = 'text'"
            switch op {
            case .contains:
                arguments.append(value.databaseValue)
                return "(\(isText) AND instr(CAST(\(column) AS BLOB), CAST(? AS BLOB)) > 0)"
            case .containsCaseInsensitive:
                arguments.append(value.databaseValue)
                return "(\(isText) AND instr(CAST(lower(\(column)) AS BLOB), CAST(lower(?) AS BLOB)) > 0)"
            default:
                arguments += [value.databaseValue, value.databaseValue]
                return
                    "(\(isText) AND substr(CAST(\(column) AS BLOB), 1, length(CAST(? AS BLOB))) = CAST(? AS BLOB))"
            }
        }
    }

    /// The longest `IN` list that is padded; longer ones keep their length (SQLite limits a
    /// statement to 32,766 parameters, and padding must not push a list past it).
    static let paddedLimit = 1024

    /// The number of parameters of an `IN` list of `count` values: the next power of two, up to
    /// ``paddedLimit``.
    static func paddedCount(_ count: Int) -> Int {
        guard count > 1, count <= paddedLimit else { return count }
        return 1 << (Int.bitWidth - (count - 1).leadingZeroBitCount)
    }

    /// The SQL column for a key path, adding `LEFT JOIN`s for the to-one links it follows.
    private mutating func column(_ keyPath: String, relationship: Bool = false) throws -> String {
        try resolve(keyPath, relationship: relationship).column
    }

    /// The SQL column for a key path and the attribute it ends at (`nil` for a relationship),
    /// adding `LEFT JOIN`s for the to-one links it follows.
    private mutating func resolve(_ keyPath: String, relationship: Bool = false) throws -> (
        column: String, attribute: AttributeDescription?
    ) {
        try paths.resolve(keyPath, relationship: relationship)
    }
}
