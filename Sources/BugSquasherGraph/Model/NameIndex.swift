/// The positions of an entity's attribute or relationship names, looked up by name.
///
/// Every typed property of an object (`bug.title = …`) looks its name up here, several times
/// per record an import writes. An entity has a handful of names, so a scan that compares
/// lengths first and then the bytes answers sooner than hashing the name for a dictionary;
/// entities with many names use one. Names that differ in their bytes are different names, as
/// the store's columns are (`"cafe\u{301}"` does not find `"café"` written with U+00E9).
public struct NameIndex: Sendable {
    private struct Entry: Sendable {
        var length: Int
        var name: String
    }

    /// One array, so that reading the index out of its entity retains one buffer.
    private let entries: [Entry]
    private let byName: [StoredText: Int]?

    /// Above this many names, a dictionary answers instead of the scan.
    private static let scanLimit = 16

    /// The positions of `names`; a name that repeats keeps its first position.
    public init(_ names: [String]) {
        entries = names.map { Entry(length: $0.utf8.count, name: $0) }
        byName =
            names.count > Self.scanLimit
            ? Dictionary(names.enumerated().map { (StoredText($1), $0) }, uniquingKeysWith: { first, _ in first }) : nil
    }

    /// The position of `name`, or `nil` when there is no such name.
    public subscript(name: String) -> Int? {
        if let byName { return byName[StoredText(name)] }
        let length = name.utf8.count
        return entries.withUnsafeBufferPointer { entries in
            for index in entries.indices
            where entries[index].length == length && StoredText.bytesEqual(entries[index].name, name) {
                return index
            }
            return nil
        }
    }
}
