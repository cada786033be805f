/// A request a coordinator sends to its store: ``FetchDescription`` or ``SaveChanges``.
///
/// The set is open, as with `NSPersistentStoreRequest`: a store that receives a kind it does not
/// know must throw ``GraphError/Code/unsupportedRequest``, never trap.
public protocol StoreRequest: Sendable {}

/// The store-level form of a fetch.
public struct FetchDescription: StoreRequest, Hashable {
    /// What a fetch returns.
    public enum ResultType: Sendable, Hashable {
        /// Object IDs only (objects become faults).
        case objectIDs
        /// IDs with their row values (prefetching).
        case rows
        /// The number of matching rows.
        case count
    }

    /// The entity to fetch.
    public var entityName: String
    /// The filter.
    public var predicate: ObjectPredicate?
    /// The order.
    public var sort: [SortKey]
    /// At most this many rows.
    public var limit: Int?
    /// Skip this many rows first.
    public var offset: Int
    /// What to return.
    public var resultType: ResultType
    /// For ``ResultType/rows``: the attributes to read; the others, and the to-one
    /// relationships, may come back null (a store may read more than asked). `nil` reads
    /// everything. Such rows are for the caller to read — a key and a digest, say, without a
    /// bug's text — never snapshots for a context, as `propertiesToFetch` in Core Data.
    public var attributesToFetch: Set<String>?

    /// Creates a fetch description.
    public init(
        entityName: String, predicate: ObjectPredicate? = nil, sort: [SortKey] = [], limit: Int? = nil, offset: Int = 0,
        resultType: ResultType = .objectIDs, attributesToFetch: Set<String>? = nil
    ) {
        self.entityName = entityName
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
        self.resultType = resultType
        self.attributesToFetch = attributesToFetch
    }
}

/// The result of a ``FetchDescription``.
public enum StoreFetchResult: Sendable {
    /// Matching object IDs, in order.
    case objectIDs([ObjectID])
    /// Matching rows, in order.
    case rows([StoreRow])
    /// The number of matches.
    case count(Int)
}

/// Everything one context save writes, applied by the store in one transaction.
///
/// Updates and deletes carry the version the context last saw; a store whose row has another
/// version rejects the whole save with ``GraphError/Code/mergeConflict`` and the list of
/// ``MergeConflict``s, so that the context can apply its merge policy and try again.
public struct SaveChanges: StoreRequest {
    /// A row to insert or update.
    public struct Row: Sendable, Hashable {
        /// The row's permanent ID.
        public var objectID: ObjectID
        /// The version the context last saw (0 for an insert).
        public var expectedVersion: Int64
        /// Every attribute value, in entity order.
        public var attributes: [Value]
        /// Every to-one destination, in the entity's to-one order.
        public var toOne: [ObjectID?]
        /// The names of the attributes and relationships that changed.
        public var changedKeys: [String]

        /// Creates a row change.
        public init(
            objectID: ObjectID, expectedVersion: Int64, attributes: [Value], toOne: [ObjectID?], changedKeys: [String]
        ) {
            self.objectID = objectID
            self.expectedVersion = expectedVersion
            self.attributes = attributes
            self.toOne = toOne
            self.changedKeys = changedKeys
        }
    }

    /// A row to delete.
    public struct Deletion: Sendable, Hashable {
        /// The row's ID.
        public var objectID: ObjectID
        /// The version the context last saw.
        public var expectedVersion: Int64

        /// Creates a deletion.
        public init(objectID: ObjectID, expectedVersion: Int64) {
            self.objectID = objectID
            self.expectedVersion = expectedVersion
        }
    }

    /// A change to a many-to-many relationship, given on the relationship's owning side (see
    /// ``RelationshipDescription/ownsManyToManyLinks(in:)``).
    public struct Link: Sendable, Hashable {
        /// The owning object.
        public var source: ObjectID
        /// The owning side's relationship name.
        public var relationship: String
        /// The object linked or unlinked.
        public var destination: ObjectID

        /// Creates a link change.
        public init(source: ObjectID, relationship: String, destination: ObjectID) {
            self.source = source
            self.relationship = relationship
            self.destination = destination
        }
    }

    /// Rows to insert.
    public var inserted: [Row] = []
    /// Rows to update.
    public var updated: [Row] = []
    /// Rows to delete (links and join rows go with them).
    public var deleted: [Deletion] = []
    /// Many-to-many links to add.
    public var linksAdded: [Link] = []
    /// Many-to-many links to remove.
    public var linksRemoved: [Link] = []
    /// Whether the save is bulk work (an import's chunk), which a store with an ``EditsFirst``
    /// holds back for a moment after an interactive save.
    public var isBulk = false

    /// Creates an empty save.
    public init() {}

    /// Whether there is nothing to write.
    public var isEmpty: Bool {
        inserted.isEmpty && updated.isEmpty && deleted.isEmpty && linksAdded.isEmpty && linksRemoved.isEmpty
    }
}

/// The result a store returns for a request.
public enum StoreResult: Sendable {
    /// The result of a ``FetchDescription``.
    case fetched(StoreFetchResult)
    /// The did-save of a ``SaveChanges``, carrying its history token and new versions.
    case saved(DidSave)
}

extension RelationshipDescription {
    /// For a many-to-many relationship, whether this side writes the join rows: the side whose
    /// entity name sorts first (the relationship name breaks ties for a self-relationship).
    public func ownsManyToManyLinks(in entity: String) -> Bool {
        (entity, name) < (destination, inverse)
    }
}
