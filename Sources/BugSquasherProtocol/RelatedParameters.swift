// The parameters and reply of `io.bugsquasher.Store.Related`.

/// The parameters of `Related`.
public struct RelatedParameters: Codable, Sendable {
    /// The object.
    public var id: String
    /// The to-many relationship.
    public var relationship: String
    /// Skip this many of the related IDs (for the next page of a reply that had `more`).
    public var offset: Int?
    /// Creates parameters.
    public init(id: String, relationship: String, offset: Int? = nil) {
        self.id = id
        self.relationship = relationship
        self.offset = offset
    }
}

/// An ID list reply.
public struct IDsReply: Codable, Sendable {
    /// The IDs.
    public var ids: [String]
    /// `true` when the daemon's per-call cap cut the list: call again with `offset` advanced by
    /// the IDs received.
    public var more: Bool?
    /// Creates a reply.
    public init(ids: [String], more: Bool? = nil) {
        self.ids = ids
        self.more = more
    }
}
