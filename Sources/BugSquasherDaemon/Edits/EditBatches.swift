/// Which edits commit together, and when, for a store whose edits each wait on a server
/// (`BatchEditable`): while a batch commits, the edits that arrive wait; when it is done, the
/// waiting ones go as the next batch, at most ``limit`` of them and one per object, so that an
/// object's edits apply in the order they came. After a batch of several edits, the next one
/// gathers first: it waits until as many edits as that batch had have come on top of those
/// already waiting, for at most as long as that batch took to commit (and ``maximumGather``),
/// since the clients it answered are most likely sending their next edits. A lone edit never
/// waits. An edit that comes after a quiet spell (no batch finished for ``quietGap``) commits
/// on the thread that received it: no other client is sending edits to gather behind it, and
/// the hand-over to the queue's thread would only add a thread wake-up to its way.
/// Pure: ``EditQueue`` carries its decisions out; times are nanoseconds of any monotonic clock.
///
/// Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit together".
struct EditBatches<Ticket: Sendable, Object: Hashable & Sendable>: Sendable {
    /// The most edits in one batch.
    let limit: Int
    /// The longest a batch gathers edits, in nanoseconds (0: never).
    let maximumGather: UInt64
    /// How long after the last batch finished an arriving edit commits where it arrived
    /// (``Arrival/commitHere(_:)``), in nanoseconds (0: never).
    let quietGap: UInt64
    /// When the last batch finished; `nil` before the first.
    private var lastFinished: UInt64?
    /// The edits waiting for a batch, in the order they came.
    private var waiting: [(ticket: Ticket, object: Object)] = []
    private var phase = Phase.idle

    private enum Phase {
        /// No batch commits or gathers: an edit goes at once.
        case idle
        /// A batch of `size` edits, handed out at `started`, commits.
        case committing(size: Int, started: UInt64)
        /// The next batch waits for `target` edits, or until `deadline`.
        case gathering(target: Int, deadline: UInt64)
    }

    /// What the queue does next.
    enum Step {
        /// Commit these edits now.
        case commit([Ticket])
        /// Wait for edits until this time (or until an arrival says the batch is full), then
        /// ask again with ``EditBatches/poll(at:)``.
        case gather(until: UInt64)
        /// Nothing waits: the next edit goes at once.
        case idle
    }

    /// What an arriving edit makes of the queue.
    enum Arrival {
        /// Nothing committed: commit these edits (this one) now.
        case commit([Ticket])
        /// Nothing committed for a quiet spell: commit these edits (this one) now, on the
        /// thread that received it.
        case commitHere([Ticket])
        /// The edit waits for the batch committing or gathering.
        case waits
        /// The edit completes the batch gathering: wake whoever gathers it.
        case completes
    }

    /// Batches of at most `limit` edits (at least 1), gathering for at most `maximumGather`
    /// nanoseconds; an edit arriving `quietGap` nanoseconds or more after the last batch
    /// finished commits where it arrived (0: never).
    init(limit: Int, maximumGather: UInt64 = 0, quietGap: UInt64 = 0) {
        self.limit = max(1, limit)
        self.maximumGather = maximumGather
        self.quietGap = quietGap
    }

    /// How many edits wait for a batch.
    var waitingCount: Int { waiting.count }

    /// Whether a batch is committing (not gathering, not idle).
    var isCommitting: Bool {
        if case .committing = phase { true } else { false }
    }

    /// An edit of `object` arrived at `now`.
    mutating func arrived(_ ticket: Ticket, editing object: Object, at now: UInt64 = 0) -> Arrival {
        waiting.append((ticket, object))
        switch phase {
        case .idle:
            guard let batch = next(at: now) else { return .waits }
            let quiet = quietGap > 0 && lastFinished.map { now >= $0 + quietGap } ?? true
            return quiet ? .commitHere(batch) : .commit(batch)
        case .committing:
            return .waits
        case .gathering(let target, _):
            // Once: the arrivals after it find the batch full already.
            return waiting.count == target ? .completes : .waits
        }
    }

    /// The batch committing is done at `now`: commit the next one at once, gather it first, or
    /// go idle.
    mutating func finished(at now: UInt64 = 0) -> Step {
        guard case .committing(let size, let started) = phase else {
            assertionFailure("a batch finished that was not committing")
            return .idle
        }
        lastFinished = now
        let window = min(maximumGather, now > started ? now - started : 0)
        // The clients of a batch of several are most likely coming back; one client alone is
        // not waited for.
        let target = min(limit, size + waiting.count)
        if size >= 2, window > 0, waiting.count < target {
            phase = .gathering(target: target, deadline: now + window)
            return .gather(until: now + window)
        }
        phase = .idle
        return next(at: now).map { .commit($0) } ?? .idle
    }

    /// Asks again while gathering, at `now` (woken by an arrival, or at the deadline).
    mutating func poll(at now: UInt64) -> Step {
        guard case .gathering(let target, let deadline) = phase else {
            assertionFailure("polled while not gathering")
            return .idle
        }
        if waiting.count < target, now < deadline { return .gather(until: deadline) }
        phase = .idle
        return next(at: now).map { .commit($0) } ?? .idle
    }

    /// The next batch, handed out at `now`: the waiting edits, at most ``limit`` and one per
    /// object; `nil` (and idle) when none waits.
    private mutating func next(at now: UInt64) -> [Ticket]? {
        guard !waiting.isEmpty else { return nil }
        var objects = Set<Object>()
        var batch: [Ticket] = []
        var rest: [(ticket: Ticket, object: Object)] = []
        for edit in waiting {
            // An object's later edit waits whenever its earlier one does, or goes in this batch.
            if batch.count < limit, objects.insert(edit.object).inserted {
                batch.append(edit.ticket)
            } else {
                rest.append(edit)
            }
        }
        waiting = rest
        phase = .committing(size: batch.count, started: now)
        return batch
    }
}
