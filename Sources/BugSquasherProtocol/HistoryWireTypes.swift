// The parameters and reply of `io.bugsquasher.Changes.History`.

/// The parameters of `io.bugsquasher.Changes.History`.
public struct HistoryParameters: Codable, Sendable {
    /// The token to read the saves after.
    public var after: Int64
    /// How many saves at most (the daemon's page size when `nil`).
    public var limit: Int?
    /// Creates parameters.
    public init(after: Int64, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }
}

/// The reply of `io.bugsquasher.Changes.History`.
public struct HistoryReply: Codable, Sendable {
    /// The saves after the token asked for, in token order.
    public var saves: [WireSave]
    /// The newest token of the store when the page was read.
    public var token: Int64
    /// Creates a reply.
    public init(saves: [WireSave], token: Int64) {
        self.saves = saves
        self.token = token
    }
}
