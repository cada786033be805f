// The reply of `io.bugsquasher.Jobs.Status`.

/// The reply of `io.bugsquasher.Jobs.Status`.
public struct StatusReply: Codable, Sendable {
    /// The store's UUID.
    public var storeIdentifier: String
    /// The newest history token.
    public var token: Int64
    /// How many bugs the store holds.
    public var bugs: Int
    /// How many change-feed subscribers are connected.
    public var subscribers: Int
    /// How many clients follow an import job with `Jobs.Watch` (`squasherctl import --wait`);
    /// not counted in ``subscribers``.
    public var jobFollowers: Int?
    /// The running job, if any.
    public var activeJob: WireJob?
    /// Save conflicts the daemon's contexts resolved with their merge policy since it started
    /// (an edit and an import chunk that changed the same bug at the same time).
    public var conflictsResolved: Int?
    /// Creates a reply.
    public init(
        storeIdentifier: String, token: Int64, bugs: Int, subscribers: Int, jobFollowers: Int? = nil,
        activeJob: WireJob?, conflictsResolved: Int? = nil
    ) {
        self.storeIdentifier = storeIdentifier
        self.token = token
        self.bugs = bugs
        self.subscribers = subscribers
        self.jobFollowers = jobFollowers
        self.activeJob = activeJob
        self.conflictsResolved = conflictsResolved
    }
}
