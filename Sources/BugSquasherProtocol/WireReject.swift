// The rejects of an import job: `io.bugsquasher.Jobs.Rejects`.

/// `io.bugsquasher.Jobs.Reject`.
public struct WireReject: Codable, Sendable, Hashable {
    /// The line (or record number) in the input.
    public var line: Int64
    /// Why it was rejected.
    public var reason: String
    /// Creates a reject.
    public init(line: Int64, reason: String) {
        self.line = line
        self.reason = reason
    }
}

/// The parameters of `io.bugsquasher.Jobs.Rejects`.
public struct RejectsParameters: Codable, Sendable {
    /// The job.
    public var job: String
    /// At most this many.
    public var limit: Int?
    /// Skip this many first (in input order), for the next page.
    public var offset: Int?
    /// Creates parameters.
    public init(job: String, limit: Int? = nil, offset: Int? = nil) {
        self.job = job
        self.limit = limit
        self.offset = offset
    }
}

/// The reply of `io.bugsquasher.Jobs.Rejects`.
public struct RejectsReply: Codable, Sendable {
    /// The rejects, in input order.
    public var rejects: [WireReject]
    /// `true` when more rejects follow this page (ask again with `offset` past it); absent
    /// after the last page.
    public var more: Bool?
    /// Creates a reply.
    public init(rejects: [WireReject], more: Bool? = nil) {
        self.rejects = rejects
        self.more = more
    }
}
