public import Foundation

// Capabilities a store may have beyond ``IncrementalStore``, which a daemon asks for by name
// (`store as? any Checkpointing`) rather than by the store's type: a store on a server answers
// them in its own way, or not at all.

/// A store that can check its own structure quickly enough to do so at every start, so that a
/// damaged store is refused instead of served.
public protocol SelfChecking: Sendable {
    /// The problems found, or `["ok"]` when the store is sound.
    func quickCheck() throws -> [String]
}

/// A store that moves what it committed into its main storage on request: what a clean
/// shutdown does, so that the next start has nothing to replay (SQLite's WAL checkpoint).
public protocol Checkpointing: Sendable {
    /// Moves the committed saves into the main storage.
    func checkpoint() throws

    /// Calls `handler` after each checkpoint the store runs by itself or on request, with how
    /// long it took and who ran it: what a daemon graphs. A later call replaces the handler.
    func observeCheckpoints(_ handler: @escaping @Sendable (CheckpointRun) -> Void)
}

/// One checkpoint a ``Checkpointing`` store ran: who ran it and how long it took.
public struct CheckpointRun: Sendable, Hashable {
    /// Who ran a checkpoint.
    public enum Kind: String, Sendable, CaseIterable {
        /// The store's own background checkpoint, beside commits.
        case background
        /// A checkpoint a commit ran itself, because the background ones fell behind.
        case writer
        /// A checkpoint asked for through ``Checkpointing/checkpoint()`` (at shutdown).
        case requested
    }

    /// Who ran it.
    public var kind: Kind
    /// How long it took, from its start to its end (its wait for an interactive save not counted).
    public var duration: Duration

    /// A checkpoint run by `kind` that took `duration`.
    public init(kind: Kind, duration: Duration) {
        self.kind = kind
        self.duration = duration
    }
}

/// A store kept in files on this machine, which can be deleted or replaced under it while it is
/// open: a daemon watches for that, and copies what the open store holds before it exits.
public protocol FileBacked: Sendable {
    /// The store's main file.
    var url: URL { get }

    /// Why the store's path no longer names the files it has open, or `nil` while it does.
    func fileProblem() -> String?

    /// Writes a consistent copy of the open store to a new file at `path`.
    func writeCopy(to path: String) throws
}

/// A store that other processes write too (a database several programs share): it hands this
/// process the saves they commit, in token order and without values, so that a stack merges them
/// into its main context as it merges its own.
public protocol SharedStore: Sendable {
    /// Calls `handler` after each save another process commits, serially and in token order,
    /// from the next one on.
    func observeCommitsOfOthers(_ handler: @escaping @Sendable (DidSave) -> Void)

    /// Calls `handler` when saves this process had not read yet were pruned from the history
    /// before it could (it was cut off longer than the retention): `missed` is the newest token
    /// gone. What it holds may be stale, with no save to say so; it must refetch.
    func observeHistoryGaps(_ handler: @escaping @Sendable (_ missed: HistoryToken) -> Void)

    /// Hands this process's observers only the inserts of other processes' saves that
    /// `interest` says they look for, each with its values (the others are left out of the
    /// did-save); without it, a large save's inserts come without values, and every insert
    /// would pass every watch. `interest` is asked once per entity a save inserts, when the save
    /// is read. squasherd answers for its subscribers' watches (`insertsOf`), so that another
    /// daemon's import costs a subscriber waiting for a few keys nothing.
    /// Why: docs/DESIGN-NOTES.md, "Other daemons' saves arrive as hints".
    func screenInsertsOfOthers(by interest: @escaping @Sendable (_ entity: String) -> InsertInterest)
}

/// Which of another process's inserts of one entity the observers of this process look for
/// (``SharedStore/screenInsertsOfOthers(by:)``).
public enum InsertInterest: Sendable, Hashable {
    /// None: the inserts are left out of the did-save.
    case none
    /// Every one: they all stay, with their values up to a store's limit for one save.
    case every
    /// Those matching the predicate, with their values; the others are left out. An insert
    /// whose row changed again before the save was read is matched as it is then, and stays
    /// without values (they would not be the save's); one deleted again by then is left out.
    case matching(ObjectPredicate)
}

/// A store on a server, whose content another program can replace while this process has it
/// open (a database dropped and made anew, another store restored in its place): it tells when
/// the server no longer holds the store this process opened, whose object IDs and tokens the
/// process hands out. Going on would hand out the other store's objects under the first one's
/// IDs; a daemon stops instead, to open what the server holds now.
public protocol IdentityChecking: Sendable {
    /// What became of the store this process opened, once the server was found without it;
    /// `nil` while it holds it (or could not be asked).
    func identityProblem() -> String?
}

/// A store that keeps its history for a while, not for ever (docs/OPERATIONS.md, "History
/// retention"): a reader whose token is older than the retained history is told so and refetches.
public protocol HistoryPruning: Sendable {
    /// Deletes the oldest saves: those committed before `date`, and those beyond the newest
    /// `count`. The newest save always stays (its token is the store's). Returns how many went.
    func pruneHistory(before date: Date?, keepingNewest count: Int?) throws -> Int

    /// The newest token whose save is gone from the history (0 while none is): a reader at a
    /// token below it cannot learn what changed from the history.
    func historyHorizon() throws -> HistoryToken
}

/// What a ``SharedStore`` knows of its users: which programs are attached and how far each has
/// read, and whether its server answers. squasherd shows both in its status.
public protocol StoreMembership: Sendable {
    /// Names this process to the store's other users as `member` on `host`; from then on it is
    /// listed by ``members()``, with the newest save it has read, until ``detach()``.
    func attach(as member: String, host: String)

    /// Takes this process off the list (a clean stop).
    func detach()

    /// Takes another member off the list when it has not answered for
    /// ``StoreMember/silentAfter``: a program gone for good (its host lost). Returns whether it
    /// was listed and silent, and so removed; one that answers stays listed. One that was only
    /// cut off is listed again at its next heartbeat.
    func forget(_ member: String) throws -> Bool

    /// The programs attached to the store, this one included.
    func members() throws -> [StoreMember]

    /// Whether the store's server answered this process's last heartbeat.
    var reachability: StoreReachability { get }

    /// Calls `handler` each time the server answers again after the store found it
    /// unreachable: work waiting to retry (an import) need not wait out its delay.
    func observeReachableAgain(_ handler: @escaping @Sendable () -> Void)
}

/// A program attached to a shared store, as the store last heard of it.
public struct StoreMember: Sendable, Equatable {
    /// The ID the program attached with (squasherd's daemon ID).
    public var id: String
    /// The host it runs on.
    public var host: String
    /// The newest save it has read from the history.
    public var token: HistoryToken
    /// Saves committed after ``token``: how far behind it is.
    public var behind: Int64
    /// Seconds since its last heartbeat, by the server's clock.
    public var silentFor: Double

    /// How long a member may go without a heartbeat before it counts as silent (stopped or cut
    /// off): five of squasherd's heartbeats, which come every 2 s.
    public static let silentAfter: Double = 10

    /// Whether it was heard from lately (within ``silentAfter``).
    public var isAnswering: Bool { silentFor <= Self.silentAfter }

    /// A member as the store lists it.
    public init(id: String, host: String, token: HistoryToken, behind: Int64, silentFor: Double) {
        (self.id, self.host, self.token, self.behind, self.silentFor) = (id, host, token, behind, silentFor)
    }
}

/// The cause of a ``GraphError`` whose store's server could not be reached (down, restarting,
/// cut off, a name that does not resolve), as opposed to one that answered and refused: such a
/// failure is waited out (a start, an import), not reported as the request's fault.
public protocol ServerUnreachable: Error, Sendable {}

extension GraphError {
    /// Whether the store's server could not be reached (the cause is a ``ServerUnreachable``).
    public var isServerUnreachable: Bool { cause is any ServerUnreachable }
}

/// Whether a store on a server can be reached from this process.
public enum StoreReachability: Sendable, Equatable {
    /// The last heartbeat was answered.
    case reachable
    /// No answer since `since`; `reason` says what failed.
    case unreachable(since: Date, reason: String)
}

/// A store that writes a consistent copy of itself while it is in use: an online backup that
/// imports, edits and subscribers go on beside (docs/OPERATIONS.md, "Backup and restore").
public protocol Snapshotting: Sendable {
    /// Writes the copy to a new file at `path`, checks it, and says what it holds.
    func writeSnapshot(to path: String) throws -> StoreSnapshot
}

/// What a store's snapshot holds.
public struct StoreSnapshot: Sendable, Equatable {
    /// The store's identifier.
    public var storeIdentifier: String
    /// The newest history token the snapshot holds.
    public var token: HistoryToken
    /// Its size in bytes.
    public var bytes: Int

    /// A description of a snapshot.
    public init(storeIdentifier: String, token: HistoryToken, bytes: Int) {
        (self.storeIdentifier, self.token, self.bytes) = (storeIdentifier, token, bytes)
    }
}
