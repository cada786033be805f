import BugSquasherGraph
public import BugSquasherModel

// The parameters and replies of `io.bugsquasher.Jobs`.

/// `io.bugsquasher.Jobs.Job`.
public struct WireJob: Codable, Sendable, Hashable {
    /// The job ID.
    public var id: String
    /// The name the submitter gave (the file name).
    public var name: String
    /// The input format.
    public var format: String
    /// Where the job is in its life (on the wire, its raw value: `running`).
    public var state: JobState
    /// Records read so far.
    public var recordsRead: Int64
    /// Records imported so far.
    public var imported: Int64
    /// Records rejected so far.
    public var rejected: Int64
    /// Bytes of the (decompressed) input processed.
    public var bytesDone: Int64
    /// Bytes of the (decompressed) input in all.
    public var bytesTotal: Int64
    /// When the job was created (ISO 8601).
    public var created: String
    /// When it finished (ISO 8601).
    public var finished: String?
    /// Why it failed.
    public var error: String?
    /// For a CSV export: the column each field was read from, and the columns not imported.
    public var columns: String?
    /// The daemon that runs the job (its ID, as `squasherctl status` lists the daemons of a
    /// shared store).
    public var daemon: String?

    /// Creates a job description.
    public init(
        id: String, name: String, format: String, state: JobState, recordsRead: Int64, imported: Int64, rejected: Int64,
        bytesDone: Int64, bytesTotal: Int64, created: String, finished: String?, error: String?, columns: String? = nil,
        daemon: String? = nil
    ) {
        self.id = id
        self.name = name
        self.format = format
        self.state = state
        self.recordsRead = recordsRead
        self.imported = imported
        self.rejected = rejected
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.created = created
        self.finished = finished
        self.error = error
        self.columns = columns
        self.daemon = daemon
    }

    /// Whether the job will not change any more.
    public var isFinal: Bool { state.isFinal }
}

/// A parameter object with one `job` field.
public struct JobParameter: Codable, Sendable {
    /// The job ID.
    public var job: String
    /// Creates the parameter.
    public init(job: String) { self.job = job }
}

/// A parameter object with an optional `limit`.
public struct LimitParameter: Codable, Sendable {
    /// At most this many.
    public var limit: Int?
    /// Creates the parameter.
    public init(limit: Int? = nil) { self.limit = limit }
}

/// A reply with one job (`Get`, `Watch`).
public struct JobReply: Codable, Sendable {
    /// The job.
    public var job: WireJob
    /// In `Watch`'s replies: why the job waits to resume (a database that does not answer,
    /// another program's write lock); ``job`` is then its record as last read.
    public var waiting: WireJobWait?
    /// Creates a reply.
    public init(job: WireJob, waiting: WireJobWait? = nil) { (self.job, self.waiting) = (job, waiting) }
}

/// A job waiting to resume, as `Jobs.Status` and `Jobs.Watch` report it.
public struct WireJobWait: Codable, Sendable, Hashable {
    /// The job's ID.
    public var job: String
    /// Why it waits, in words: "the database cannot be reached", "the store is locked by
    /// another program".
    public var reason: String
    /// When it began to wait (ISO 8601, UTC).
    public var since: String

    /// Creates a description.
    public init(job: String, reason: String, since: String) {
        (self.job, self.reason, self.since) = (job, reason, since)
    }
}

/// The reply of `io.bugsquasher.Jobs.List`.
public struct JobsReply: Codable, Sendable {
    /// The jobs, newest first.
    public var jobs: [WireJob]
    /// Creates a reply.
    public init(jobs: [WireJob]) { self.jobs = jobs }
}
