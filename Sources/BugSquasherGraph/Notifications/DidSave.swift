/// A position in a store's persistent history: every committed save gets the next token.
///
/// Tokens only increase. A process that was away asks the store (or the daemon) for the changes
/// after the last token it saw, and misses nothing.
public struct HistoryToken: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The token's number.
    public var rawValue: Int64
    /// Creates a token.
    public init(rawValue: Int64) { self.rawValue = rawValue }
    /// The token before the first save.
    public static let zero = HistoryToken(rawValue: 0)
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { String(rawValue) }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(Int64.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// One object in a did-save: its ID, its version after the save, and what changed.
public struct ObjectChange: Sendable, Hashable, Codable {
    /// The object.
    public var objectID: ObjectID
    /// The row's version after the save (the last version it had, for a deletion).
    public var version: Int64
    /// Names of the attributes and relationships that changed; empty for an insert, where
    /// everything is new.
    public var changedKeys: [String]
    /// The row's new values, when the sender included them (saves do; the history does not).
    public var values: RowSnapshot?

    /// Creates a change.
    public init(objectID: ObjectID, version: Int64, changedKeys: [String], values: RowSnapshot? = nil) {
        self.objectID = objectID
        self.version = version
        self.changedKeys = changedKeys
        self.values = values
    }
}

/// The did-save notification: what one committed save inserted, updated and deleted.
///
/// A Sendable value with the save's ``HistoryToken``; the store appends it to its history table
/// in the same transaction as the save. Merge it into a context with
/// ``ObjectContext/merge(_:)``, which refreshes only the objects that context has registered.
public struct DidSave: Sendable, Hashable, Codable {
    /// The save's position in the store's history.
    public var token: HistoryToken
    /// The store that committed the save.
    public var storeIdentifier: String
    /// Objects inserted.
    public var inserted: [ObjectChange]
    /// Objects updated.
    public var updated: [ObjectChange]
    /// Objects deleted.
    public var deleted: [ObjectChange]

    /// Creates a did-save.
    public init(
        token: HistoryToken, storeIdentifier: String, inserted: [ObjectChange] = [], updated: [ObjectChange] = [],
        deleted: [ObjectChange] = []
    ) {
        self.token = token
        self.storeIdentifier = storeIdentifier
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }

    /// Whether nothing changed.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    /// How many objects changed: inserted, updated and deleted.
    public var objectCount: Int { inserted.count + updated.count + deleted.count }

    /// Every changed object ID.
    public var objectIDs: [ObjectID] { (inserted + updated + deleted).map(\.objectID) }

    /// The same did-save without row values: what the history table keeps.
    public var withoutValues: DidSave {
        var copy = self
        for i in copy.inserted.indices { copy.inserted[i].values = nil }
        for i in copy.updated.indices { copy.updated[i].values = nil }
        return copy
    }
}

/// One object whose save met a newer version in the store.
public struct MergeConflict: Sendable, Hashable {
    /// The object.
    public var objectID: ObjectID
    /// The version the saving context had (its snapshot).
    public var cachedVersion: Int64
    /// The version in the store, or `nil` when the store no longer has the row.
    public var persistedVersion: Int64?
    /// The store's current values, or `nil` when the row is gone, or when only its version was
    /// read (``init(objectID:cachedVersion:persistedVersion:)``).
    public var persisted: RowSnapshot?

    /// Creates a conflict record.
    public init(objectID: ObjectID, cachedVersion: Int64, persisted: RowSnapshot?) {
        self.objectID = objectID
        self.cachedVersion = cachedVersion
        self.persistedVersion = persisted?.version
        self.persisted = persisted
    }

    /// A conflict whose row is known by its version alone: an edit that named the version it
    /// expected (``GraphError/versionMismatch(of:expected:found:)``), refused before any merge
    /// policy could see it.
    public init(objectID: ObjectID, cachedVersion: Int64, persistedVersion: Int64) {
        self.objectID = objectID
        self.cachedVersion = cachedVersion
        self.persistedVersion = persistedVersion
        self.persisted = nil
    }
}
