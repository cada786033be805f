/// Values for the few entities one save touches (a chunk's bugs, comments, people), found by a
/// scan of the entity names rather than by hashing each object's entity name: a save of
/// thousands of objects names a handful of entities.
package struct ByEntity<Value> {
    /// No entities yet.
    package init() {}

    /// The entities in order of first appearance, with their values.
    package private(set) var entries: [(entity: String, value: Value)] = []

    /// The position of `entity`; `nil` when it was never added.
    package func index(of entity: String) -> Int? {
        entries.firstIndex { $0.entity == entity }
    }

    /// The position of `entity`, added with `make()` when it is not there yet.
    package mutating func index(of entity: String, orAdd make: () throws -> Value) rethrows -> Int {
        if let index = index(of: entity) { return index }
        entries.append((entity, try make()))
        return entries.count - 1
    }

    /// The value at `index`.
    package subscript(index: Int) -> Value {
        get { entries[index].value }
        set { entries[index].value = newValue }
    }
}
