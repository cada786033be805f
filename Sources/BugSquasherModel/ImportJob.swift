public import BugSquasherGraph
public import Foundation

/// An import job: its input, state and progress, saved with every chunk it imports.
public final class ImportJob: ManagedObject {
    public override class var entityName: String { "ImportJob" }

    /// The job's ID.
    public var jobID: String {
        get { get("jobID") ?? "" }
        set { set("jobID", newValue) }
    }
    /// The name the submitter gave (usually the file name).
    public var name: String {
        get { get("name") ?? "" }
        set { set("name", newValue) }
    }
    /// The daemon that spooled the job's input and runs it (its daemon ID); `nil` on jobs
    /// recorded before jobs had owners.
    public var owner: String? {
        get { get("owner") }
        set { set("owner", newValue) }
    }
    /// The input format.
    public var format: String {
        get { get("format") ?? "" }
        set { set("format", newValue) }
    }
    /// Where the job is in its life. A value the store holds that no state has (a damaged row)
    /// reads as ``JobState/failed``, so that nothing waits on it for good.
    public var state: JobState {
        get { (get("state") as String?).flatMap(JobState.init(rawValue:)) ?? .failed }
        set { set("state", newValue.rawValue) }
    }
    /// Records per chunk.
    public var chunkSize: Int64 {
        get { get("chunkSize") ?? 1_000 }
        set { set("chunkSize", newValue) }
    }
    /// Records read so far.
    public var recordsRead: Int64 {
        get { get("recordsRead") ?? 0 }
        set { set("recordsRead", newValue) }
    }
    /// Records imported so far.
    public var imported: Int64 {
        get { get("imported") ?? 0 }
        set { set("imported", newValue) }
    }
    /// Records rejected so far.
    public var rejected: Int64 {
        get { get("rejected") ?? 0 }
        set { set("rejected", newValue) }
    }
    /// Bytes of the spooled input processed: where a restart resumes.
    public var byteOffset: Int64 {
        get { get("byteOffset") ?? 0 }
        set { set("byteOffset", newValue) }
    }
    /// Lines of the spooled input consumed (blank lines included), for line numbers on resume.
    public var linesRead: Int64 {
        get { get("linesRead") ?? 0 }
        set { set("linesRead", newValue) }
    }
    /// Bytes of the spooled input in all.
    public var bytesTotal: Int64 {
        get { get("bytesTotal") ?? 0 }
        set { set("bytesTotal", newValue) }
    }
    /// When the job was created.
    public var created: Date? {
        get { get("created") }
        set { set("created", newValue) }
    }
    /// When it ended.
    public var finished: Date? {
        get { get("finished") }
        set { set("finished", newValue) }
    }
    /// Why it failed.
    public var error: String? {
        get { get("error") }
        set { set("error", newValue) }
    }
    /// For a CSV export: which column each field was read from, the mapping given, and the
    /// columns nothing read (`key="Issue key" summary=Summary …; not imported: Votes`).
    public var columns: String? {
        get { get("columns") }
        set { set("columns", newValue) }
    }
}

/// One rejected record of an import job: where it was and why.
public final class ImportReject: ManagedObject {
    public override class var entityName: String { "ImportReject" }

    /// The line (or record number) in the input.
    public var line: Int64 {
        get { get("line") ?? 0 }
        set { set("line", newValue) }
    }
    /// Why it was rejected.
    public var reason: String {
        get { get("reason") ?? "" }
        set { set("reason", newValue) }
    }
    /// The job.
    public var job: ImportJob? {
        get { related("job") }
        set { setRelated(newValue, for: "job") }
    }
}
