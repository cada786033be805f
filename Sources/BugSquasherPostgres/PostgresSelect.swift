import BugSquasherGraph
import BugSquasherSQL
import Foundation
import PostgresNIO

/// Compiles a ``FetchDescription`` to PostgreSQL: joins for to-one key paths, a `WHERE` clause
/// with the same meaning as in-memory evaluation (and as the SQLite store's), `ORDER BY` with the
/// primary key last, `LIMIT`/`OFFSET`. Parameters are `$1`, `$2`, … in ``bindings``.
struct PostgresSelect {
    let model: ManagedObjectModel
    let entity: EntityDescription
    let storeIdentifier: String
    private var paths: KeyPathJoins
    private(set) var bindings = PostgresBindings()
    private var parameterCount = 0

    init(model: ManagedObjectModel, entity: EntityDescription, storeIdentifier: String) {
        self.model = model
        self.entity = entity
        self.storeIdentifier = storeIdentifier
        paths = KeyPathJoins(model: model, entity: entity)
    }

    /// The most key paths a fetch sorts by, as in the SQLite store.
    static let maximumSortKeys = 32

    /// The full `SELECT` for a fetch.
    mutating func select(_ request: FetchDescription) throws -> String {
        let whereClause = try request.predicate.map { try condition($0) } ?? "TRUE"
        var seen = Set<String>()
        let sort = request.sort.filter { seen.insert($0.keyPath).inserted }
        guard sort.count <= Self.maximumSortKeys else {
            throw GraphError(
                .invalidArgument, "The fetch sorts by \(sort.count) key paths.",
                advice: "Give at most \(Self.maximumSortKeys).")
        }
        let order = try sort.map { try orderTerm($0) } + ["t.pk ASC"]
        let head: String
        switch request.resultType {
        case .count: head = "SELECT t.pk"
        case .objectIDs: head = "SELECT t.pk"
        // The attributes asked for, the others as NULL: the unchanged-records lookup of an
        // import reads a key and a digest, not a bug's text.
        case .rows: head = "SELECT \(PostgresSchema.columns(of: entity, only: request.attributesToFetch))"
        }
        var sql =
            "\(head) FROM \(PostgresSchema.quote(entity.name)) t \(paths.joins.joined(separator: " ")) WHERE \(whereClause)"
        if request.resultType != .count { sql += " ORDER BY \(order.joined(separator: ", "))" }
        if request.limit != nil || request.offset > 0 {
            if request.resultType == .count { sql += " ORDER BY t.pk" }
            sql += " LIMIT \(request.limit.map(String.init) ?? "ALL") OFFSET \(request.offset)"
        }
        return request.resultType == .count ? "SELECT count(*) FROM (\(sql)) AS counted" : sql
    }

    /// The rows with the keys of `$1` that match `predicate`: another process's inserts as
    /// ``PostgresStore`` screens them for this process's observers (``InsertInterest``). The
    /// server can start from the predicate's index (a watch's keys) rather than from each key.
    mutating func rows(among keys: [Int64], matching predicate: ObjectPredicate) throws -> String {
        bindings.append(KeyArray(keys))
        parameterCount += 1
        let whereClause = try condition(predicate)
        return
            "SELECT \(PostgresSchema.columns(of: entity)) FROM \(PostgresSchema.quote(entity.name)) t "
            + "\(paths.joins.joined(separator: " ")) WHERE t.pk = ANY($1) AND \(whereClause)"
    }

    private mutating func condition(_ predicate: ObjectPredicate) throws -> String {
        switch predicate {
        case .all:
            return "TRUE"
        case .and(let items):
            return items.isEmpty ? "TRUE" : "(" + (try items.map { try condition($0) }).joined(separator: " AND ") + ")"
        case .or(let items):
            return items.isEmpty ? "FALSE" : "(" + (try items.map { try condition($0) }).joined(separator: " OR ") + ")"
        case .not(let item):
            // Two-valued, as the in-memory evaluation: a comparison with null is false there,
            // and its negation true, where SQL's NOT of unknown stays unknown.
            return "NOT COALESCE(\(try condition(item)), FALSE)"
        case .isIn(let keyPath, let values):
            return try inList(keyPath, values)
        case .relationship(let keyPath, let target):
            let column = try resolve(keyPath, relationship: true).column
            guard let target else { return "\(column) IS NULL" }
            guard !target.isTemporary, target.storeIdentifier == storeIdentifier else { return "FALSE" }
            return "\(column) = \(try parameter(.int64(target.key)))"
        case .compare(let keyPath, let op, let value):
            return try comparison(keyPath, op, value)
        }
    }

    /// The next parameter, `$n`, holding `value`.
    private mutating func parameter(_ value: Value) throws -> String {
        try PostgresStore.bind(value, to: &bindings)
        parameterCount += 1
        return "$\(parameterCount)"
    }

    /// The most values of an `IN` list written one parameter each; longer lists of text are one
    /// `text[]` parameter, which the server parses and binds in a fraction of the time (an
    /// importer looks up a chunk's keys with a list of 500).
    static let longestParameterList = 8

    /// `keyPath IN (values)`, with a null among the values as `IS NULL`.
    private mutating func inList(_ keyPath: String, _ values: [Value]) throws -> String {
        let (column, attribute) = try resolve(keyPath)
        let nonNull = values.filter { !$0.isNull && Self.fits($0, attribute) }
        var parts: [String] = []
        let texts = nonNull.compactMap { value -> String? in
            if case .string(let text) = value { PostgresText.encode(text) } else { nil }
        }
        if nonNull.count > Self.longestParameterList, texts.count == nonNull.count {
            bindings.append(texts)
            parameterCount += 1
            parts.append("\(column) = ANY($\(parameterCount)::text[])")
        } else if !nonNull.isEmpty {
            parts.append("\(column) IN (\(try nonNull.map { try parameter($0) }.joined(separator: ", ")))")
        }
        if values.contains(where: \.isNull) { parts.append("\(column) IS NULL") }
        return parts.isEmpty ? "FALSE" : "(" + parts.joined(separator: " OR ") + ")"
    }

    /// Whether a value can be compared with the attribute's column: PostgreSQL refuses to
    /// compare text with a number, where the in-memory evaluation finds them unequal.
    private static func fits(_ value: Value, _ attribute: AttributeDescription?) -> Bool {
        guard let attribute else { return true }
        switch (attribute.type, value) {
        case (.string, .string), (.bool, .bool), (.data, .data): return true
        case (.int64, .int64), (.int64, .double), (.double, .int64), (.double, .double): return true
        case (.date, .date), (.date, .double), (.date, .int64): return true
        default: return false
        }
    }

    /// `keyPath op value`, with null compared as the in-memory evaluation compares it.
    private mutating func comparison(_ keyPath: String, _ op: ComparisonOperator, _ value: Value) throws -> String {
        let (column, attribute) = try resolve(keyPath)
        switch op {
        case .equal where value.isNull: return "\(column) IS NULL"
        case .notEqual where value.isNull: return "\(column) IS NOT NULL"
        case .equal:
            guard Self.fits(value, attribute) else { return "FALSE" }
            return "\(column) = \(try parameter(value))"
        case .notEqual:
            guard Self.fits(value, attribute) else { return "TRUE" }
            return "\(column) IS DISTINCT FROM \(try parameter(value))"
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            guard !value.isNull, Self.fits(value, attribute) else { return "FALSE" }
            let symbol = [ComparisonOperator.less: "<", .lessOrEqual: "<=", .greater: ">", .greaterOrEqual: ">="][op]!
            return "\(column) \(symbol) \(try parameter(value))"
        case .contains, .containsCaseInsensitive, .beginsWith:
            guard attribute?.type == .string, case .string = value else { return "FALSE" }
            let needle = try parameter(value)
            switch op {
            case .contains: return "COALESCE(strpos(\(column), \(needle)) > 0, FALSE)"
            // Both lowered in the "C" collation, which folds ASCII letters only, as documented
            // (the needle's own collation would be the database's, which folds every letter).
            case .containsCaseInsensitive:
                return "COALESCE(strpos(lower(\(column)), lower(\(needle) COLLATE \"C\")) > 0, FALSE)"
            default: return "COALESCE(starts_with(\(column), \(needle)), FALSE)"
            }
        }
    }

    /// One `ORDER BY` term: nil first when ascending and last when descending, as SQLite and
    /// the in-memory stores sort it (PostgreSQL's default is the other way round). A required
    /// attribute of the entity itself holds no nil: its term stays plain, which its unique
    /// key's index serves.
    private mutating func orderTerm(_ sort: SortKey) throws -> String {
        let (column, attribute) = try resolve(sort.keyPath)
        let direction = sort.ascending ? "ASC" : "DESC"
        if !sort.keyPath.contains("."), attribute?.isOptional == false { return "\(column) \(direction)" }
        return "\(column) \(direction) NULLS \(sort.ascending ? "FIRST" : "LAST")"
    }

    /// The SQL column for a key path, adding `LEFT JOIN`s for the to-one links it follows.
    private mutating func column(_ keyPath: String) throws -> String {
        try resolve(keyPath).column
    }

    /// The SQL column for a key path and the attribute it ends at (`nil` for a relationship),
    /// adding `LEFT JOIN`s for the to-one links it follows.
    private mutating func resolve(_ keyPath: String, relationship: Bool = false) throws -> (
        column: String, attribute: AttributeDescription?
    ) {
        try paths.resolve(keyPath, relationship: relationship)
    }
}
