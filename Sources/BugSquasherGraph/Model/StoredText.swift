import Foundation

/// A string that is equal, hashed and ordered by its UTF-8 bytes, the way the store compares text
/// (SQLite's `BINARY` collation), not by Swift's canonical equivalence: `"CAF\u{C9}"` and
/// `"CAFE\u{301}"` are two keys in the store. A dictionary or set meant to mirror the store's rows
/// (an importer's bugs by key) must use it, or two records fall into one entry and one is lost.
///
/// ```swift
/// var bugs: [StoredText: Bug] = [:]
/// bugs[StoredText(record.key)] = bug
/// ```
public struct StoredText: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The string.
    public let string: String

    /// Wraps `string`.
    public init(_ string: String) {
        self.string = string
    }

    /// Whether the two strings have the same UTF-8 bytes.
    public static func == (lhs: StoredText, rhs: StoredText) -> Bool {
        bytesEqual(lhs.string, rhs.string)
    }

    /// Byte order, which for UTF-8 is the order of the Unicode scalar values.
    public static func < (lhs: StoredText, rhs: StoredText) -> Bool {
        let compared: Bool?? = lhs.string.utf8.withContiguousStorageIfAvailable { left in
            rhs.string.utf8.withContiguousStorageIfAvailable { right in
                let common = min(left.count, right.count)
                let order = common == 0 ? 0 : memcmp(left.baseAddress!, right.baseAddress!, common)
                return order != 0 ? order < 0 : left.count < right.count
            }
        }
        if let compared, let compared { return compared }
        return lhs.string.utf8.lexicographicallyPrecedes(rhs.string.utf8)
    }

    /// Hashes the UTF-8 bytes.
    public func hash(into hasher: inout Hasher) {
        let hashed: Void? = string.utf8.withContiguousStorageIfAvailable {
            hasher.combine(bytes: UnsafeRawBufferPointer($0))
        }
        if hashed == nil {
            for byte in string.utf8 { hasher.combine(byte) }
        }
        hasher.combine(string.utf8.count)
    }

    /// The string itself.
    public var description: String { string }

    /// Whether `lhs` and `rhs` have the same UTF-8 bytes.
    static func bytesEqual(_ lhs: String, _ rhs: String) -> Bool {
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        var rhs = rhs
        return rhs.withUTF8 { bytesEqual(lhs, $0) }
    }

    /// Whether `string`'s UTF-8 bytes are `bytes`, compared with `memcmp`. `withUTF8` reads a
    /// small string from a copy on the stack: nothing is allocated (the view's
    /// `withContiguousStorageIfAvailable` allocated for each comparison).
    static func bytesEqual(_ string: String, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var string = string
        return string.withUTF8 { own in
            own.count == bytes.count && (own.isEmpty || memcmp(own.baseAddress!, bytes.baseAddress!, own.count) == 0)
        }
    }
}
