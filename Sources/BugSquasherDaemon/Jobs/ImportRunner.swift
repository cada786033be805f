import Algorithms
import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherStack
import CoreMetrics
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Runs import jobs one at a time, chunk by chunk: each chunk is one importer context on the
/// writer coordinator and one transaction that also records the job's progress (byte offset,
/// counts) and the chunk's rejects. A crash or `kill -9` therefore resumes exactly after the last
/// committed chunk, and `imported + rejected = read` holds after every commit.
///
/// On graceful shutdown the current chunk finishes and commits; the job stays `running` and is
/// resumed at the next start.
final class ImportRunner: Service {
    private let stack: PersistentStack
    /// The jobs in the store, with the failures it could not record.
    let book: JobBook
    private let configuration: DaemonConfiguration
    private let logger: Logger
    private let wakeups: AsyncStream<Void>
    private let wakeup: AsyncStream<Void>.Continuation
    /// How many times a shared store found its server answering again
    /// (``StoreMembership/observeReachableAgain(_:)``): a job waiting for it goes on then.
    private let reachableAgain = Atomic<Int>(0)
    /// How many chunks jobs have committed: a job that failed after committing one starts its
    /// back-off over (``JobLifecycle/jobEnded(_:progressed:)``).
    private let chunksCommitted = Atomic<Int>(0)
    private let activityHandler: @Sendable (ImportActivity) -> Void
    /// Where jobs upsert chunks and free saved ones, at a lower priority (see ``ThreadExecutor``).
    /// A chunk's save is not: it holds the store's writer, which edits wait for, so it runs at
    /// the daemon's own priority, on ``writers``.
    private let executor: ThreadExecutor
    /// Where chunks are decoded ahead, a step lower still: the upsert and the hand-over of each
    /// chunk to the writer come first, or the writer waits for a core (see ``ChunkReadAhead``).
    private let decoders: ThreadExecutor
    /// Where chunks are saved, beside job records (see ``ThreadExecutor/writers()``).
    private let writers: ThreadExecutor
    /// What decoding and upserting give way to (the store holds chunk saves back with it).
    private let editsFirst: EditsFirst?
    /// Where failed jobs and chunks the store refused are noted, for the daemon's health.
    let health: HealthRecord
    /// Records and chunks, counted; chunks' commits, timed.
    let metrics: SquasherdMetrics
    /// The job being imported with the callers of ``abort(_:)`` waiting for it to stop, and the
    /// jobs aborted before the runner took them up (never to be taken up).
    private let jobs = Mutex(Jobs())

    private struct Jobs {
        var active: ActiveJob?
        var abortedBeforeStart: Set<String> = []
    }

    private struct ActiveJob {
        var id: String
        var abortWaiters: [CheckedContinuation<Void, Never>] = []
        var abortRequested: Bool { !abortWaiters.isEmpty }
    }

    init(
        stack: PersistentStack, configuration: DaemonConfiguration, identity: DaemonIdentity, writers: ThreadExecutor,
        editsFirst: EditsFirst? = nil, health: HealthRecord = HealthRecord(),
        metrics: SquasherdMetrics = SquasherdMetrics(), logger: Logger,
        activity: @escaping @Sendable (ImportActivity) -> Void = { _ in }
    ) {
        self.stack = stack
        self.writers = writers
        self.editsFirst = editsFirst
        self.health = health
        self.metrics = metrics
        // Failures of jobs that the store could not record: the book shows them with the jobs.
        self.book = JobBook(stack: stack, outcomes: UnrecordedFailures(), writers: writers, identity: identity)
        self.configuration = configuration
        self.logger = logger
        self.activityHandler = activity
        // Between two steps of decoding and upserting too (a fetch, a merge, the next chunk's
        // keys), not only between records.
        var giveWay: (@Sendable () -> Void)?
        if let editsFirst { giveWay = { editsFirst.yieldToInteractiveSaves() } }
        // Upserting and freeing the saved chunk's objects each have a thread; decoding ahead has
        // two of its own (see ``ChunkReadAhead``); on two cores the scheduler shares them.
        executor = ThreadExecutor(
            name: "import", threads: 2, priority: Int32(configuration.importPriority), beforeEachJob: giveWay)
        decoders = ThreadExecutor(
            name: "decode", threads: 2,
            priority: Int32(Self.decodePriority(importPriority: configuration.importPriority)),
            beforeEachJob: giveWay)
        if !executor.isPriorityLowered || !decoders.isPriorityLowered {
            logger.warning(
                "cannot lower the import threads' priority (setpriority refused); imports run at the daemon's priority, and edits and subscribers wait longer during them",
                metadata: ["import.nice": "\(configuration.importPriority)"])
        }
        (wakeups, wakeup) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (stack.store as? any StoreMembership)?.observeReachableAgain { [weak self] in
            self?.reachableAgain.add(1, ordering: .relaxed)
        }
    }

    /// Asks the runner to look for queued jobs.
    func enqueue() { wakeup.yield() }

    /// Stops the running job `id` after the chunk in flight, which commits whole, and returns
    /// once the job has ended (`aborted`, or whatever ended it first). Returns `false` at once
    /// when this runner is not importing `id`; it then never takes the job up, so the caller
    /// records it aborted.
    func abort(_ id: String) async -> Bool {
        var running = true
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let registered = jobs.withLock { jobs -> Bool in
                guard jobs.active?.id == id else {
                    jobs.abortedBeforeStart.insert(id)
                    return false
                }
                jobs.active?.abortWaiters.append(waiter)
                return true
            }
            if registered {
                logger.info(
                    "abort requested: the import stops once its chunk in flight is saved", metadata: ["job.id": "\(id)"]
                )
            } else {
                running = false
                waiter.resume()
            }
        }
        return running
    }

    /// Whether the caller of ``abort(_:)`` asked to stop job `id`.
    private func abortRequested(_ id: String) -> Bool {
        jobs.withLock { $0.active?.id == id && $0.active?.abortRequested == true }
    }

    /// Runs `process(job)` as the active job, then wakes those waiting for it to stop; skips a
    /// job aborted before it got here.
    private func runActive(_ job: String) async throws {
        let aborted = jobs.withLock { jobs -> Bool in
            guard !jobs.abortedBeforeStart.contains(job) else { return true }
            jobs.active = ActiveJob(id: job)
            return false
        }
        guard !aborted else { return }
        defer {
            let waiters = jobs.withLock { jobs -> [CheckedContinuation<Void, Never>] in
                defer { jobs.active = nil }
                return jobs.active?.abortWaiters ?? []
            }
            for waiter in waiters { waiter.resume() }
        }
        // On the import threads, not the write threads: the loop gives way to interactive saves
        // (blocking its thread), and the write threads must stay free for job records and saves.
        try await withTaskExecutorPreference(executor) { try await process(job) }
    }

    /// Why a job waits to resume after `failure`, in words: the database away, the chunk's save
    /// failing otherwise (a statement the server canceled, or a connection the driver closed:
    /// the import tries again, and the error says why), or SQLite's write lock held by another
    /// program.
    private static func whyWaiting(_ failure: (any Error)?) -> String {
        guard let failure = failure as? GraphError, failure.code == .storeIO else {
            return "the store is locked by another program"
        }
        if failure.isServerUnreachable { return "the database cannot be reached" }
        let said = failure.statement.hasSuffix(".") ? String(failure.statement.dropLast()) : failure.statement
        return "the chunk's save failed (\(said))"
    }

    /// What `error` says of the store: out of reach for now (locked by another program, or a
    /// database server that cannot be reached, restarting or cut off), or `.failed`.
    private func outcome(of error: any Error) -> JobLifecycle.Outcome {
        switch (error as? GraphError)?.code {
        case .storeBusy: .storeBusy
        case .storeIO where stack.store is any SharedStore: .storeUnreachable
        default: .failed
        }
    }

    func run() async throws {
        wakeup.yield()
        var lifecycle = JobLifecycle()
        // Whether the last read of the job queue failed: said once, and once more when it works.
        var queueUnreadable = false
        await withGracefulShutdownHandler {
            for await _ in wakeups {
                while !Task.isShuttingDownGracefully {
                    let answered = reachableAgain.load(ordering: .relaxed)
                    let job: String
                    do {
                        // Jobs whose failure could not even be recorded (a full disk) wait for a
                        // restart; jobs aborted before they started never run.
                        let skipped = book.outcomes.jobs.union(jobs.withLock { $0.abortedBeforeStart })
                        let runnable = try await book.nextRunnable(excluding: skipped)
                        if queueUnreadable {
                            queueUnreadable = false
                            logger.notice("reading the job queue again")
                        }
                        guard let next = runnable else {
                            // A job that waited for the store may have been aborted meanwhile.
                            activityHandler(.idle)
                            break
                        }
                        job = next
                    } catch {
                        guard let delay = lifecycle.queueUnreadable(outcome(of: error)) else {
                            logger.error(
                                "cannot read the job queue; waiting for the next submission",
                                metadata: ["error": "\(error)"])
                            break
                        }
                        // A running job would otherwise wait for the next submission or start.
                        if !queueUnreadable {
                            logger.warning(
                                "cannot read the job queue now; reading it again (not logged again until it works)",
                                metadata: [
                                    "retry.in": "\(delay)", "error": "\((error as? GraphError)?.message ?? "\(error)")",
                                ])
                        }
                        queueUnreadable = true
                        await waitToRetry(
                            delay, unreachable: outcome(of: error) == .storeUnreachable, answered: answered)
                        continue
                    }
                    var failure: (any Error)?
                    let committedBefore = chunksCommitted.load(ordering: .relaxed)
                    do {
                        try await runActive(job)
                    } catch {
                        failure = error
                    }
                    let progressed = chunksCommitted.load(ordering: .relaxed) != committedBefore
                    switch lifecycle.jobEnded(failure.map(outcome(of:)) ?? .ended, progressed: progressed) {
                    case .takeNextJob:
                        continue
                    case .retryAfter(let delay):
                        // Another program holds the store's write lock (sqlite3 left in a
                        // transaction, a backup), or the database server is away: a transient
                        // state, not the job's fault.
                        health.refusedWrite()
                        let why = Self.whyWaiting(failure)
                        activityHandler(.waiting(JobWait(job: job, reason: why, since: Date())))
                        book.outcomes.nudgeWatches(of: job)
                        logger.warning(
                            "\(why); the import resumes from its last committed chunk once it can write",
                            metadata: [
                                "job.id": "\(job)", "retry.in": "\(delay)", "retry.count": "\(lifecycle.busyRetries)",
                                "error": "\((failure as? GraphError)?.message ?? "")",
                            ])
                        await waitToRetry(
                            delay, unreachable: failure.map(outcome(of:)) == .storeUnreachable, answered: answered)
                    case .recordFailure:
                        // Input never stops the daemon, and neither does a failing disk: the job
                        // fails with the reason, committed chunks stay committed.
                        await recordFailure(of: job, failure)
                    }
                }
            }
        } onGracefulShutdown: {
            self.wakeup.finish()
        }
    }

    /// Waits `delay` before the next attempt, or until a graceful shutdown; when the attempt
    /// found the database unreachable, only until the store finds it answering again (looked at
    /// every 50 ms), so that a job goes on within a second of the server's return rather than
    /// at the end of the delay. `answered` is ``reachableAgain`` as the attempt began: a return
    /// during the attempt ends the wait at once.
    private func waitToRetry(_ delay: Duration, unreachable: Bool, answered: Int) async {
        let deadline = ContinuousClock.now + delay
        while ContinuousClock.now < deadline, !Task.isShuttingDownGracefully {
            if unreachable, reachableAgain.load(ordering: .relaxed) != answered { return }
            let step = min(.milliseconds(50), deadline - .now)
            guard (try? await cancelWhenGracefulShutdown({ try await Task.sleep(for: step) })) != nil else { return }
        }
    }

    /// Records that `job` failed with `error`; when the store cannot record that either, the
    /// failure is kept in memory and the job is retried at the next start.
    private func recordFailure(of job: String, _ error: (any Error)?) async {
        var jobLogger = logger
        jobLogger[metadataKey: "job.id"] = "\(job)"
        health.jobFailed(job)
        activityHandler(.idle)
        let message = (error as? GraphError)?.message ?? error.map { "\($0)" } ?? "unknown error"
        do {
            try await fail(job, message, logger: jobLogger)
        } catch {
            jobLogger.critical(
                "the job failed and its failure cannot be recorded; it is retried at the next start",
                metadata: ["error": "\(error)"])
            book.outcomes.fail(
                job,
                "\(message) The failure could not be recorded in the store either (\((error as? GraphError)?.message ?? "\(error)")): until squasherd restarts the job shows as failed, and at its next start squasherd retries it from its last committed chunk."
            )
        }
    }

    // MARK: One job

    /// One record line of the input: where it is, and its record or why it was rejected.
    struct Entry: Sendable {
        var line: Int
        /// The spool line the entry ends on (blank lines after it included).
        var spoolLine: Int
        var endOffset: Int64
        /// The position of the entry's record in its chunk's ``Chunk/records``; `nil` when the
        /// line was rejected.
        var record: Int?
        var reject: String?
        /// Whether the line is the very bytes its bug was last imported from: skipped, and
        /// counted as imported (see ``SourceDigest``).
        var unchanged = false
    }

    /// One chunk of the input. The records are kept apart from the entries, in one array that
    /// the upsert reads as it is: copying a record retains every string of it.
    struct Chunk: Sendable {
        var entries: [Entry] = []
        /// The records decoded, each checked with ``BugUpserter/validate(_:at:)`` already.
        var records: [BugRecord] = []
        /// `UpsertKeys(records)`, built where the chunk is decoded (beside the upsert of the
        /// chunk before it) rather than between that upsert and this one's.
        var reads: UpsertKeys?
        /// The keys of bugs the store had no row for when the chunk was read, which no chunk
        /// before it writes (see ``UnchangedRecords``): the upsert does not look them up again.
        var absentBugs: Set<StoredText> = []

        /// A chunk of one entry of this one, for importing record by record.
        func single(_ entry: Entry) -> Chunk {
            var single = entry
            single.record = entry.record.map { _ in 0 }
            return Chunk(entries: [single], records: entry.record.map { [records[$0]] } ?? [])
        }
    }

    /// A job taken up: its spooled input positioned where the last committed chunk ended, and
    /// its progress so far.
    private struct OpenedJob {
        let reader: OffsetLineReader
        let format: ImportFormat
        let chunkSize: Int
        let progress: ImportProgress
        let logger: Logger
    }

    /// Reads job `id`'s record and opens its spool where its last committed chunk ended; fails
    /// the job (and returns `nil`) when its format is unknown or its spool lost its end or is
    /// gone.
    private func open(_ id: String) async throws -> OpenedJob? {
        let start = try await stack.temporaryContext(name: "jobs").perform {
            context -> (String, Int64, Int64, Int64, Int64, Int64, Int64, Int64)? in
            guard let job = try JobBook.find(id, in: context) else { return nil }
            return (
                job.format, job.byteOffset, job.linesRead, job.chunkSize, job.recordsRead, job.imported, job.rejected,
                job.bytesTotal
            )
        }
        guard let (formatName, offset, linesRead, chunkSize, read, imported, rejected, total) = start else {
            return nil
        }
        var logger = self.logger
        logger[metadataKey: "job.id"] = "\(id)"
        guard let format = ImportFormat(rawValue: formatName) else {
            try await fail(id, "The job's format '\(formatName)' is unknown.", logger: logger)
            return nil
        }
        let spool = Spooler.path(job: id, in: configuration.spoolDirectory)
        // A spool shorter than what the upload wrote lost its end (a power loss before the page
        // cache reached the disk, a disk fault): importing the rest would end the job "finished"
        // without the records that were lost.
        if let size = (try? FileManager.default.attributesOfItem(atPath: spool))?[.size] as? Int64, size < total {
            try await fail(
                id,
                "The job's spooled input is shorter than the upload that was committed (\(size) of \(total) bytes; was the machine cut off, or is the disk failing?). The records after byte \(min(size, offset)) were not imported; submit the file again (records imported already are updated, not duplicated).",
                logger: logger)
            return nil
        }
        let reader: OffsetLineReader
        do {
            reader = try OffsetLineReader(
                path: spool, offset: offset, firstLine: Int(linesRead) + 1,
                maximumLineBytes: configuration.maximumRecordBytes)
        } catch {
            try await fail(id, "The job's spooled input is gone (\(spool)); submit the file again.", logger: logger)
            return nil
        }
        if offset == 0 {
            logger.info(
                "import started",
                metadata: [
                    "job.format": "\(format.rawValue)", "job.bytes": "\(total)",
                    "message.id": "\(MessageID.jobStarted)",
                ])
        } else {
            logger.info(
                "import resumed",
                metadata: ["job.offset": "\(offset)", "job.read": "\(read)", "message.id": "\(MessageID.jobStarted)"])
        }
        let progress = ImportProgress(
            job: id, read: read, imported: imported, rejected: rejected, bytesDone: offset, bytesTotal: total,
            started: .now, readAtStart: read)
        return OpenedJob(reader: reader, format: format, chunkSize: Int(chunkSize), progress: progress, logger: logger)
    }

    private func process(_ id: String) async throws {
        guard let job = try await open(id) else { return }
        let logger = job.logger
        try await book.update(id) { $0.state = .running }
        var progress = job.progress
        activityHandler(.importing(progress))
        // Three stages overlap: decoding chunks n + 2 … n + 1 + ``readAhead``, one after another,
        // upserting chunk n + 1 into its importer context, and saving chunk n on the writer.
        // Saves stay one after another, in order.
        let source = ChunkSource(
            reader: job.reader, format: job.format, size: job.chunkSize,
            maximumRecordBytes: configuration.maximumRecordBytes, editsFirst: editsFirst,
            unchanged: UnchangedRecords(format: job.format, coordinator: stack.writerCoordinator),
            uncommitted: Self.readAhead + 1)
        var saving: SavingChunk?
        var ahead = ChunkReadAhead(source: source, depth: Self.readAhead, executor: decoders)
        // Decoding that runs ahead ends with the job (its chunks are read again on resume).
        defer { ahead.cancel() }
        do {
            var chunk = try await ahead.next()
            while !chunk.entries.isEmpty {
                switch JobLifecycle.betweenChunks(
                    shuttingDown: Task.isShuttingDownGracefully, abortRequested: abortRequested(id))
                {
                case .importNext:
                    break
                case .pauseForShutdown:
                    try await pauseForShutdown(after: saving, progress: &progress, logger: logger)
                    return
                case .abort:
                    try await endAborted(id, after: saving, progress: &progress, logger: logger)
                    return
                }
                var retired: SavingChunk?
                let prepared = try await prepareAfter(
                    &saving, chunk, job: id, retired: &retired, progress: &progress, logger: logger)
                // Not on the import threads: the save holds the writer, which edits wait for.
                saving = SavingChunk(
                    chunk: prepared,
                    save: Task(executorPreference: writers) {
                        let started = ContinuousClock.now
                        defer { self.metrics.chunkCommit.recordSince(started) }
                        return try await self.save(prepared, job: id)
                    })
                // The saved chunk's context, objects and did-save are freed while the next one
                // saves, not between the two saves, and beside the next upsert rather than before
                // it: by a task of their own on the import threads (which give way to interactive
                // saves before each job: freeing a chunk's objects takes milliseconds).
                if let done = retired.take() {
                    Task(executorPreference: executor) { withExtendedLifetime(done) {} }
                }
                chunk = try await ahead.next()
            }
            if let last = saving {
                saving = nil
                try await settle(last, progress: &progress, logger: logger)
            }
        } catch {
            // Nothing may write after the job is failed: the chunk in flight ends first.
            _ = try? await saving?.save.value
            throw error
        }
        try await endFinished(id, progress: progress, logger: logger)
    }

    /// Pauses the job for a shutdown once the chunk saving (if any) has committed: it resumes on
    /// the next start.
    private func pauseForShutdown(after saving: SavingChunk?, progress: inout ImportProgress, logger: Logger)
        async throws
    {
        if let saving { try await settle(saving, progress: &progress, logger: logger) }
        logger.info("import paused for shutdown", metadata: ["job.offset": "\(progress.bytesDone)"])
        activityHandler(.idle)
    }

    /// Ends job `id` as aborted on request, once the chunk saving (if any) has committed: the
    /// records imported before stay in the store.
    private func endAborted(_ id: String, after saving: SavingChunk?, progress: inout ImportProgress, logger: Logger)
        async throws
    {
        if let saving { try await settle(saving, progress: &progress, logger: logger) }
        try await end(
            id, state: .aborted,
            error:
                "Aborted on request after \(progress.read) records; the \(progress.imported) imported before stay in the store."
        )
        logger.notice(
            "import aborted on request",
            metadata: [
                "job.read": "\(progress.read)", "job.imported": "\(progress.imported)",
                "job.offset": "\(progress.bytesDone)",
            ])
    }

    /// Ends job `id` as finished.
    private func endFinished(_ id: String, progress: ImportProgress, logger: Logger) async throws {
        try await end(id, state: .finished)
        logger.info(
            "import finished",
            metadata: [
                "job.read": "\(progress.read)", "job.imported": "\(progress.imported)",
                "job.rejected": "\(progress.rejected)", "message.id": "\(MessageID.jobFinished)",
            ])
    }

    private func fail(_ id: String, _ message: String, logger: Logger) async throws {
        logger.error("import failed", metadata: ["error": "\(message)", "message.id": "\(MessageID.jobFailed)"])
        try await end(id, state: .failed, error: message)
    }

    /// Records that job `id` ended in `state` and removes its spooled input, in the order
    /// ``JobLifecycle/SpoolOnEnd`` decides, so that a crash at any step leaves the job resumable or
    /// failing for a stated reason. The daemon's status stops showing the job first.
    ///
    /// Why it is built this way: docs/DESIGN-NOTES.md, "A job's input goes when its end is recorded".
    private func end(_ id: String, state: JobState, error: String? = nil) async throws {
        let spool = Spooler.path(job: id, in: configuration.spoolDirectory)
        let aside = Spooler.path(job: id + ".ending", in: configuration.spoolDirectory)
        let handling = JobLifecycle.spoolOnEnd(state)
        let movedAside = handling.moveAsideFirst && rename(spool, aside) == 0
        activityHandler(.idle)
        do {
            try await book.end(id, as: state, error: error)
        } catch {
            if movedAside { _ = handling.putBackIfUnrecorded ? rename(aside, spool) : unlink(aside) }
            throw error
        }
        try? FileManager.default.removeItem(atPath: movedAside ? aside : spool)
        returnFreedMemory()
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, _): "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            (context.codingPath.map(\.stringValue).joined(separator: ".") + " " + context.debugDescription)
                .trimmingCharacters(in: .whitespaces)
        @unknown default: "\(error)"
        }
    }

    /// A chunk upserted into its own importer context and not saved yet.
    private struct PreparedChunk: Sendable {
        var input: Chunk
        var context: ObjectContext
        /// The job, registered in `context`.
        var job: ObjectID
        var imported: Int64
        var rejects: [(line: Int, reason: String)]
        /// The keys of the objects whose stored values its save writes (empty while ``links``
        /// wait).
        var written: UpsertKeys
        /// The links to shared objects the chunk before is writing, made once it has saved.
        var links: DeferredLinks?
    }

    /// A prepared chunk whose save runs on the writer.
    private struct SavingChunk {
        var chunk: PreparedChunk
        var save: Task<DidSave?, any Error>
    }

    /// Upserts `chunk` into a new importer context while `saving` (the previous chunk) is
    /// still being saved, and settles that save. When the chunk reads a bug or comment the
    /// previous one writes, it waits for that save first; its links to people, components and
    /// projects the previous one writes are made after that save (see ``DeferredLinks``).
    /// Objects the previous save only bumped the version of (the project of every bug, say) are
    /// brought up to date by merging its did-save, so that this chunk's save does not meet them
    /// as conflicts.
    private func prepareAfter(
        _ saving: inout SavingChunk?, _ chunk: Chunk, job: String, retired: inout SavingChunk?,
        progress: inout ImportProgress, logger: Logger
    ) async throws -> PreparedChunk {
        guard let previous = saving else { return try await prepare(chunk, job: job) }
        retired = previous
        editsFirst?.yieldToInteractiveSaves()
        let reads = chunk.reads ?? UpsertKeys(chunk.records)
        let written = previous.chunk.written
        if written.overlaps(reads, in: Self.ownEntities) {
            saving = nil
            try await settle(previous, progress: &progress, logger: logger)
            return try await prepare(chunk, job: job, reads: reads)
        }
        let shared = written.common(with: reads, in: BugUpserter.sharedEntities)
        // Until it is settled, the previous save stays in `saving`: if preparing this chunk
        // fails, the caller still waits for it before failing the job.
        var prepared = try await prepare(chunk, job: job, reads: reads, deferring: shared)
        saving = nil
        guard let didSave = try await settle(previous, progress: &progress, logger: logger) else {
            // The previous chunk was imported record by record: what this one read is stale.
            return try await prepare(chunk, job: job, reads: reads)
        }
        let upserter = self.upserter
        let links = prepared.links
        prepared.written =
            try await prepared.context.perform { context in
                _ = context.merge(didSave)
                guard let links, !links.isEmpty else { return nil }
                try upserter.link(links, in: context)
                return UpsertKeys(writtenIn: context)
            } ?? prepared.written
        prepared.links = nil
        return prepared
    }

    /// The upserter of every chunk: it gives way to edits, and inserts new bugs as rows (the
    /// chunk's context is dropped after its save).
    private var upserter: BugUpserter { BugUpserter(editsFirst: editsFirst, insertsRows: true) }

    /// The `nice` value of the decoding threads: 5 steps above `import_nice` (at most 19), or 0
    /// when the import runs at the daemon's priority (`import_nice = 0`, as under a system-call
    /// filter without `setpriority`).
    static func decodePriority(importPriority: Int) -> Int {
        importPriority == 0 ? 0 : min(19, importPriority + 5)
    }

    /// How many chunks are decoded ahead of the one being upserted (see ``ChunkReadAhead``).
    /// One keeps a core busy only while decoding and upserting take equally long; with two, the
    /// import threads decode whenever the writer and the upsert leave a core idle.
    static let readAhead = 2

    /// The entities whose objects are a chunk's own (its bugs and their comments), against
    /// ``BugUpserter/sharedEntities``: a chunk that reads one the chunk before writes waits for
    /// that save before it upserts anything.
    static let ownEntities: Set<String> = ["Bug", "Comment"]

    /// Waits for a chunk's save and reports its progress. When the store refused the chunk as a
    /// whole, imports its records one by one so that only the bad ones are rejected; the result
    /// is then `nil`.
    @discardableResult
    private func settle(_ saving: SavingChunk, progress: inout ImportProgress, logger: Logger) async throws -> DidSave?
    {
        let entries = saving.chunk.input.entries
        var imported = saving.chunk.imported
        var rejected = Int64(saving.chunk.rejects.count)
        var didSave: DidSave?
        do {
            didSave = try await saving.save.value
        } catch let error as GraphError where [.constraintViolation, .validation, .mergeConflict].contains(error.code) {
            if error.code == .constraintViolation,
                let whole = try await saveLookingUpEveryKey(saving.chunk, job: progress.job, logger: logger)
            {
                (didSave, imported, rejected) = whole
            } else {
                // A record the store refuses, or bugs edited at the same moment again and again
                // (the merge policy resolves a conflict and tries again, 5 times): the records are
                // saved on their own, each with its own attempts, and only what still fails is
                // rejected. The job goes on either way.
                logger.notice(
                    "chunk refused by the store; importing its records one by one", metadata: ["error": "\(error)"])
                (imported, rejected) = try await saveOneByOne(saving.chunk.input, job: progress.job)
            }
        }
        chunksCommitted.add(1, ordering: .relaxed)
        progress.read += Int64(entries.count)
        progress.imported += imported
        progress.rejected += rejected
        metrics.chunks.increment()
        metrics.recordsRead.increment(by: entries.count)
        metrics.recordsImported.increment(by: Int(imported))
        metrics.recordsRejected.increment(by: Int(rejected))
        progress.bytesDone = entries.last!.endOffset
        activityHandler(.importing(progress))
        logger.debug(
            "chunk committed",
            metadata: [
                "rows": "\(entries.count)", "rejected": "\(rejected)", "job.offset": "\(progress.bytesDone)",
                "token": "\(didSave?.token.rawValue ?? 0)",
            ])
        return didSave
    }

    /// Prepares and saves again, as a whole, a chunk the store refused on a unique key when some
    /// of its keys were not looked up (``Chunk/absentBugs``: a comment of a bug new to the store
    /// may exist under another bug, as when an issue moved to another project); `nil` when every
    /// key was looked up already, or when the chunk is refused again (it then goes record by
    /// record).
    private func saveLookingUpEveryKey(_ chunk: PreparedChunk, job id: String, logger: Logger) async throws -> (
        DidSave?, imported: Int64, rejected: Int64
    )? {
        guard !chunk.input.absentBugs.isEmpty else { return nil }
        var input = chunk.input
        input.absentBugs = []
        do {
            let prepared = try await prepare(input, job: id)
            let didSave = try await save(prepared, job: id)
            logger.notice("chunk refused on a unique key; saved again with every key looked up")
            return (didSave, prepared.imported, Int64(prepared.rejects.count))
        } catch let error as GraphError where [.constraintViolation, .validation, .mergeConflict].contains(error.code) {
            return nil
        }
    }

    /// How often a record imported on its own is upserted again when the store refuses it for a
    /// unique key that an edit took meanwhile, or its bug keeps being edited, before it is
    /// rejected.
    static let singleRecordAttempts = 3

    private func saveOneByOne(_ input: Chunk, job id: String) async throws -> (imported: Int64, rejected: Int64) {
        var imported: Int64 = 0
        var rejected: Int64 = 0
        for entry in input.entries {
            let single = input.single(entry)
            var attempt = 1
            while true {
                do {
                    let chunk = try await prepare(single, job: id)
                    _ = try await save(chunk, job: id)
                    imported += chunk.imported
                    rejected += Int64(chunk.rejects.count)
                } catch let error as GraphError
                    where [.constraintViolation, .mergeConflict].contains(error.code)
                    && attempt < Self.singleRecordAttempts
                {
                    // An edit gave another bug this record's key after the record looked it up
                    // (looked up again, the record updates that bug, as a key match does), or
                    // edited its bug at the same moment: prepared again from the store.
                    attempt += 1
                    continue
                } catch let error as GraphError
                    where [.constraintViolation, .validation, .mergeConflict].contains(error.code)
                {
                    let reason =
                        switch error.code {
                        case .mergeConflict:
                            "The bug this record updates was edited or deleted at the same moment, \(Self.singleRecordAttempts) times in a row, so nothing of the record was saved. Import it again."
                        case .constraintViolation:
                            "Another bug took a key of this record while it was imported (\(error.message)). Import the record again to update that bug."
                        default: error.message
                        }
                    _ = try await save(try await prepare(single, job: id, extraRejects: [entry.line: reason]), job: id)
                    rejected += 1
                }
                break
            }
        }
        return (imported, rejected)
    }

    /// Upserts a chunk's records into a new importer context; `reads` are the records' keys when
    /// already built; the links to the `shared` keys wait (see ``DeferredLinks``). The lines in
    /// `extraRejects` are rejected instead, with the reasons given.
    private func prepare(
        _ input: Chunk, job id: String, reads: UpsertKeys? = nil,
        deferring shared: UpsertKeys = UpsertKeys(byEntity: [:]),
        extraRejects: [Int: String] = [:]
    ) async throws -> PreparedChunk {
        let context = stack.importerContext(name: "import", bulk: true)
        let upserter = self.upserter
        let entries = input.entries
        let records =
            extraRejects.isEmpty
            ? input.records
            : entries.compactMap { entry in
                extraRejects[entry.line] == nil ? entry.record.map { input.records[$0] } : nil
            }
        let rejects = entries.compactMap { entry -> (line: Int, reason: String)? in
            if let reason = extraRejects[entry.line] { return (entry.line, reason) }
            return entry.reject.map { (entry.line, $0) }
        }
        // On the import threads, at import_nice.
        let (written, job, links) = try await withTaskExecutorPreference(executor) {
            try await context.perform { context -> (UpsertKeys, ObjectID, DeferredLinks?) in
                // A bug deleted between this upsert and the save fails the save instead of taking
                // the record with it: the records are then saved one by one, re-creating it.
                context.failsOverStoreDeletions = true
                let links = try upserter.upsert(
                    records, keys: reads, validated: true, absentBugs: input.absentBugs,
                    deferring: shared, in: context)
                editsFirst?.yieldToInteractiveSaves()
                // The job is read here, off the path between two saves; the previous chunk's
                // did-save, merged before this chunk saves, brings its progress up to date.
                guard let job = try JobBook.find(id, in: context) else { throw jobNotFound(id) }
                // With links left, what the chunk writes is known once they are made (prepareAfter).
                guard !links.isEmpty else { return (UpsertKeys(writtenIn: context), job.objectID, nil) }
                return (UpsertKeys(byEntity: [:]), job.objectID, links)
            }
        }
        let unchanged = entries.count { $0.unchanged }
        return PreparedChunk(
            input: input, context: context, job: job, imported: Int64(records.count + unchanged), rejects: rejects,
            written: written, links: links)
    }

    /// Records the chunk's progress and rejects on the job and saves the chunk with them, in one
    /// transaction.
    private func save(_ chunk: PreparedChunk, job id: String) async throws -> DidSave? {
        let entries = chunk.input.entries
        // Before the context readies the save (checks, permanent IDs, the rows): the store would
        // hold back only its commit.
        editsFirst?.yieldToInteractiveSaves()
        try await chunk.context.perform { context in
            guard let job = try context.existingObject(with: chunk.job) as? ImportJob else { throw jobNotFound(id) }
            for (line, reason) in chunk.rejects {
                let reject = context.insert(ImportReject.self)
                reject.line = Int64(line)
                reject.reason = reason
                reject.job = job
            }
            job.recordsRead += Int64(entries.count)
            job.imported += chunk.imported
            job.rejected += Int64(chunk.rejects.count)
            job.byteOffset = entries.last?.endOffset ?? 0
            job.linesRead = Int64(entries.last?.spoolLine ?? 0)
        }
        // The chunk's context is dropped once saved.
        return try await chunk.context.saveAndRetire()
    }
}

/// What the import runner is doing, for `Jobs.Status` and the systemd status line.
enum ImportActivity: Sendable {
    /// No job runs.
    case idle
    /// A job imports, this far.
    case importing(ImportProgress)
    /// A job waits for the store to take writes again, to resume from its last committed chunk.
    case waiting(JobWait)

    /// Whether no job runs.
    var isIdle: Bool {
        if case .idle = self { true } else { false }
    }
}

/// A job that waits to resume: its ID, why (in words), and since when.
struct JobWait: Sendable {
    var job: String
    var reason: String
    var since: Date
}

/// The running job's progress, for status lines and logs.
struct ImportProgress: Sendable {
    var job: String
    var read: Int64
    var imported: Int64
    var rejected: Int64
    var bytesDone: Int64
    var bytesTotal: Int64
    var started: ContinuousClock.Instant
    var readAtStart: Int64

    /// Records per second since the job (re)started.
    var rate: Double {
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        return seconds > 0 ? Double(read - readAtStart) / seconds : 0
    }
}

/// The journal `MESSAGE_ID`s of job events, for `journalctl MESSAGE_ID=…`.
public enum MessageID {
    /// An import job started or resumed.
    public static let jobStarted = "8a3c2f6e1b7d4e9a9c0f5d2b6e4a1c37"
    /// An import job finished.
    public static let jobFinished = "2e9b7c4a6d1f4b3e8a5c0d9f7b2e6a14"
    /// An import job failed.
    public static let jobFailed = "c4d1e8b2a7f34c6e9b0a5d3f8e1c7b29"
}
