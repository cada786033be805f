import Synchronization

/// The bytes of large replies that connections have been handed and have not yet written to
/// their sockets, shared by a daemon's servers.
///
/// A client may ask for a large reply (a page of 10,000 rows is several MB) and never read it;
/// without a bound, a few dozen such connections, which any user who may connect can open,
/// hold gigabytes of the daemon's memory. A reply of at least ``smallestCharged`` bytes is
/// charged from when it is handed to its connection until its last byte is in the socket; one
/// that would take the total past ``limit`` closes its connection instead.
public final class OutgoingReplyBudget: Sendable {
    /// The most bytes of large replies not yet written, at once.
    public let limit: Int
    /// Replies smaller than this are not charged: replies to edits and status calls, and the
    /// saves of a change feed, which a feed's own mailbox bounds.
    public static let smallestCharged = 64 * 1024
    private let held = Atomic<Int>(0)
    private let onDrained: @Sendable () -> Void

    /// A budget of `limit` bytes; `onDrained` runs after a reply of 1 MiB or more has been
    /// written or dropped (the owner may give the memory freed back to the system then).
    public init(limit: Int, onDrained: @escaping @Sendable () -> Void = {}) {
        self.limit = limit
        self.onDrained = onDrained
    }

    /// Charges `bytes`; `false`, charging nothing, when that would take the total past the limit.
    func take(_ bytes: Int) -> Bool {
        let total = held.add(bytes, ordering: .relaxed).newValue
        guard total <= limit else {
            held.subtract(bytes, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Gives back what ``take(_:)`` charged, once the reply is written or dropped.
    func giveBack(_ bytes: Int) {
        held.subtract(bytes, ordering: .relaxed)
        if bytes >= 1024 * 1024 { onDrained() }
    }
}
