/// Which edits commit together, for a store whose edits each wait on a server
/// (`BatchEditable`): while a batch commits, the edits that arrive wait; when it is done, the
/// waiting ones go as the next batch, at most ``limit`` of them and one per object, so that an
/// object's edits apply in the order they came. Pure: ``EditQueue`` carries its decisions out.
///
/// Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit together".
struct EditBatches<Ticket: Sendable, Object: Hashable & Sendable>: Sendable {
    /// The most edits in one batch.
    let limit: Int
    /// The edits waiting for a batch, in the order they came.
    private var waiting: [(ticket: Ticket, object: Object)] = []
    /// Whether a batch is committing.
    private(set) var isCommitting = false

    /// Batches of at most `limit` edits (at least 1).
    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// How many edits wait for a batch.
    var waitingCount: Int { waiting.count }

    /// An edit of `object` arrived: the batch to commit now (this edit) when none is committing;
    /// otherwise `nil`, and it waits for the next.
    mutating func arrived(_ ticket: Ticket, editing object: Object) -> [Ticket]? {
        waiting.append((ticket, object))
        return isCommitting ? nil : next()
    }

    /// The batch committing is done: the next one to commit, or `nil` when no edit waits.
    mutating func finished() -> [Ticket]? {
        isCommitting = false
        return next()
    }

    private mutating func next() -> [Ticket]? {
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
        isCommitting = true
        return batch
    }
}
