import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherVarlink
import Foundation

/// `io.bugsquasher.Store`: fetches and batched value look-ups, answered from the store directly
/// (no context: nothing is registered on the daemon's side by a remote read), on the read
/// threads (``ThreadExecutor/readers()``): a client decides how long its query takes.
struct StoreInterface: VarlinkInterface {
    let name = InterfaceName.store
    let writes = false
    let stack: PersistentStack
    let coding: WireCoding
    /// Where the reads run.
    let readers: ThreadExecutor

    func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        do {
            switch call.methodName {
            case "Info": try await handleInfo(call, context: context, replier: replier)
            case "Fetch": try await handleFetch(call, context: context, replier: replier)
            case "Values": try await handleValues(call, context: context, replier: replier)
            case "Related": try await handleRelated(call, context: context, replier: replier)
            default:
                throw VarlinkError.methodNotFound(call.method)
            }
        } catch let error as GraphError where error.isStoreUnavailable {
            throw VarlinkError("io.bugsquasher.Store.StoreUnavailable", explaining: error)
        } catch let error as GraphError {
            throw VarlinkError("io.bugsquasher.Store.InvalidRequest", explaining: error)
        }
    }

    /// `Info`: the store's identity, type, model hash, token and entities.
    private func handleInfo(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws
    {
        let (store, model) = (stack.store, stack.model)
        try await replier.reply(
            StoreInfo(
                storeIdentifier: stack.mainCoordinator.storeIdentifier, storeType: store.storeType,
                modelVersionHash: model.versionHash, token: try store.currentHistoryToken().rawValue,
                entities: model.entities.map(\.name)
            ))
    }

    // Replies of rows are encoded on the read threads too, where they were read: a page of
    // 10,000 rows takes as long to encode as to read, and encoded on the cooperative
    // pool, the pages of a few dozen clients held up `Jobs.Status` and the watchdog's
    // health check for seconds.

    /// `Fetch`: a page of the objects a predicate matches: IDs, rows or a count.
    private func handleFetch(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let parameters = try call.parameters(FetchParameters.self)
        try await replier.send(
            try await readers.run { try VarlinkReply.encode(fetch(parameters), continues: false) },
            continues: false)
    }

    /// `Values`: the current rows of up to 10,000 objects.
    private func handleValues(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let (store, model) = (stack.store, stack.model)
        let ids = try parse(try call.parameters(IDsParameters.self).ids)
        guard ids.count <= 10_000 else { throw invalid("ask for at most 10,000 IDs at once") }
        try await replier.send(
            try await readers.run {
                let rows = try store.newValues(for: ids)
                return try VarlinkReply.encode(
                    RowsReply(
                        rows: ids.compactMap { id in
                            guard let row = rows[id], let entity = model.entity(named: id.entityName) else {
                                return nil
                            }
                            return WireRow(
                                id: id.uriString, version: row.version,
                                values: coding.encode(row, entity: entity))
                        }), continues: false)
            }, continues: false)
    }

    /// `Related`: a page of the IDs a relationship of one object holds.
    private func handleRelated(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let store = stack.store
        let parameters = try call.parameters(RelatedParameters.self)
        guard let id = try parse([parameters.id]).first else { throw invalid("no ID") }
        let offset = parameters.offset ?? 0
        guard offset >= 0 else { throw invalid("offset must not be negative") }
        // A project's bugs can be hundreds of thousands: capped as a Fetch of IDs is.
        let ids = try await readers.run { try store.newValue(forRelationship: parameters.relationship, of: id) }
            .dropFirst(offset)
        let page = ids.prefix(Self.maximumIDs)
        try await replier.reply(IDsReply(ids: page.map(\.uriString), more: ids.count > page.count ? true : nil))
    }

    /// The most rows one `Fetch` returns; page with `offset` for more.
    static let maximumRows = 10_000
    /// The most IDs one `Fetch` returns.
    static let maximumIDs = 100_000

    private func invalid(_ message: String) -> VarlinkError {
        VarlinkError("io.bugsquasher.Store.InvalidRequest", ["message": .string(message)])
    }

    private func parse(_ uris: [String]) throws -> [ObjectID] {
        try uris.map { uri in
            guard let id = stack.mainCoordinator.managedObjectID(forURIRepresentation: uri) else {
                throw invalid("'\(uri)' is not an object ID of this store (x-bugsquasher://STORE/Entity/p42)")
            }
            return id
        }
    }

    private func fetch(_ parameters: FetchParameters) throws -> FetchReply {
        let model = stack.model
        guard let entity = model.entity(named: parameters.entity) else {
            throw invalid(
                "unknown entity '\(parameters.entity)'; the model has \(model.entities.map(\.name).joined(separator: ", "))"
            )
        }
        var predicate: ObjectPredicate?
        if let text = parameters.predicate, !text.isEmpty {
            predicate = try ObjectPredicate(parsing: text).coerced(for: entity, in: model)
        }
        let sort = (parameters.sort ?? []).map { key in
            key.hasPrefix("-") ? SortKey(String(key.dropFirst()), ascending: false) : SortKey(key)
        }
        let resultType: FetchDescription.ResultType
        switch parameters.result ?? "ids" {
        case "ids": resultType = .objectIDs
        case "rows": resultType = .rows
        case "count": resultType = .count
        default: throw invalid("result is ids, rows or count")
        }
        if let limit = parameters.limit, limit < 0 { throw invalid("limit must not be negative") }
        if let offset = parameters.offset, offset < 0 { throw invalid("offset must not be negative") }
        // Rows and IDs are paged: one call never makes the daemon read an unbounded result. When
        // the cap is below what was asked, one more is fetched to tell the caller whether the cap
        // cut the result (`more`), so that no client takes a capped page for the whole answer.
        let cap = resultType == .rows ? Self.maximumRows : Self.maximumIDs
        let capped = resultType != .count && (parameters.limit ?? Int.max) > cap
        let limit = resultType == .count ? parameters.limit : capped ? cap + 1 : parameters.limit
        let request = FetchDescription(
            entityName: entity.name, predicate: predicate, sort: sort, limit: limit, offset: parameters.offset ?? 0,
            resultType: resultType)
        switch try stack.mainCoordinator.fetch(request) {
        case .objectIDs(let ids):
            let more = capped && ids.count > cap
            return FetchReply(ids: ids.prefix(cap).map(\.uriString), more: more ? true : nil)
        case .rows(let rows):
            let more = capped && rows.count > cap
            return FetchReply(
                rows: rows.prefix(cap).map {
                    WireRow(
                        id: $0.objectID.uriString, version: $0.snapshot.version,
                        values: coding.encode($0.snapshot, entity: entity))
                }, more: more ? true : nil)
        case .count(let count): return FetchReply(count: count)
        }
    }
}
