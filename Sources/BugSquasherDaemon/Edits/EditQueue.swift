import BugSquasherGraph
import CoreMetrics
import Dispatch
import Synchronization

/// The edits of a store whose edits each wait on a server (`BatchEditable`, PostgreSQL),
/// committed in batches on a thread of their own. A call waits here, off the write socket's
/// thread, so that the edits other clients send meanwhile are read, and commit together in the
/// next batch (``EditBatches`` decides which, and how long a batch gathers). An edit after a
/// quiet spell commits on the write socket's thread itself: nothing is coming to gather, and
/// the hand-over to the queue's thread and back cost the edit two thread wake-ups.
///
/// Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit together".
final class EditQueue: Sendable {
    /// The most edits committed together: as many as the store keeps the rows of after a save,
    /// so that each object's next edit starts from its row without reading it.
    static let batchLimit = 16

    /// The longest a batch gathers the edits of the clients the last one answered, in
    /// nanoseconds (1 ms).
    static let maximumGather: UInt64 = 1_000_000

    /// How long after the last batch finished an edit commits on the thread that received it,
    /// in nanoseconds (1 ms): edits that many clients send come closer together than that.
    static let quietGap: UInt64 = 1_000_000

    private struct Waiting: Sendable {
        let request: AttributeEditRequest
        let continuation: CheckedContinuation<AttributeEditOutcome, any Error>
    }

    private struct State: Sendable {
        var batches = EditBatches<Int, ObjectID>(
            limit: EditQueue.batchLimit, maximumGather: EditQueue.maximumGather, quietGap: EditQueue.quietGap)
        var waiting: [Int: Waiting] = [:]
        var nextTicket = 0

        /// The waiting edits of `tickets`, no longer waiting.
        mutating func take(_ tickets: [Int]) -> [Waiting] {
            tickets.map { waiting.removeValue(forKey: $0)! }
        }

        /// `step`, with the edits of a batch to commit taken.
        mutating func carry(_ step: EditBatches<Int, ObjectID>.Step) -> Next {
            switch step {
            case .commit(let tickets): .commit(take(tickets))
            case .gather(let deadline): .gather(until: deadline)
            case .idle: .idle
            }
        }
    }

    /// What the queue's thread does next.
    private enum Next {
        case commit([Waiting])
        case gather(until: UInt64)
        case idle
    }

    private let store: any BatchEditable
    private let batches: Counter?
    private let thread = ThreadExecutor(name: "edit", threads: 1)
    private let state = Mutex(State())
    /// Wakes the queue's thread when the batch it gathers is full.
    private let gathered = DispatchSemaphore(value: 0)

    /// A queue of edits to `store`; `batches`, when given, counts the batches committed.
    init(store: any BatchEditable, batches: Counter? = nil) {
        self.store = store
        self.batches = batches
    }

    /// Makes the edit `request`, as `AttributeEditable.edit(_:)` does, in the next batch that
    /// can take it; returns what it came to.
    func edit(_ request: AttributeEditRequest) async throws -> AttributeEditOutcome {
        try await withCheckedThrowingContinuation { continuation in
            let arrival = state.withLock { state -> EditBatches<Int, ObjectID>.Arrival in
                let ticket = state.nextTicket
                state.nextTicket += 1
                state.waiting[ticket] = Waiting(request: request, continuation: continuation)
                return state.batches.arrived(ticket, editing: request.objectID, at: Self.now())
            }
            switch arrival {
            // The batch's tickets are no one else's to take.
            case .commit(let tickets): run(.commit(state.withLock { $0.take(tickets) }))
            // The caller's thread may block: it is the write socket's own (see `ImportInterface`),
            // whose other clients' calls wait for this one edit at most.
            case .commitHere(let tickets): run(commit(state.withLock { $0.take(tickets) }))
            case .completes: gathered.signal()
            case .waits: break
            }
        }
    }

    /// Commits `batch` on this thread, answers its edits, and says what the queue does next.
    private func commit(_ batch: [Waiting]) -> Next {
        let results = store.edit(batch: batch.map(\.request))
        // An edit without a result would wait for ever.
        precondition(results.count == batch.count, "BatchEditable.edit(batch:) must answer every edit")
        batches?.increment()
        for (edit, result) in zip(batch, results) { edit.continuation.resume(with: result) }
        return state.withLock { $0.carry($0.batches.finished(at: Self.now())) }
    }

    /// Carries out `first` on the queue's thread, then each batch that waited or gathered after
    /// it, until none waits.
    private func run(_ first: Next) {
        if case .idle = first { return }
        Task(executorPreference: thread) { [self] in
            var next = first
            while true {
                switch next {
                case .commit(let batch):
                    next = commit(batch)
                case .gather(let deadline):
                    // Its own thread, which only commits edits: it may block.
                    _ = gathered.wait(timeout: DispatchTime(uptimeNanoseconds: deadline))
                    next = state.withLock { $0.carry($0.batches.poll(at: Self.now())) }
                case .idle:
                    return
                }
            }
        }
    }

    /// The clock the batches are timed with, in nanoseconds.
    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
