import BugSquasherGraph
import BugSquasherModel

/// Swift Testing has `Bug` and `Comment` types; in tests, these are the model's classes.
typealias Bug = BugSquasherModel.Bug
typealias Comment = BugSquasherModel.Comment

/// A coordinator on a fresh in-memory store with the bug model.
func makeCoordinator() throws -> StoreCoordinator {
    try StoreCoordinator(model: BugModel.model, store: InMemoryStore())
}

extension ObjectContext {
    /// Inserts bugs KEY-1…KEY-n with the given statuses and saves; returns their IDs.
    func insertBugs(_ statuses: [String], prefix: String = "TIMOB") throws -> [ObjectID] {
        let bugs = statuses.enumerated().map { index, status in
            let bug = insert(Bug.self)
            bug.key = "\(prefix)-\(index + 1)"
            bug.title = "Bug \(index + 1)"
            bug.status = status
            return bug
        }
        try saveToStore()
        return bugs.map(\.objectID)
    }
}
