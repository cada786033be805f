import BugSquasherGraph
import CoreMetrics
import Synchronization

/// The edits of a store whose edits each wait on a server (`BatchEditable`, PostgreSQL),
/// committed in batches on a thread of their own. A call waits here, off the write socket's
/// thread, so that the edits other clients send meanwhile are read, and commit together in the
/// next batch (``EditBatches`` decides which).
///
/// Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit together".
final class EditQueue: Sendable {
    /// The most edits committed together: as many as the store keeps the rows of after a save,
    /// so that each object's next edit starts from its row without reading it.
    static let batchLimit = 16

    private struct Waiting: Sendable {
        let request: AttributeEditRequest
        let continuation: CheckedContinuation<DidSave?, any Error>
    }

    private struct State: Sendable {
        var batches = EditBatches<Int, ObjectID>(limit: EditQueue.batchLimit)
        var waiting: [Int: Waiting] = [:]
        var nextTicket = 0

        /// The waiting edits of `tickets`, no longer waiting.
        mutating func take(_ tickets: [Int]) -> [Waiting] {
            tickets.map { waiting.removeValue(forKey: $0)! }
        }
    }

    private let store: any BatchEditable
    private let batches: Counter?
    private let thread = ThreadExecutor(name: "edit", threads: 1)
    private let state = Mutex(State())

    /// A queue of edits to `store`; `batches`, when given, counts the batches committed.
    init(store: any BatchEditable, batches: Counter? = nil) {
        self.store = store
        self.batches = batches
    }

    /// Sets `attributes` on `id`, as `AttributeEditable.edit(_:attributes:)` does, in the next
    /// batch that can take it; returns the save it went out in, or `nil` when nothing changed.
    func edit(_ id: ObjectID, attributes: [String: Value]) async throws -> DidSave? {
        try await withCheckedThrowingContinuation { continuation in
            let batch = state.withLock { state -> [Waiting]? in
                let ticket = state.nextTicket
                state.nextTicket += 1
                state.waiting[ticket] = Waiting(
                    request: AttributeEditRequest(id, attributes: attributes), continuation: continuation)
                return state.batches.arrived(ticket, editing: id).map { state.take($0) }
            }
            if let batch { commit(batch) }
        }
    }

    /// Commits `first`, then each batch that waited for it, until none waits.
    private func commit(_ first: [Waiting]) {
        Task(executorPreference: thread) { [self] in
            var batch = first
            while !batch.isEmpty {
                let results = store.edit(batch: batch.map(\.request))
                batches?.increment()
                for (edit, result) in zip(batch, results) { edit.continuation.resume(with: result) }
                batch = state.withLock { state in state.batches.finished().map { state.take($0) } ?? [] }
            }
        }
    }
}
