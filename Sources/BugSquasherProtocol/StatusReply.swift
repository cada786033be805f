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
    /// The job that waits for the store to take writes again (a database that does not answer,
    /// another program's write lock), to resume from its last committed chunk; `nil` when none
    /// does. ``activeJob`` is `nil` meanwhile.
    public var waitingJob: WireJobWait?
    /// Save conflicts the daemon's contexts resolved with their merge policy since it started
    /// (an edit and an import chunk that changed the same bug at the same time).
    public var conflictsResolved: Int?
    /// Which store: `SQLite /path/bugs.sqlite` or `PostgreSQL schema S of DATABASE at HOST:PORT`.
    public var store: String?
    /// Why the store cannot be used now (a database that does not answer); the counts above are
    /// then the last known or zero.
    public var storeProblem: String?
    /// This daemon's ID among the daemons of a shared store.
    public var daemon: String?
    /// The daemons attached to a shared store, this one included, with how far each is behind.
    public var daemons: [WireDaemon]?
    /// `ok`, or `degraded` when ``problems`` lists why (`squasherctl status` then exits 5).
    public var health: String?
    /// Why the daemon is degraded: a store that does not answer or refused a write, a job that
    /// failed, subscribers dropped for falling behind.
    public var problems: [WireProblem]?

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

/// A reply of `Import.Backup`: what the copy holds, then its bytes.
public struct BackupReply: Codable, Sendable {
    /// The store's identifier.
    public var storeIdentifier: String
    /// The newest history token the copy holds.
    public var token: Int64
    /// The copy's size in bytes.
    public var bytes: Int64
    /// The next bytes of the file, base64 (none in the first reply).
    public var data: String?

    /// Creates a reply.
    public init(storeIdentifier: String, token: Int64, bytes: Int64, data: String? = nil) {
        (self.storeIdentifier, self.token, self.bytes, self.data) = (storeIdentifier, token, bytes, data)
    }
}

/// The reply of `Jobs.Metrics`.
public struct MetricsReply: Codable, Sendable {
    /// The metrics in the Prometheus text format.
    public var text: String

    /// Creates a reply.
    public init(text: String) { self.text = text }
}

/// A reason a daemon is degraded, as `Jobs.Status` lists it.
public struct WireProblem: Codable, Sendable, Hashable {
    /// `store-unavailable`, `store-cannot-write`, `job-failed` or `subscribers-dropped`.
    public var code: String
    /// What happened, for a person.
    public var message: String

    /// Creates a problem.
    public init(code: String, message: String) {
        (self.code, self.message) = (code, message)
    }
}

/// A daemon attached to a shared store, as `Jobs.Status` lists it.
public struct WireDaemon: Codable, Sendable, Hashable {
    /// Its daemon ID (the `daemon` of the jobs it runs).
    public var id: String
    /// The host it runs on.
    public var host: String
    /// The newest save it has read from the history.
    public var token: Int64
    /// Saves committed after ``token``.
    public var behind: Int64
    /// Seconds since the database last heard from it; more than a few means it is gone.
    public var silentSeconds: Double

    /// Creates a description.
    public init(id: String, host: String, token: Int64, behind: Int64, silentSeconds: Double) {
        (self.id, self.host, self.token, self.behind, self.silentSeconds) = (id, host, token, behind, silentSeconds)
    }
}
