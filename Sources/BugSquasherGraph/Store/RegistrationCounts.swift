import Synchronization

/// How many registrations this process's contexts hold for each object: the book a store keeps
/// for ``IncrementalStore/didRegister(_:)`` and ``IncrementalStore/didUnregister(_:)``.
public final class RegistrationCounts: Sendable {
    private let counts = Mutex<[ObjectID: Int]>([:])

    /// An empty book.
    public init() {}

    /// Adds one registration per ID.
    public func register(_ objectIDs: [ObjectID]) {
        counts.withLock { counts in for id in objectIDs { counts[id, default: 0] += 1 } }
    }

    /// Removes one registration per ID; an object with none left leaves the book.
    public func unregister(_ objectIDs: [ObjectID]) {
        counts.withLock { counts in
            for id in objectIDs {
                let count = counts[id, default: 0] - 1
                counts[id] = count > 0 ? count : nil
            }
        }
    }

    /// The registrations held for an object (0 when none).
    public func count(for objectID: ObjectID) -> Int {
        counts.withLock { $0[objectID, default: 0] }
    }

    /// The IDs some context has registered.
    public var objectIDs: Set<ObjectID> { counts.withLock { Set($0.keys) } }
}
