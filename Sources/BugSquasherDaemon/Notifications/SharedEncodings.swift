import BugSquasherProtocol
import Synchronization

/// A save's object lists, encoded once when a first subscriber needs them and then shared.
final class SharedEncoding: Sendable {
    private let lists = Mutex<EncodedChangeLists?>(nil)

    /// The lists; `encode` runs for the first caller only.
    func lists(_ encode: () -> EncodedChangeLists) -> EncodedChangeLists {
        if let done = lists.withLock({ $0 }) { return done }
        let encoded = encode()
        return lists.withLock { lists in
            if let done = lists { return done }
            lists = encoded
            return encoded
        }
    }
}

/// The shared encodings of one published save, one per set of options a subscriber can ask for.
struct SharedEncodings: Sendable {
    private let encodings = (0..<4).map { _ in SharedEncoding() }

    func of(includeValues: Bool, idRuns: Bool) -> SharedEncoding {
        encodings[(includeValues ? 2 : 0) + (idRuns ? 1 : 0)]
    }
}
