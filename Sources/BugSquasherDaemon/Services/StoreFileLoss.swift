import Synchronization

/// Why the store file was lost while the daemon ran, and what became of its content.
final class StoreFileLoss: Sendable {
    private let state = Mutex<(problem: String, rescue: String, advice: String)?>(nil)

    /// What happened, what was rescued, and what to do; `nil` while the store file is in place.
    var problem: (problem: String, rescue: String, advice: String)? { state.withLock { $0 } }

    func lost(_ problem: String) {
        state.withLock { $0 = $0 ?? (problem, "Nothing was copied.", "") }
    }

    /// Records what became of the content (`outcome`, a statement), and what to do now.
    func rescued(_ outcome: String, advice: String) {
        state.withLock { if let problem = $0?.problem { $0 = (problem, outcome, advice) } }
    }
}
