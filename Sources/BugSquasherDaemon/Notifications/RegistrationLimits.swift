import Synchronization

/// Caps on the IDs subscribers register, which the daemon keeps in memory (about 400 bytes
/// each): per subscription, and over all subscriptions together. Without them, any local user
/// (the read socket is open to everyone) could make the daemon hold millions of registrations
/// of objects that do not even exist.
final class RegistrationLimits: Sendable {
    /// The most IDs one subscription registers.
    let perSubscription: Int
    /// The most IDs all subscriptions register together.
    let total: Int
    private let registered = Atomic<Int>(0)

    init(perSubscription: Int, total: Int) {
        self.perSubscription = perSubscription
        self.total = total
    }

    /// The IDs registered now, over all subscriptions.
    var current: Int { registered.load(ordering: .relaxed) }

    /// Counts `added` new registrations of a subscription that has `subscriptionHas`; counts
    /// nothing and throws when that passes a cap.
    func take(_ added: Int, subscriptionHas: Int) throws(RegistrationLimitExceeded) {
        guard added > 0 else { return }
        guard subscriptionHas + added <= perSubscription else {
            throw RegistrationLimitExceeded(limit: perSubscription, registered: subscriptionHas, scope: "subscription")
        }
        let now = registered.wrappingAdd(added, ordering: .relaxed).newValue
        guard now <= total else {
            registered.subtract(added, ordering: .relaxed)
            throw RegistrationLimitExceeded(limit: total, registered: now - added, scope: "daemon")
        }
    }

    /// Uncounts registrations that ended.
    func giveBack(_ count: Int) {
        registered.subtract(count, ordering: .relaxed)
    }
}

/// A registration refused by ``RegistrationLimits``.
struct RegistrationLimitExceeded: Error {
    /// The cap.
    var limit: Int
    /// The IDs already registered, by the subscription or by all of them (see `scope`).
    var registered: Int
    /// `subscription` or `daemon`.
    var scope: String
}
