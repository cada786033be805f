import Synchronization

/// Why the store file was lost while the daemon ran, and what became of its content.
final class StoreFileLoss: Sendable {
    private let state = Mutex<(problem: String, rescue: String)?>(nil)

    /// What happened and what was rescued; `nil` while the store file is in place.
    var problem: (problem: String, rescue: String)? { state.withLock { $0 } }

    func lost(_ problem: String) {
        state.withLock { $0 = $0 ?? (problem, "Nothing was copied.") }
    }

    func rescued(_ outcome: String) {
        state.withLock { if let problem = $0?.problem { $0 = (problem, outcome) } }
    }
}
