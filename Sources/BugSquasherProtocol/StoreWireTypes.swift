import BugSquasherGraph

// The parameters and replies of `io.bugsquasher.Store`.

/// The parameters of `io.bugsquasher.Store.Fetch`.
public struct FetchParameters: Codable, Sendable {
    /// The entity.
    public var entity: String
    /// A predicate in the text syntax.
    public var predicate: String?
    /// Sort key paths, `-` first for descending.
    public var sort: [String]?
    /// Limit.
    public var limit: Int?
    /// Offset.
    public var offset: Int?
    /// `ids`, `rows` or `count`.
    public var result: String?

    /// Creates parameters.
    public init(
        entity: String, predicate: String? = nil, sort: [String]? = nil, limit: Int? = nil, offset: Int? = nil,
        result: String? = nil
    ) {
        self.entity = entity
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
        self.result = result
    }
}

/// The reply of `io.bugsquasher.Store.Fetch`.
public struct FetchReply: Codable, Sendable {
    /// IDs, for `ids`.
    public var ids: [String]?
    /// Rows, for `rows`.
    public var rows: [WireRow]?
    /// The count, for `count`.
    public var count: Int?
    /// `true` when the daemon's per-call cap cut `ids` or `rows` short of the limit asked for
    /// (or of the whole result, when no limit was given): call again with `offset` advanced by
    /// what this reply holds. Absent otherwise.
    public var more: Bool?

    /// Creates a reply.
    public init(ids: [String]? = nil, rows: [WireRow]? = nil, count: Int? = nil, more: Bool? = nil) {
        self.ids = ids
        self.rows = rows
        self.count = count
        self.more = more
    }
}

/// IDs in, rows out (`Values`).
public struct IDsParameters: Codable, Sendable {
    /// The IDs.
    public var ids: [String]
    /// Creates parameters.
    public init(ids: [String]) { self.ids = ids }
}

/// The reply of `Values`.
public struct RowsReply: Codable, Sendable {
    /// The rows.
    public var rows: [WireRow]
    /// Creates a reply.
    public init(rows: [WireRow]) { self.rows = rows }
}

/// The reply of `io.bugsquasher.Store.Info`.
public struct StoreInfo: Codable, Sendable {
    /// The store UUID.
    public var storeIdentifier: String
    /// The store type.
    public var storeType: String
    /// The model hash.
    public var modelVersionHash: String
    /// The newest history token.
    public var token: Int64
    /// The entity names.
    public var entities: [String]

    /// Creates info.
    public init(storeIdentifier: String, storeType: String, modelVersionHash: String, token: Int64, entities: [String])
    {
        self.storeIdentifier = storeIdentifier
        self.storeType = storeType
        self.modelVersionHash = modelVersionHash
        self.token = token
        self.entities = entities
    }
}
