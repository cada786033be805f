import BugSquasherGraph

/// The decisions of a start on a shared store whose daemon ID came from elsewhere, as a value.
///
/// A state directory copied to another machine or path (a cloned VM, a copied directory, a
/// restored backup) carries its `daemon-id` along. Two running daemons with one ID would each
/// take the other's import jobs for their own, and fail them at start for want of their spooled
/// input. So an ID whose origin (``IdentityOrigin``) is not this place is looked up among the
/// store's daemons: when its row is fresh, the store is listed again every second, and a
/// heartbeat written meanwhile proves another daemon runs with it (this daemon then takes an ID
/// of its own); a row that goes silent was this daemon's own, stopped (a directory moved, a
/// machine replaced), and the ID is kept. ``SquasherDaemon`` carries the answers out (the list,
/// the pause, the files, the log line). See docs/OPERATIONS.md, "Running on PostgreSQL".
struct SharedIdentityCheck {
    /// What to do next.
    enum Action: Equatable {
        /// Keep the ID; write this place as its origin when `record`.
        case keep(record: Bool)
        /// List the store's daemons again after `delay`, and tell ``looked(at:)`` this ID's row.
        case lookAgain(after: Duration)
        /// Another daemon that runs uses the ID (`member`, as the store listed it last): take a new one.
        case renew(sharedWith: StoreMember)
    }

    /// How long between two looks at the store's daemons (heartbeats come every 2 s).
    static let lookInterval = Duration.seconds(1)

    /// The silence of the ID's row at the last look.
    private var lastSilence: Double?

    /// The first decision: an ID made here is kept; one without a recorded origin (from a
    /// squasherd that did not record it) is kept and its origin recorded; one made elsewhere is
    /// looked up in the store, when the store is shared.
    static func start(recorded: IdentityOrigin?, here: IdentityOrigin, sharesStore: Bool) -> Action {
        guard let recorded else { return .keep(record: true) }
        if recorded == here { return .keep(record: false) }
        return sharesStore ? .lookAgain(after: .zero) : .keep(record: true)
    }

    /// The store listed `member` for the ID (`nil`: no row, or none fresh enough to list).
    mutating func looked(at member: StoreMember?) -> Action {
        guard let member, member.isAnswering else { return .keep(record: true) }
        // Without a heartbeat, the silence grows by the pause between two looks; a smaller one
        // is a heartbeat written since the last look.
        if let lastSilence, member.silentFor < lastSilence { return .renew(sharedWith: member) }
        lastSilence = member.silentFor
        return .lookAgain(after: Self.lookInterval)
    }
}
