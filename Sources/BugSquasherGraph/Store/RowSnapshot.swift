/// The values of one row as a store holds them — Core Data's `NSIncrementalStoreNode`: the
/// attributes (in the entity's declaration order), the to-one links (in the order of the
/// entity's to-one relationships), and the row's version for optimistic locking.
public struct RowSnapshot: Sendable, Hashable, Codable {
    /// The row's version: 1 after insert, bumped by every save of the row.
    public var version: Int64
    /// Attribute values, in the entity's attribute order.
    public var attributes: [Value]
    /// To-one destinations, in the order of the entity's to-one relationships.
    public var toOne: [ObjectID?]

    /// Creates a snapshot.
    public init(version: Int64, attributes: [Value], toOne: [ObjectID?]) {
        self.version = version
        self.attributes = attributes
        self.toOne = toOne
    }
}

/// The identity and values of a row, as a fetch returns it.
public struct StoreRow: Sendable, Hashable {
    /// The row's object ID.
    public var objectID: ObjectID
    /// The row's values.
    public var snapshot: RowSnapshot

    /// Creates a row.
    public init(objectID: ObjectID, snapshot: RowSnapshot) {
        self.objectID = objectID
        self.snapshot = snapshot
    }
}

/// What a store records about itself, read and checked when it is opened.
public struct StoreMetadata: Sendable, Hashable, Codable {
    /// The store's UUID, part of every permanent object ID.
    public var storeIdentifier: String
    /// The store type (`"SQLite"`, `"InMemory"`, …).
    public var storeType: String
    /// The ``ManagedObjectModel/versionHash`` of the model the store is written with.
    public var modelVersionHash: String

    /// Creates metadata.
    public init(storeIdentifier: String, storeType: String, modelVersionHash: String) {
        self.storeIdentifier = storeIdentifier
        self.storeType = storeType
        self.modelVersionHash = modelVersionHash
    }
}
