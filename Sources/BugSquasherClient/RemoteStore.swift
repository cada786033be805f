import Algorithms
public import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Synchronization

/// An incremental store backed by squasherd: fetches and fault fulfilment go over the read
/// socket (batched: one `Values` call per fault batch), registrations are forwarded to the
/// subscriber that owns the store, and the SQLite file is never opened. Read-only: saves throw.
///
/// ```swift
/// let store = try RemoteStore(socketPath: "/run/squasherd/squasherd.sock")
/// let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
/// ```
public final class RemoteStore: IncrementalStore {
    public var storeType: String { "Remote" }

    /// The socket path.
    public let socketPath: String
    private let client: BlockingVarlinkClient
    private let state = Mutex(State())

    struct State {
        var coding: WireCoding?
        var storeIdentifier = ""
        /// The history token `Store.Info` answered when the metadata was loaded.
        var loadedToken: HistoryToken?
        var registrations: [ObjectID: Int] = [:]
        /// Registered IDs: the version last loaded (none: a fault).
        var versions: [ObjectID: Int64] = [:]
        /// Rows loaded for IDs no context registered yet (a fetch's rows, just before the
        /// context registers their objects), in two generations so that the map stays bounded
        /// without dropping a fetch's rows before the context got to register them.
        var unclaimed: [ObjectID: Int64] = [:]
        var unclaimedOlder: [ObjectID: Int64] = [:]
        var statistics = Statistics()

        mutating func claimVersion(_ id: ObjectID) -> Int64? {
            unclaimed.removeValue(forKey: id) ?? unclaimedOlder.removeValue(forKey: id)
        }
    }

    /// What the store has asked the daemon: for tests and for subscribers that report their cost.
    public struct Statistics: Sendable, Hashable {
        /// Fetch requests.
        public var fetches = 0
        /// `Values` requests (fault batches).
        public var valueRequests = 0
        /// Objects whose values were loaded, by ID.
        public var loadedObjects: Set<ObjectID> = []
    }

    /// Called (synchronously, from the context) when registrations change: `added` IDs with the
    /// version held (0 for a fault; a fault that loads is added again with its version),
    /// `removed` IDs.
    let registrationSink = Mutex<(@Sendable (_ added: [(ObjectID, Int64)], _ removed: [ObjectID]) -> Void)?>(nil)

    /// Connects to the read socket.
    ///
    /// - Parameters:
    ///   - socketPath: squasherd's read socket (`squasherd.sock` in its runtime directory).
    ///   - timeout: how long connecting and each call may wait for squasherd before failing
    ///     (see `BlockingVarlinkClient`); `nil` waits as long as it takes.
    public init(socketPath: String, timeout: Duration? = nil) throws {
        self.socketPath = socketPath
        do {
            client = try BlockingVarlinkClient(path: socketPath, timeout: timeout)
        } catch let error as TransportError {
            throw error.wordedForSquasherd
        }
    }

    /// What the store has asked so far.
    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// The IDs registered by contexts on this store, with their counts.
    public var registeredObjectIDs: [ObjectID: Int] { state.withLock { $0.registrations } }

    /// The version of each registered object as last loaded (0 for faults).
    func heldVersions() -> [(ObjectID, Int64)] {
        state.withLock { state in state.registrations.keys.map { ($0, state.versions[$0] ?? 0) } }
    }

    private func coding() throws -> WireCoding {
        guard let coding = state.withLock({ $0.coding }) else {
            throw GraphError(
                .invalidStore, "RemoteStore used before loadMetadata(for:).",
                advice: "Open it through a StoreCoordinator.")
        }
        return coding
    }

    private func call<P: Encodable, R: Decodable>(_ method: String, _ parameters: P, as type: R.Type = R.self) throws
        -> R
    {
        do {
            return try client.call(method, parameters, as: R.self)
        } catch let error as VarlinkError {
            let unavailable = error.isStoreUnavailable
            throw GraphError(
                unavailable ? .storeIO : .invalidArgument,
                "squasherd \(unavailable ? "could not answer" : "refused") \(method): \(error.statement ?? error.description)",
                advice: error.advice, cause: error)
        } catch {
            throw GraphError(
                .storeIO, "The connection to squasherd at \(socketPath) failed during \(method).",
                cause: TransportError.wordForSquasherd(error))
        }
    }

    public func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata {
        let info = try storeInfo()
        guard info.modelVersionHash == model.versionHash else {
            throw GraphError(
                .incompatibleModel,
                "squasherd at \(socketPath) serves model \(info.modelVersionHash), this program has \(model.versionHash).",
                advice: "Update one of them."
            )
        }
        state.withLock { state in
            state.coding = WireCoding(model: model)
            state.storeIdentifier = info.storeIdentifier
            state.loadedToken = HistoryToken(rawValue: info.token)
        }
        return StoreMetadata(
            storeIdentifier: info.storeIdentifier, storeType: storeType, modelVersionHash: info.modelVersionHash)
    }

    public func execute(_ request: any StoreRequest) throws -> StoreResult {
        guard let fetch = request as? FetchDescription else {
            if request is SaveChanges {
                throw GraphError(
                    .readOnly,
                    "A remote store is read-only.",
                    advice: "Write through squasherd's write socket (squasherctl, or io.bugsquasher.Import.Update)."
                )
            }
            throw unsupported(request)
        }
        let coding = try coding()
        guard let entity = coding.model.entity(named: fetch.entityName) else {
            throw GraphError(.invalidArgument, "The model has no entity '\(fetch.entityName)'.")
        }
        let result: String =
            switch fetch.resultType {
            case .objectIDs: "ids"
            case .rows: "rows"
            case .count: "count"
            }
        // squasherd caps one reply (10,000 rows, 100,000 IDs) and says `more` when the cap cut
        // it: the pages are fetched until the limit or the end, so a fetch is never cut short.
        // (Pages are separate reads: a commit between two of them can shift the offsets.)
        var (ids, rows, count) = ([String](), [WireRow](), 0)
        var received = 0
        while true {
            let page: FetchReply = try call(
                "io.bugsquasher.Store.Fetch",
                FetchParameters(
                    entity: fetch.entityName, predicate: fetch.predicate?.text,
                    sort: fetch.sort.map { ($0.ascending ? "" : "-") + $0.keyPath },
                    limit: fetch.limit.map { $0 - received }, offset: fetch.offset + received, result: result
                ))
            state.withLock { $0.statistics.fetches += 1 }
            count = page.count ?? 0
            ids += page.ids ?? []
            rows += page.rows ?? []
            let pageSize = (page.ids?.count ?? 0) + (page.rows?.count ?? 0)
            received += pageSize
            guard page.more == true, pageSize > 0 else { break }
        }
        let store = state.withLock { $0.storeIdentifier }
        switch fetch.resultType {
        case .count: return .fetched(.count(count))
        case .objectIDs: return .fetched(.objectIDs(try ids.map { try parse($0, store: store) }))
        case .rows:
            let decoded = try rows.map { row in
                StoreRow(
                    objectID: try parse(row.id, store: store),
                    snapshot: try coding.decodeRow(
                        row.values, version: row.version, entity: entity, storeIdentifier: store))
            }
            record(decoded)
            return .fetched(.rows(decoded))
        }
    }

    /// The ID a URI squasherd sent stands for; it shares `store`'s string when it names that store.
    private func parse(_ uri: String, store: String) throws -> ObjectID {
        guard let id = ObjectID(uri: uri, reusingStore: store) else {
            throw GraphError(.storeIO, "squasherd sent '\(uri)', which is not an object ID.")
        }
        return id
    }

    /// Notes the versions of loaded rows. A registered fault that loads is reported to the
    /// subscriber again, with its version: squasherd sends its updates from then on.
    private func record(_ rows: [StoreRow]) {
        let loadedFaults = state.withLock { state -> [(ObjectID, Int64)] in
            if state.unclaimed.count > 10_000 {
                state.unclaimedOlder = state.unclaimed
                state.unclaimed = [:]
            }
            var loadedFaults: [(ObjectID, Int64)] = []
            for row in rows {
                let id = row.objectID
                let version = row.snapshot.version
                state.statistics.loadedObjects.insert(id)
                guard state.registrations[id] != nil else {
                    state.unclaimed[id] = version
                    continue
                }
                if (state.versions.updateValue(version, forKey: id) ?? 0) == 0 { loadedFaults.append((id, version)) }
            }
            return loadedFaults
        }
        if !loadedFaults.isEmpty { registrationSink.withLock { $0 }?(loadedFaults, []) }
    }

    public func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        let coding = try coding()
        var result: [ObjectID: RowSnapshot] = [:]
        for slice in objectIDs.chunks(ofCount: 5_000) {
            let reply: RowsReply = try call("io.bugsquasher.Store.Values", IDsParameters(ids: slice.map(\.uriString)))
            state.withLock { $0.statistics.valueRequests += 1 }
            var rows: [StoreRow] = []
            let store = state.withLock { $0.storeIdentifier }
            for row in reply.rows {
                let id = try parse(row.id, store: store)
                guard let entity = coding.model.entity(named: id.entityName) else { continue }
                let snapshot = try coding.decodeRow(
                    row.values, version: row.version, entity: entity, storeIdentifier: store)
                result[id] = snapshot
                rows.append(StoreRow(objectID: id, snapshot: snapshot))
            }
            record(rows)
        }
        return result
    }

    public func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        var ids: [ObjectID] = []
        while true {
            // Pages of the daemon's per-call cap, until it says there are no more.
            let reply: IDsReply = try call(
                "io.bugsquasher.Store.Related",
                RelatedParameters(id: objectID.uriString, relationship: name, offset: ids.isEmpty ? nil : ids.count))
            ids += try reply.ids.map { try parse($0, store: objectID.storeIdentifier) }
            guard reply.more == true, !reply.ids.isEmpty else { return ids }
        }
    }

    public func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        throw GraphError(
            .readOnly, "A remote store is read-only and assigns no IDs.",
            advice: "Insert through squasherd's write socket.")
    }

    public func didRegister(_ objectIDs: [ObjectID]) {
        let added = state.withLock { state -> [(ObjectID, Int64)] in
            var added: [(ObjectID, Int64)] = []
            for id in objectIDs {
                state.registrations[id, default: 0] += 1
                guard state.registrations[id] == 1 else { continue }
                if let version = state.claimVersion(id) { state.versions[id] = version }
                added.append((id, state.versions[id] ?? 0))
            }
            return added
        }
        if !added.isEmpty { registrationSink.withLock { $0 }?(added, []) }
    }

    public func didUnregister(_ objectIDs: [ObjectID]) {
        let removed = state.withLock { state -> [ObjectID] in
            var removed: [ObjectID] = []
            for id in objectIDs {
                let count = state.registrations[id, default: 0] - 1
                if count > 0 {
                    state.registrations[id] = count
                } else {
                    state.registrations[id] = nil
                    state.versions[id] = nil
                    removed.append(id)
                }
            }
            return removed
        }
        if !removed.isEmpty { registrationSink.withLock { $0 }?([], removed) }
    }

    /// Records the versions a merged did-save brought, so that re-registrations carry them.
    func noteVersions(_ didSave: DidSave) {
        state.withLock { state in
            for change in didSave.inserted + didSave.updated where state.registrations[change.objectID] != nil {
                state.versions[change.objectID] = change.version
            }
        }
    }

    public func changes(after token: HistoryToken, limit: Int) throws -> [DidSave] {
        let coding = try coding()
        let store = state.withLock { $0.storeIdentifier }
        let reply: HistoryReply = try call(
            "io.bugsquasher.Changes.History", HistoryParameters(after: token.rawValue, limit: limit))
        return try reply.saves.map { try coding.decode($0, storeIdentifier: store) }
    }

    /// The store's newest history token when a coordinator loaded its metadata (one round trip
    /// fewer than ``currentHistoryToken()`` for a caller that only needs a token from about
    /// then); `nil` before that.
    public var tokenAtLoad: HistoryToken? { state.withLock { $0.loadedToken } }

    public func currentHistoryToken() throws -> HistoryToken {
        HistoryToken(rawValue: try storeInfo().token)
    }

    /// The identifier of the store squasherd serves now: another than the one loaded when
    /// squasherd was restarted on another store (or the store was recreated).
    func servedStoreIdentifier() throws -> String {
        try storeInfo().storeIdentifier
    }

    /// What `Store.Info` says of the store squasherd serves now.
    private func storeInfo() throws -> StoreInfo {
        try call("io.bugsquasher.Store.Info", Empty())
    }
}
