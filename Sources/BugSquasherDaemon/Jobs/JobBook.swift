import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherVarlink
import Foundation
import Synchronization

/// Reads and writes import jobs in the store.
struct JobBook: Sendable {
    let stack: PersistentStack
    /// Failures the store could not record (a full or failing disk), shown in place of the
    /// stored state until the daemon restarts.
    let outcomes: UnrecordedFailures
    /// Where the saves of jobs run, beside import chunks and edits (see
    /// ``ThreadExecutor/writers()``).
    let writers: ThreadExecutor
    /// This daemon, which owns the jobs it creates and runs only its own.
    let identity: DaemonIdentity

    /// Creates a job in state `uploading`; returns its ID.
    func create(name: String, format: ImportFormat?, chunkSize: Int, columns: CSVColumnMapping = CSVColumnMapping())
        async throws -> String
    {
        let id = String(UUID().uuidString.prefix(8)).lowercased()
        try await withTaskExecutorPreference(writers) {
            let context = stack.importerContext(name: "jobs")
            await context.perform { context in
                let job = context.insert(ImportJob.self)
                job.jobID = id
                job.owner = identity.id
                job.name = name
                job.format = format?.rawValue ?? "auto"
                job.state = .uploading
                job.chunkSize = Int64(chunkSize)
                job.created = Date()
                // The mapping asked for, until the header shows what each column became.
                if !columns.isEmpty { job.columns = columns.description }
            }
            try await context.save()
        }
        return id
    }

    /// Changes a job in its own transaction.
    func update(_ id: String, _ change: @escaping @Sendable (ImportJob) -> Void) async throws {
        try await withTaskExecutorPreference(writers) {
            let context = stack.importerContext(name: "jobs")
            try await context.perform { context in
                guard let job = try Self.find(id, in: context) else { throw jobNotFound(id) }
                change(job)
            }
            try await context.save()
        }
    }

    /// Records that job `id` ended (`finished`, `failed` or `aborted`), with `error` saying why.
    func end(_ id: String, as state: JobState, error: String? = nil) async throws {
        try await update(id) { job in
            job.state = state
            job.error = error
            job.finished = Date()
        }
    }

    static func find(_ id: String, in context: isolated ObjectContext) throws -> ImportJob? {
        var request = FetchRequest<ImportJob>(predicate: Key("jobID") == .string(id))
        request.returnsObjectsAsFaults = false
        return try context.fetch(request).first
    }

    /// One job as the wire describes it.
    func job(_ id: String) async throws -> WireJob? {
        try await stack.temporaryContext(name: "jobs").perform { context in
            try Self.find(id, in: context).map(Self.wire)
        }.map(outcomes.applied)
    }

    /// Jobs, newest first.
    func list(limit: Int) async throws -> [WireJob] {
        try await stack.temporaryContext(name: "jobs").perform { context in
            var request = FetchRequest<ImportJob>(sort: [Key("created").descending], limit: limit)
            request.returnsObjectsAsFaults = false
            return try context.fetch(request).map(Self.wire)
        }.map(outcomes.applied)
    }

    /// A job's rejects, in input order.
    func rejects(_ id: String, limit: Int, offset: Int = 0) async throws -> [WireReject] {
        try await stack.temporaryContext(name: "jobs").perform { context in
            // By line, then reason: the issues of a one-line JSON array share their line, and
            // pages must neither repeat nor skip one of them.
            var request = FetchRequest<ImportReject>(
                predicate: Key("job.jobID") == .string(id), sort: [Key("line").ascending, Key("reason").ascending],
                limit: limit, offset: offset)
            request.returnsObjectsAsFaults = false
            return try context.fetch(request).map { WireReject(line: $0.line, reason: $0.reason) }
        }
    }

    /// This daemon's job to run next: an interrupted one first, then the oldest queued one.
    func nextRunnable(excluding skipped: Set<String> = []) async throws -> String? {
        try await stack.temporaryContext(name: "jobs").perform { [identity] context in
            for state in [JobState.running, .queued] {
                var request = FetchRequest<ImportJob>(
                    predicate: Key("state") == .string(state.rawValue), sort: [Key("created").ascending])
                request.returnsObjectsAsFaults = false
                if let job = try context.fetch(request).first(where: {
                    !skipped.contains($0.jobID) && identity.runs($0)
                }) {
                    return job.jobID
                }
            }
            return nil
        }
    }

    /// The jobs of daemon `owner` that have not ended (uploading, queued or running), oldest first.
    func unfinished(ownedBy owner: String) async throws -> [String] {
        try await stack.temporaryContext(name: "jobs").perform { context in
            let request = FetchRequest<ImportJob>(
                predicate: Key("owner") == .string(owner), sort: [Key("created").ascending])
            return try context.fetch(request).filter { !$0.state.isFinal }.map(\.jobID)
        }
    }

    static func wire(_ job: ImportJob) -> WireJob {
        // With milliseconds: a job's duration is read from them (`squasherctl jobs`).
        let iso = { (date: Date) in ISO8601Date.format(date, fractionalSeconds: true) }
        return WireJob(
            id: job.jobID, name: job.name, format: job.format, state: job.state,
            recordsRead: job.recordsRead, imported: job.imported, rejected: job.rejected,
            bytesDone: job.byteOffset, bytesTotal: job.bytesTotal,
            created: job.created.map(iso) ?? "", finished: job.finished.map(iso), error: job.error,
            columns: job.columns,
            daemon: job.owner
        )
    }
}

/// The Varlink error for an unknown job.
func jobNotFound(_ id: String) -> VarlinkError {
    VarlinkError("io.bugsquasher.Jobs.JobNotFound", ["job": .string(id)])
}

/// Job failures that could not be written to the store, because writing is what failed (a full
/// disk, a file system gone read-only). Without them such a job would read `running` until the
/// daemon restarts, and whoever waits on it would wait for good. Kept in memory: at the next
/// start the job is retried. It also keeps the jobs' watches (`Jobs.Watch`): it ends them on
/// such a failure, and nudges them when their job waits for the store, which writes no record
/// either.
final class UnrecordedFailures: Sendable {
    private struct State {
        var failures: [String: String] = [:]
        var watchers: [String: [Subscription]] = [:]
    }

    private let state = Mutex(State())

    /// The jobs that failed without a record.
    var jobs: Set<String> { state.withLock { Set($0.failures.keys) } }

    /// Notes that job `id` failed with `message`, and ends the watches on it.
    func fail(_ id: String, _ message: String) {
        let watchers = state.withLock { state in
            state.failures[id] = message
            return state.watchers.removeValue(forKey: id) ?? []
        }
        for watcher in watchers { watcher.close() }
    }

    /// `job` with its unrecorded failure, if it has one.
    func applied(_ job: WireJob) -> WireJob {
        guard let message = state.withLock({ $0.failures[job.id] }), !job.isFinal else { return job }
        var failed = job
        failed.state = .failed
        failed.error = message
        return failed
    }

    /// Ends `subscription` (a `Jobs.Watch`) when job `id` fails without a record. (If it has
    /// already, the watch reads the failure with the job, through ``applied(_:)``.)
    func watch(_ id: String, with subscription: Subscription) {
        state.withLock { state in
            guard state.failures[id] == nil else { return }
            state.watchers[id, default: []].append(subscription)
        }
    }

    /// Wakes the watches on job `id` to look at what the import runner says of it (a job that
    /// waits for the store writes no record meanwhile, so nothing else would wake them).
    func nudgeWatches(of id: String) {
        for watcher in state.withLock({ $0.watchers[id] ?? [] }) { watcher.nudge() }
    }

    /// Stops ending `subscription` for job `id`.
    func unwatch(_ id: String, _ subscription: Subscription) {
        state.withLock { state in state.watchers[id]?.removeAll { $0 === subscription } }
    }
}
