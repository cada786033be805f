import BugSquasherGraph
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherVarlink
import Foundation

/// `io.bugsquasher.Jobs`: import jobs, their rejects, and the daemon's status (read-only).
struct JobsInterface: VarlinkInterface {
    let name = InterfaceName.jobs
    let writes = false
    let stack: PersistentStack
    let hub: NotificationHub
    let activeJob: @Sendable () -> String?
    /// The job waiting for the store to take writes again, if any.
    let waitingJob: @Sendable () -> JobWait?
    /// The jobs, with the failures the store could not record (the import runner's book).
    let book: JobBook
    /// Which store, for people (``DaemonConfiguration/storeDescription``).
    let storeDescription: String
    /// What went wrong lately, for the health in the status.
    var health = HealthRecord()
    /// What `Metrics` answers.
    let metricsText = MetricsText()
    /// Where the calls run (``ThreadExecutor/daemonCalls()``): the status, the metrics and the
    /// jobs read the store, which can wait for a database that went silent; on Swift's shared
    /// pool such waits took its few threads, and on the read threads they would queue behind
    /// clients' slow queries.
    let executor: ThreadExecutor

    /// The most rejects one `Rejects` call answers (a reply of a few MB); `offset` pages past
    /// it. Any local user may call it on the read socket, and every unread reply is held.
    static let maximumRejects = 10_000

    /// `Watch` streams.
    func streams(_ method: String) -> Bool { method == "Watch" }

    func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        try await withTaskExecutorPreference(executor) {
            try await handleOnItsThreads(call, context: context, replier: replier)
        }
    }

    private func handleOnItsThreads(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        do {
            switch call.methodName {
            case "List": try await handleList(call, context: context, replier: replier)
            case "Get": try await handleGet(call, context: context, replier: replier)
            case "Rejects": try await handleRejects(call, context: context, replier: replier)
            case "Watch": try await handleWatch(call, context: context, replier: replier)
            case "Status": try await handleStatus(call, context: context, replier: replier)
            case "Metrics":
                guard let text = metricsText() else {
                    throw VarlinkError(
                        "io.bugsquasher.Jobs.MetricsUnavailable",
                        statement: "This squasherd keeps no metrics (it was started without a metrics registry).",
                        advice: "Run squasherd itself, which always keeps them.")
                }
                try await replier.reply(MetricsReply(text: text))
            default:
                throw VarlinkError.methodNotFound(call.method)
            }
        } catch let error as GraphError where error.isStoreUnavailable {
            throw VarlinkError("io.bugsquasher.Jobs.StoreUnavailable", explaining: error)
        }
    }

    /// `List`: the newest jobs.
    private func handleList(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws
    {
        let asked = try call.parameters(LimitParameter.self).limit
        if let asked, asked < 1 { throw VarlinkError.invalidParameter("limit") }
        let limit = min(asked ?? 50, 1_000)
        try await replier.reply(JobsReply(jobs: try await book.list(limit: limit)))
    }

    /// `Get`: one job.
    private func handleGet(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws
    {
        let id = try call.parameters(JobParameter.self).job
        guard let job = try await book.job(id) else { throw jobNotFound(id) }
        try await replier.reply(JobReply(job: job))
    }

    /// `Rejects`: a page of a job's rejects, in input order.
    private func handleRejects(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let parameters = try call.parameters(RejectsParameters.self)
        if let limit = parameters.limit, limit < 1 { throw VarlinkError.invalidParameter("limit") }
        if let offset = parameters.offset, offset < 0 { throw VarlinkError.invalidParameter("offset") }
        guard try await book.job(parameters.job) != nil else { throw jobNotFound(parameters.job) }
        let limit = min(parameters.limit ?? 1_000, Self.maximumRejects)
        // One more than sent: whether a next page follows.
        var page = try await book.rejects(parameters.job, limit: limit + 1, offset: parameters.offset ?? 0)
        let more = page.count > limit
        if more { page.removeLast() }
        try await replier.reply(RejectsReply(rejects: page, more: more ? true : nil))
    }

    /// `Watch`: streams a job's progress until it ends (call with `more`).
    private func handleWatch(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        guard call.more else { throw VarlinkError.expectedMore }
        let job = try call.parameters(JobParameter.self).job
        do {
            try await watch(job, replier: replier)
        } catch let error as GraphError where error.isStoreUnavailable {
            // Said of the job the client asked for, not only of the read that failed.
            throw VarlinkError(
                "io.bugsquasher.Jobs.StoreUnavailable",
                statement: "Job \(job) cannot be followed now. \(error.statement)",
                advice: "The job goes on by itself once the store answers; follow it again then. \(error.advice)")
        }
    }

    /// `Status`: the store, the token, the subscribers and the running job.
    private func handleStatus(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        var reply = StatusReply(
            storeIdentifier: stack.mainCoordinator.storeIdentifier, token: 0, bugs: 0, subscribers: hub.count,
            jobFollowers: hub.jobFollowerCount, activeJob: nil,
            conflictsResolved: stack.writerCoordinator.resolvedConflictCount
                + stack.mainCoordinator.resolvedConflictCount)
        reply.store = storeDescription
        reply.waitingJob = waitingJob().map(Self.wire)
        if book.identity.sharesStore { reply.daemon = book.identity.id }
        let membership = stack.store as? any StoreMembership
        // A database that does not answer is reported at once, not waited for.
        if let silence = Self.silence(membership) {
            reply.storeProblem = silence
            try await replier.reply(judged(reply))
            return
        }
        do {
            reply.activeJob = try await activeJob().asyncMap { try await book.job($0) } ?? nil
            if case .count(let n) = try stack.mainCoordinator.fetch(
                FetchDescription(entityName: "Bug", resultType: .count))
            {
                reply.bugs = n
            }
            reply.token = try stack.store.currentHistoryToken().rawValue
            reply.daemons = try membership?.members().map {
                WireDaemon(
                    id: $0.id, host: $0.host, token: $0.token.rawValue, behind: $0.behind, silentSeconds: $0.silentFor)
            }
        } catch let error as GraphError where error.code == .storeIO {
            // The heartbeat found the server silent while these statements ran (and ended them):
            // its words say more than a statement's.
            reply.storeProblem = Self.silence(membership) ?? error.statement
        }
        try await replier.reply(judged(reply))
    }

    /// Since when, and why, the database of a shared store has not answered; `nil` while it does.
    private static func silence(_ membership: (any StoreMembership)?) -> String? {
        guard case .unreachable(let since, let why) = membership?.reachability else { return nil }
        let reason = why.hasSuffix(".") ? String(why.dropLast()) : why
        return "The database has not answered since \(ISO8601Date.format(since, fractionalSeconds: false)): \(reason)."
    }

    /// Why job `id` waits to resume, if it does.
    private func waiting(_ id: String) -> WireJobWait? {
        guard let wait = waitingJob(), wait.job == id else { return nil }
        return Self.wire(wait)
    }

    /// `wait` as `Jobs.Status` and `Jobs.Watch` send it.
    private static func wire(_ wait: JobWait) -> WireJobWait {
        WireJobWait(job: wait.job, reason: wait.reason, since: ISO8601Date.format(wait.since, fractionalSeconds: false))
    }

    /// `reply` with the daemon's health.
    private func judged(_ reply: StatusReply) -> StatusReply {
        var reply = reply
        let health = DaemonHealth(health.current, storeProblem: reply.storeProblem, now: Date())
        reply.health = health.state
        reply.problems = health.problems.map { WireProblem(code: $0.code, message: $0.message) }
        return reply
    }

    /// Sends the job after every commit that touches it, until it is final.
    private func watch(_ id: String, replier: some VarlinkReplier) async throws {
        let subscription = Subscription(
            registeredOnly: true, includeValues: false, pendingLimit: 1_000, followsJob: true,
            startToken: try stack.store.currentHistoryToken())
        hub.add(subscription)
        defer { hub.remove(subscription) }
        // A failure the store cannot record commits nothing: it ends the watch instead.
        book.outcomes.watch(id, with: subscription)
        defer { book.outcomes.unwatch(id, subscription) }
        // Register first, read second: a commit between the two is then never missed.
        guard let jobObjectID = try await stack.temporaryContext().perform({ try JobBook.find(id, in: $0)?.objectID })
        else {
            throw jobNotFound(id)
        }
        _ = try subscription.register([jobObjectID])
        guard let first = try await book.job(id) else { throw jobNotFound(id) }
        try await replier.reply(JobReply(job: first, waiting: waiting(id)), continues: !first.isFinal)
        if first.isFinal { return }
        var last = first
        while let event = await subscription.next() {
            if case .resync = event { break }
            if case .nudge = event {
                // The job waits for the store, which may not answer: the record last read, and
                // why it waits.
                if let waiting = waiting(id) {
                    try await replier.reply(JobReply(job: last, waiting: waiting), continues: true)
                }
                continue
            }
            guard let job = try await book.job(id) else { throw jobNotFound(id) }
            last = job
            try await replier.reply(JobReply(job: job), continues: !job.isFinal)
            if job.isFinal { return }
        }
        if let job = try await book.job(id) { try await replier.reply(JobReply(job: job)) }
    }
}

extension Optional {
    /// `map` with an async transform.
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        switch self {
        case .some(let value): try await transform(value)
        case .none: nil
        }
    }
}
