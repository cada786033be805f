import Synchronization

/// The identity of one object: store identifier + entity + primary key, or a temporary ID for an
/// object inserted but not yet saved.
///
/// Object IDs are Sendable values: pass them between contexts, tasks and processes, never the
/// objects themselves. Their URI form is stable and is what travels on the wire:
///
/// ```swift
/// let id = bug.objectID                       // x-bugsquasher://6F1C…/Bug/p42
/// let same = ObjectID(uri: id.uriString)      // == id
/// let bugAgain = try context.existingObject(with: same!)
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
    public init?(uri: String) {
        let prefix = "\(Self.scheme)://"
        guard uri.hasPrefix(prefix) else { return nil }
        let parts = uri.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, let tag = parts[2].first,
              let number = Int64(parts[2].dropFirst()), number > 0, String(number) == parts[2].dropFirst()
        else { return nil }
        switch tag {
        case "p" where parts[0] != Self.temporaryStore:
            self.init(store: String(parts[0]), entity: String(parts[1]), primaryKey: number)
        case "t" where parts[0] == Self.temporaryStore:
            self.init(temporaryFor: String(parts[1]), number: number)
        default:
            return nil
        }
    }

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
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(string)' is not an object ID URI (expected x-bugsquasher://STORE/Entity/p42)"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(uriString)
    }
}
