import BugSquasherGraph

// The parameters and replies of `io.bugsquasher.Import`.

/// The parameters of `io.bugsquasher.Import.Begin`.
public struct BeginImportParameters: Codable, Sendable {
    /// The job's name (the file name).
    public var name: String
    /// The format, or `nil` to detect it.
    public var format: String?
    /// Records per chunk, or `nil` for the daemon's default.
    public var chunkSize: Int?
    /// For a CSV export: the column each field is read from, by field name (`key`, `created`, …).
    public var columns: [String: String]?
    /// For a CSV export: the key of every bug's project, which makes numeric IDs keys.
    public var project: String?
    /// Creates parameters.
    public init(
        name: String, format: String? = nil, chunkSize: Int? = nil, columns: [String: String]? = nil,
        project: String? = nil
    ) {
        self.name = name
        self.format = format
        self.chunkSize = chunkSize
        self.columns = columns
        self.project = project
    }
}

/// The parameters of `io.bugsquasher.Import.Append`.
public struct AppendParameters: Codable, Sendable {
    /// The job.
    public var job: String
    /// Base64-encoded bytes.
    public var data: String
    /// Creates parameters.
    public init(job: String, data: String) {
        self.job = job
        self.data = data
    }
}

/// The reply of `io.bugsquasher.Import.Append`.
public struct BytesReply: Codable, Sendable {
    /// Bytes received.
    public var bytes: Int
    /// Creates a reply.
    public init(bytes: Int) { self.bytes = bytes }
}

/// The last message of an upgraded `Upload`: the job, queued, and the file's bytes received.
public struct UploadReply: Codable, Sendable {
    /// The job.
    public var job: String
    /// The bytes of the file received (without the chunk headers).
    public var bytes: Int64
    /// Creates a reply.
    public init(job: String, bytes: Int64) {
        self.job = job
        self.bytes = bytes
    }
}

/// The parameters of `io.bugsquasher.Import.Forget`.
public struct ForgetParameters: Codable, Sendable {
    /// The ID of the daemon to forget (`squasherctl status` lists them).
    public var daemon: String
    /// Creates parameters.
    public init(daemon: String) { self.daemon = daemon }
}

/// The reply of `io.bugsquasher.Import.Forget`: the daemon taken off the store's list, and its
/// jobs that had not ended, now aborted.
public struct ForgetReply: Codable, Sendable {
    /// The daemon forgotten.
    public var daemon: String
    /// Its host, when it was still listed.
    public var host: String?
    /// Its uploading, queued or running jobs, aborted.
    public var abortedJobs: [String]
    /// Creates a reply.
    public init(daemon: String, host: String?, abortedJobs: [String]) {
        (self.daemon, self.host, self.abortedJobs) = (daemon, host, abortedJobs)
    }
}
