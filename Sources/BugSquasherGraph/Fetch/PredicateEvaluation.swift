/// Something that can read the value at a key path: an object in a context, or a row in a store.
package protocol KeyPathValueReading {
    /// The attribute value at the end of the key path; `.null` when a to-one link on the way is
    /// empty or the path is unknown.
    func value(atKeyPath path: String) -> Value
    /// The object ID a to-one relationship at the end of the key path points to.
    func objectID(atKeyPath path: String) -> ObjectID?
}

extension ObjectPredicate {
    /// Evaluates the predicate in memory, with the same meaning as the SQL the SQLite store runs.
    package func evaluate(on subject: some KeyPathValueReading) -> Bool {
        switch self {
        case .all:
            return true
        case .compare(let keyPath, let op, let constant):
            return Self.compare(subject.value(atKeyPath: keyPath), op, constant)
        case .isIn(let keyPath, let values):
            let value = subject.value(atKeyPath: keyPath)
            return values.contains { Self.compare(value, .equal, $0) }
        case .relationship(let keyPath, let target):
            return subject.objectID(atKeyPath: keyPath) == target
        case .and(let items):
            return items.allSatisfy { $0.evaluate(on: subject) }
        case .or(let items):
            return items.contains { $0.evaluate(on: subject) }
        case .not(let item):
            return !item.evaluate(on: subject)
        }
    }

    /// SQL semantics: a comparison with null is false (except `!=` against a non-null constant,
    /// which SQLite's `IS NOT` makes true, and `== nil`, which is `IS NULL`).
    static func compare(_ value: Value, _ op: ComparisonOperator, _ constant: Value) -> Bool {
        switch op {
        case .equal:
            return equal(value, constant)
        case .notEqual:
            return !equal(value, constant)
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            guard !value.isNull, !constant.isNull else { return false }
            if equal(value, constant) { return op == .lessOrEqual || op == .greaterOrEqual }
            let isLess = Value.ascending(value, constant)
            return (op == .less || op == .lessOrEqual) ? isLess : !isLess
        case .contains, .containsCaseInsensitive, .beginsWith:
            guard case .string(let text) = value, case .string(let needle) = constant else { return false }
            switch op {
            case .contains: return needle.isEmpty || text.utf8.firstRange(of: needle.utf8) != nil
            case .containsCaseInsensitive:
                return needle.isEmpty || asciiLowercased(text).utf8.firstRange(of: asciiLowercased(needle).utf8) != nil
            default: return text.utf8.starts(with: needle.utf8)
            }
        }
    }

    private static func equal(_ lhs: Value, _ rhs: Value) -> Bool {
        switch (lhs, rhs) {
        case (.int64(let a), .double(let b)): return Double(a) == b
        case (.double(let a), .int64(let b)): return a == Double(b)
        default: return lhs == rhs
        }
    }

    /// Lowercases ASCII letters only, as SQLite's `lower()` does.
    static func asciiLowercased(_ text: String) -> String {
        String(decoding: text.utf8.map { (65...90).contains($0) ? $0 + 32 : $0 }, as: UTF8.self)
    }
}

extension Array where Element == SortKey {
    /// Whether `lhs` sorts before `rhs` under these sort keys (stable ties are left to the caller).
    package func orders(_ lhs: some KeyPathValueReading, before rhs: some KeyPathValueReading) -> Bool {
        for key in self {
            let a = lhs.value(atKeyPath: key.keyPath)
            let b = rhs.value(atKeyPath: key.keyPath)
            if a == b { continue }
            return key.ascending ? Value.ascending(a, b) : Value.ascending(b, a)
        }
        return false
    }
}

extension Array where Element: KeyPathValueReading {
    /// The elements sorted by `keys`, keeping the current order among equal elements.
    package func sortedStably(by keys: [SortKey]) -> [Element] {
        guard !keys.isEmpty else { return self }
        return enumerated().sorted { lhs, rhs in
            if keys.orders(lhs.element, before: rhs.element) { return true }
            if keys.orders(rhs.element, before: lhs.element) { return false }
            return lhs.offset < rhs.offset
        }.map(\.element)
    }
}

/// A reader over a stored row that follows to-one links to other rows.
package protocol RowKeyPathReading: KeyPathValueReading {
    /// The row's entity.
    var entity: EntityDescription { get }
    /// The row's values.
    var row: RowSnapshot { get }
    /// A reader for the row an ID names, if it exists.
    func follow(_ id: ObjectID) -> Self?
}

extension RowKeyPathReading {
    package func value(atKeyPath path: String) -> Value {
        guard let dot = path.firstIndex(of: ".") else {
            return entity.attributeIndex[path].map { row.attributes[$0] } ?? .null
        }
        return next(String(path[..<dot]))?.value(atKeyPath: String(path[path.index(after: dot)...])) ?? .null
    }

    package func objectID(atKeyPath path: String) -> ObjectID? {
        guard let dot = path.firstIndex(of: ".") else {
            return entity.toOneIndex[path].flatMap { row.toOne[$0] }
        }
        return next(String(path[..<dot]))?.objectID(atKeyPath: String(path[path.index(after: dot)...]))
    }

    private func next(_ relationship: String) -> Self? {
        guard let slot = entity.toOneIndex[relationship], let id = row.toOne[slot] else { return nil }
        return follow(id)
    }
}
