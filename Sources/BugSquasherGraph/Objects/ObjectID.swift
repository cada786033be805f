import Synchronization

/// The identity of one object: store identifier + entity + primary key, or a temporary ID for an
/// object not saved yet. A `Sendable` value, passed between contexts, tasks and processes instead of
/// the object; its stable URI form is what travels on the wire:
///
/// ```swift
/// let id = bug.objectID                       // x-bugsquasher://6F1C…/Bug/p42
/// let same = ObjectID(uri: id.uriString)      // == id
/// ```
public struct ObjectID: Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    /// The URI scheme of object IDs.
    public static let scheme = "x-bugsquasher"
    /// The store identifier that temporary IDs carry in their URI.
    public static let temporaryStore = "temporary"

    /// The identifier (a UUID string) of the store that holds the object; empty for a temporary ID.
    public let storeIdentifier: String
    /// The entity's name.
    public let entityName: String
    /// The primary key in the store (permanent), or a process-unique number (temporary).
    public let key: Int64
    /// Whether this ID was assigned on insert and is replaced by a permanent one on save.
    public let isTemporary: Bool

    /// A permanent ID.
    public init(store: String, entity: String, primaryKey: Int64) {
        storeIdentifier = store
        entityName = entity
        key = primaryKey
        isTemporary = false
    }

    private init(temporaryFor entity: String, number: Int64) {
        storeIdentifier = ""
        entityName = entity
        key = number
        isTemporary = true
    }

    private static let temporaryCounter = Atomic<Int64>(0)

    /// A new temporary ID, unique within this process.
    public static func temporary(entity: String) -> ObjectID {
        ObjectID(temporaryFor: entity, number: temporaryCounter.add(1, ordering: .relaxed).newValue)
    }

    /// The primary key of a permanent ID; `nil` for a temporary one.
    public var primaryKey: Int64? { isTemporary ? nil : key }

    /// The URI form: `x-bugsquasher://STORE-UUID/Entity/p42`, or
    /// `x-bugsquasher://temporary/Entity/t7` for a temporary ID.
    public var uriString: String {
        isTemporary
            ? "\(Self.scheme)://\(Self.temporaryStore)/\(entityName)/t\(key)"
            : "\(Self.scheme)://\(storeIdentifier)/\(entityName)/p\(key)"
    }

    /// Parses the URI form; `nil` when the string is not an object ID URI as ``uriString``
    /// writes it: the number is 1 or more, in decimal digits without a sign or leading zeros, so
    /// that one object has one URI (`p01` and `p+1` are not `p1`).
    public init?(uri: String) { self.init(uri: uri, reusingStore: nil) }

    /// Parses the URI form as ``init(uri:)`` does; when the URI names the store `store`, the ID
    /// keeps that string rather than a copy. A feed's IDs all name one store: a shared string
    /// is not allocated for each, and IDs holding it compare without reading its 36 bytes.
    public init?(uri: String, reusingStore store: String?) {
        // Read as bytes: every change of the feed carries an ID, parsed on the daemon's write
        // path and by each subscriber (splitting the string cost each a few microseconds).
        var uri = uri
        guard
            let id = uri.withUTF8({ bytes -> ObjectID? in
                let slash = UInt8(ascii: "/")
                let prefix = Self.uriPrefix
                guard bytes.count > prefix.count, bytes.starts(with: prefix) else { return nil }
                var storeEnd = prefix.count
                while storeEnd < bytes.count, bytes[storeEnd] != slash { storeEnd += 1 }
                var entityEnd = storeEnd + 1
                while entityEnd < bytes.count, bytes[entityEnd] != slash { entityEnd += 1 }
                let tagIndex = entityEnd + 1
                guard storeEnd > prefix.count, entityEnd < bytes.count, entityEnd > storeEnd + 1,
                    tagIndex + 1 < bytes.count
                else { return nil }
                var number: Int64 = 0
                for byte in bytes[(tagIndex + 1)...] {
                    // Decimal digits only (no sign, no further "/"), without a leading zero.
                    guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), number > 0 || byte != UInt8(ascii: "0")
                    else { return nil }
                    let (shifted, overflowed) = number.multipliedReportingOverflow(by: 10)
                    let (sum, overflowedAgain) = shifted.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
                    guard !overflowed, !overflowedAgain else { return nil }
                    number = sum
                }
                let storeBytes = UnsafeBufferPointer(rebasing: bytes[prefix.count..<storeEnd])
                let entity = String(
                    decoding: UnsafeBufferPointer(rebasing: bytes[(storeEnd + 1)..<entityEnd]), as: UTF8.self)
                let isTemporary = StoredText.bytesEqual(Self.temporaryStore, storeBytes)
                switch bytes[tagIndex] {
                case UInt8(ascii: "p") where !isTemporary:
                    let known = store.flatMap { StoredText.bytesEqual($0, storeBytes) ? $0 : nil }
                    return ObjectID(
                        store: known ?? String(decoding: storeBytes, as: UTF8.self), entity: entity, primaryKey: number)
                case UInt8(ascii: "t") where isTemporary:
                    return ObjectID(temporaryFor: entity, number: number)
                default:
                    return nil
                }
            })
        else { return nil }
        self = id
    }

    /// `x-bugsquasher://`, the start of every ID's URI.
    private static let uriPrefix = Array("\(scheme)://".utf8)

    public var description: String { uriString }

    /// Hashes the key, whether it is temporary, and the entity name's length: IDs of one store
    /// differ there, and leaving out the strings (the 36-byte store identifier, the entity name's
    /// bytes) keeps dictionary look-ups cheap — every object of every chunk is looked up by ID
    /// several times. Two entities with names of one length share hashes only for equal keys;
    /// equality still compares everything.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(key)
        hasher.combine(entityName.utf8.count << 1 | (isTemporary ? 1 : 0))
    }

    public static func == (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.key == rhs.key && lhs.isTemporary == rhs.isTemporary && lhs.entityName == rhs.entityName
            && lhs.storeIdentifier == rhs.storeIdentifier
    }

    /// Orders IDs by entity, then key: a stable order for reports and tests.
    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool {
        (lhs.entityName, lhs.isTemporary ? 1 : 0, lhs.key) < (rhs.entityName, rhs.isTemporary ? 1 : 0, rhs.key)
    }

    public init(from decoder: any Decoder) throws {
        let string = try decoder.singleValueContainer().decode(String.self)
        guard let id = ObjectID(uri: string) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "'\(string)' is not an object ID URI (expected x-bugsquasher://STORE/Entity/p42)")
            )
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(uriString)
    }
}
