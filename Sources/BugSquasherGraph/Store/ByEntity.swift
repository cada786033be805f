/// Values for the few entities one save touches (a chunk's bugs, comments, people), found by a
/// scan of the entity names rather than by hashing each object's entity name: a save of
/// thousands of objects names a handful of entities.
///
/// Inlinable, so that it is specialized where it is used (in the stores): unspecialized, each
/// lookup instantiated tuple metadata, 3 % of an import's CPU.
@frozen
package struct ByEntity<Value> {
    /// The entity names, in order of first appearance.
    @usableFromInline package private(set) var names: [String] = []
    /// The values, in the order of ``names``.
    @usableFromInline package private(set) var values: [Value] = []

    /// No entities yet.
    @inlinable package init() {}

    /// The entities in order of first appearance, with their values.
    @inlinable package var entries: [(entity: String, value: Value)] {
        Array(zip(names, values).map { (entity: $0, value: $1) })
    }

    /// The position of `entity`; `nil` when it was never added.
    @inlinable package func index(of entity: String) -> Int? {
        names.withUnsafeBufferPointer { names in
            for index in names.indices where names[index] == entity { return index }
            return nil
        }
    }

    /// The position of `entity`, added with `make()` when it is not there yet.
    @inlinable package mutating func index(of entity: String, orAdd make: () throws -> Value) rethrows -> Int {
        if let index = index(of: entity) { return index }
        names.append(entity)
        values.append(try make())
        return names.count - 1
    }

    /// The value at `index`, changed in place (`groups[i].append(x)` does not copy the array
    /// it appends to).
    @inlinable package subscript(index: Int) -> Value {
        get { values[index] }
        _modify { yield &values[index] }
    }
}
