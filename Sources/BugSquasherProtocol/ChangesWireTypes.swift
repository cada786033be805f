import BugSquasherGraph

// The parameters and replies of `io.bugsquasher.Changes`.

/// The parameters of `io.bugsquasher.Changes.Subscribe`.
public struct SubscribeParameters: Codable, Sendable {
    /// Replay history after this token first.
    public var since: Int64?
    /// Only changes to registered IDs, and the inserts `insertsOf` names.
    public var registeredOnly: Bool?
    /// Include new values.
    public var includeValues: Bool?
    /// IDs to register before any history is replayed.
    public var register: [String]?
    /// The versions held, parallel to `register`; 0 marks a fault (only its deletion is sent).
    /// Without them, every change to a registered object is sent.
    public var versions: [Int64]?
    /// Inserted and deleted objects without values whose primary keys follow one another (one
    /// entity, one version) are sent as one change with a `count`: an import's chunk of 1,000
    /// new bugs is one element instead of 1,000.
    public var idRuns: Bool?
    /// With `registeredOnly`: inserted objects of this entity pass the filter when they match
    /// ``insertsMatching`` (a subscriber waiting for objects that do not exist yet).
    public var insertsOf: String?
    /// The predicate an inserted object of ``insertsOf`` must match, on its own attributes
    /// (`key IN ("TIMOB-7", "TIMOB-9")`); every insert of that entity passes without it.
    public var insertsMatching: String?

    /// Creates parameters.
    public init(
        since: Int64? = nil, registeredOnly: Bool? = nil, includeValues: Bool? = nil, register: [String]? = nil,
        versions: [Int64]? = nil, idRuns: Bool? = nil, insertsOf: String? = nil, insertsMatching: String? = nil
    ) {
        self.since = since
        self.registeredOnly = registeredOnly
        self.includeValues = includeValues
        self.register = register
        self.versions = versions
        self.idRuns = idRuns
        self.insertsOf = insertsOf
        self.insertsMatching = insertsMatching
    }
}

/// One reply of `io.bugsquasher.Changes.Subscribe`.
public struct SubscribeReply: Codable, Sendable {
    /// `subscribed`, `save`, `refresh` (an object a Register found stale) or `resync`.
    public var event: String
    /// The subscription ID (first reply).
    public var subscription: String?
    /// The newest token delivered.
    public var token: Int64
    /// The save, for `save` and `refresh`.
    public var save: WireSave?
    /// Where to resume after `resync`.
    public var resyncFrom: Int64?
    /// Why a `resync`: ``ResyncReason/behind`` or ``ResyncReason/historyExpired``.
    public var reason: String?

    /// Creates a reply.
    public init(
        event: String, subscription: String? = nil, token: Int64, save: WireSave? = nil, resyncFrom: Int64? = nil,
        reason: String? = nil
    ) {
        self.event = event
        self.subscription = subscription
        self.token = token
        self.save = save
        self.resyncFrom = resyncFrom
        self.reason = reason
    }
}

/// Why squasherd asked a subscriber to resync.
public enum ResyncReason {
    /// It fell too far behind: resume from `resyncFrom`, the history replays what it missed.
    public static let behind = "behind"
    /// Its `since` is older than the retained history: resume from `resyncFrom` (the current
    /// token) and refetch what it holds, since the saves in between are gone.
    public static let historyExpired = "historyExpired"
}

/// The parameters of Register / Unregister.
public struct RegisterParameters: Codable, Sendable {
    /// The subscription.
    public var subscription: String
    /// The IDs.
    public var ids: [String]
    /// The versions held, parallel to `ids` (Register only): newer stored versions are sent at
    /// once as a refresh; 0 marks a fault, whose updates are not sent (its deletion is). Without
    /// them, every change to the IDs is sent.
    public var versions: [Int64]?

    /// Creates parameters.
    public init(subscription: String, ids: [String], versions: [Int64]? = nil) {
        self.subscription = subscription
        self.ids = ids
        self.versions = versions
    }
}

/// The reply of Register / Unregister.
public struct RegisterReply: Codable, Sendable {
    /// How many IDs the subscription holds now.
    public var registered: Int
    /// Creates a reply.
    public init(registered: Int) { self.registered = registered }
}
