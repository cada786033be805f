import BugSquasherGraph
import BugSquasherVarlink

/// The Varlink interface names.
public enum InterfaceName {
    /// The change feed.
    public static let changes = "io.bugsquasher.Changes"
    /// Reads.
    public static let store = "io.bugsquasher.Store"
    /// Import jobs (read-only).
    public static let jobs = "io.bugsquasher.Jobs"
    /// Imports and edits (write socket only).
    public static let importing = "io.bugsquasher.Import"
}

/// An empty parameter or reply object.
public struct Empty: Codable, Sendable {
    /// Creates it.
    public init() {}
}

/// `io.bugsquasher.Changes.ObjectChange`.
public struct WireObjectChange: Codable, Sendable, Hashable {
    /// The object ID URI.
    public var id: String
    /// The version after the save.
    public var version: Int64
    /// Changed keys (updates only).
    public var keys: [String]?
    /// New values, when asked for.
    public var values: WireValues?
    /// A run of IDs (only for a subscriber that asked for `idRuns`): this change stands for
    /// `count` objects of one entity, all at `version`, whose primary keys follow `id`'s one by
    /// one (`…/Bug/p1001`, `…/Bug/p1002`, …). ``WireSave``'s JSON reader expands runs.
    public var count: Int64?

    /// The most IDs one run stands for: longer runs are split by the writer, refused by the reader.
    public static let maximumRunLength: Int64 = 1_000_000

    /// Creates a change.
    public init(
        id: String, version: Int64, keys: [String]? = nil, values: WireValues? = nil, count: Int64? = nil
    ) {
        self.id = id
        self.version = version
        self.keys = keys
        self.values = values
        self.count = count
    }
}

/// `io.bugsquasher.Changes.Save`.
public struct WireSave: Codable, Sendable, Hashable {
    /// The save's history token.
    public var token: Int64
    /// Inserted objects.
    public var inserted: [WireObjectChange]
    /// Updated objects.
    public var updated: [WireObjectChange]
    /// Deleted objects.
    public var deleted: [WireObjectChange]

    /// Creates a save.
    public init(token: Int64, inserted: [WireObjectChange], updated: [WireObjectChange], deleted: [WireObjectChange]) {
        self.token = token
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }
}

/// `io.bugsquasher.Store.Row`.
public struct WireRow: Codable, Sendable, Hashable {
    /// The ID URI.
    public var id: String
    /// The version.
    public var version: Int64
    /// Attributes by name, to-one relationships as URIs.
    public var values: WireValues

    /// Creates a row.
    public init(id: String, version: Int64, values: WireValues) {
        self.id = id
        self.version = version
        self.values = values
    }
}
