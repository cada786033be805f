public import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// The history read: the store's changes after a token, and the saves of other processes handed
// to this one's observers in token order, with the values they are delivered with (a small
// save's rows, the inserts the observers look for, screened by the server). The follower
// (`HistoryFollower`) calls it on each hint and once a second; a save of this process calls it
// for the saves before its own. Why: docs/DESIGN-NOTES.md, "Other daemons' saves arrive as hints".
extension PostgresStore {
    public func changes(after token: HistoryToken, limit: Int) throws -> [DidSave] {
        let store = try requireLoaded().metadata.storeIdentifier
        return try withConnection("read the history", onceMoreIfEnded: true) { connection in
            let rows = try run(
                "SELECT token, payload FROM bs_history WHERE token > $1 ORDER BY token LIMIT $2",
                [.int64(token.rawValue), .int64(Int64(limit))], on: connection)
            return try rows.map { row in
                let cells = row.makeRandomAccess()
                return try HistoryCoding.decode(
                    try cells[1].decode(Data.self), store: store,
                    token: HistoryToken(rawValue: try cells[0].decode(Int64.self)))
            }
        }
    }

    public func currentHistoryToken() throws -> HistoryToken {
        _ = try requireLoaded()
        return try withConnection("read the history", onceMoreIfEnded: true) {
            HistoryToken(rawValue: try counterToken(on: $0))
        }
    }

    /// The newest token issued, read on `connection`.
    private func counterToken(on connection: PostgresConnection) throws -> Int64 {
        try run("SELECT token FROM bs_counter WHERE id = 1", [], on: connection).first?.decode(Int64.self) ?? 0
    }

    /// Hands the commit observers the saves in the history after the last one delivered (and
    /// before `limit`, when given): the other processes' saves, which this one learns of from the
    /// history. Runs with the connection held, so deliveries never interleave.
    func deliverHistory(
        before limit: Int64?, store: String, read page: HistoryPage? = nil, on connection: PostgresConnection
    ) throws {
        let handlers = commitHandlers.withLock { $0 } + otherHandlers.withLock { $0 }
        guard var last = delivered.withLock({ $0 }) else {
            // Where to follow from could not be read when observing began (the server did not
            // answer): what other processes saved since is unknown, so the observers refetch what
            // they hold, and following starts here.
            let now = try limit.map { $0 - 1 } ?? counterToken(on: connection)
            logger.warning(
                "could not tell which saves of other daemons this one has missed; its subscribers refetch what they hold",
                metadata: ["history.token": "\(now)"])
            for handler in gapHandlers.withLock({ $0 }) { handler(HistoryToken(rawValue: now)) }
            delivered.withLock { $0 = now }
            return
        }
        // A page the listener read is used when it goes on from the last save delivered.
        var page = page.map { HistoryPage(records: $0.records.filter { $0.token > last }, isWhole: $0.isWhole) }
        if page?.records.first?.token != last + 1 { page = nil }
        while limit.map({ last + 1 < $0 }) ?? true {
            let current = try page ?? readHistory(after: last, before: limit, on: connection)
            page = nil
            for record in current.records {
                // Tokens have no gaps: a missing one was pruned (retention) before it was read.
                if record.token > last + 1 { reportGap(after: last, through: record.token - 1) }
                try deliver(record, store: store, to: handlers, on: connection)
                last = record.token
            }
            if current.isWhole { break }
        }
        // Before a save of this process every token up to it was issued and committed (tokens
        // have no gaps): when none after the last delivered is left, they were pruned unread.
        if let limit, last + 1 < limit {
            reportGap(after: last, through: limit - 1)
            delivered.withLock { $0 = limit - 1 }
        }
    }

    /// Hands the observers the save of `record`, with its values (read on `connection`), and
    /// counts it delivered. Without a connection, throws ``NeedsReading`` before handing it out
    /// when its values would have to be read.
    private func deliver(
        _ record: HistoryPage.Record, store: String, to handlers: [@Sendable (DidSave) -> Void],
        on connection: PostgresConnection?
    ) throws {
        var didSave = try HistoryCoding.decode(
            record.payload, store: store, token: HistoryToken(rawValue: record.token),
            model: loaded.withLock { $0?.model })
        try attachValues(to: &didSave, on: connection)
        remember(didSave)
        for handler in handlers { handler(didSave) }
        delivered.withLock { $0 = record.token }
    }

    /// A save whose delivery needs rows read, met where no connection may be waited for.
    private struct NeedsReading: Error {}

    /// Delivers the saves of `page` (read on the listener's connection after a hint) right
    /// here, on the listener's event loop, as far as that needs no wait: while nothing holds
    /// the writing connection, and for saves that carry what their delivery needs (an edit's
    /// rows come in the history). The follower's thread is then not woken: a thread wake-up
    /// less on the way of every edit of another daemon to this one's subscribers. What is left
    /// (a gap, a save with inserts or whose rows must be read, the connection held) the
    /// follower delivers as before.
    /// Why: docs/DESIGN-NOTES.md, "Other daemons' saves arrive as hints".
    func deliverWithoutWaiting(_ page: HistoryPage) {
        guard isObserved, !counterBehind.load(ordering: .relaxed),
            let store = loaded.withLock({ $0?.metadata.storeIdentifier })
        else { return }
        // Held by a save of this process or by the follower, the connection says that a delivery
        // may be under way: the saves must reach the observers in token order.
        ifConnectionFree {
            let handlers = commitHandlers.withLock { $0 } + otherHandlers.withLock { $0 }
            guard var last = delivered.withLock({ $0 }) else { return }
            for record in page.records where record.token > last {
                // A gap (saves pruned unread) is the follower's to report. Inserts are read or
                // screened on the connection, and an import's chunk takes milliseconds to
                // decode, which the follower would do again: the loop leaves them too.
                guard record.token == last + 1, !HistoryCoding.mayHaveInserts(record.payload) else { return }
                do {
                    try deliver(record, store: store, to: handlers, on: nil)
                } catch {
                    // Rows to read, or a payload that does not decode: the follower reads or
                    // says what failed.
                    return
                }
                last = record.token
            }
        }
    }

    /// The statement of ``readHistory(after:before:on:)`` and ``readHistory(on:)``, on the
    /// history table as `table` names it.
    private static func historyPageSQL(_ table: String) -> String {
        "SELECT token, payload FROM \(table) WHERE token > $1 AND token < $2 ORDER BY token LIMIT \(HistoryPage.size)"
    }

    /// The history rows after `last` (and before `limit`), a page of at most ``HistoryPage/size``.
    func readHistory(after last: Int64, before limit: Int64?, on connection: PostgresConnection) throws
        -> HistoryPage
    {
        try HistoryPage(
            preparedPages.rows(Self.historyPageSQL("bs_history"), [last, limit ?? .max], on: connection)
                .blockingValue(watching: connection))
    }

    /// The history rows after the last save delivered, read on the event loop that received a
    /// hint (the listener's connection), so that the follower's thread finds them read when it
    /// wakes instead of asking that loop to read them and waiting again; `nil` before the first
    /// delivery or when the read fails (the follower then reads as usual).
    func readHistory(on connection: PostgresConnection) async -> HistoryPage? {
        guard let last = delivered.withLock({ $0 }) else { return nil }
        return try? await readHistory(after: last, on: connection)
    }

    /// The history rows after `last`, a page of at most ``HistoryPage/size``, read on a connection that may not
    /// have the store's schema on its search path (the listening connection has not).
    func readHistory(after last: Int64, on connection: PostgresConnection) async throws -> HistoryPage {
        let sql = Self.historyPageSQL("\(PostgresSchema.quote(configuration.schema)).bs_history")
        return try HistoryPage(await preparedPages.rows(sql, [last, .max], on: connection).get())
    }

    /// Saves of at most this many objects write their updated rows into the history, so that
    /// the other daemons need not read them (an edit's row, in one round trip instead of two).
    static let valuesInHistoryUpToObjects = 16

    /// The history row's payload of `didSave`.
    static func historyPayload(_ didSave: DidSave) -> Data {
        HistoryCoding.encode(didSave, withValues: didSave.objectCount <= valuesInHistoryUpToObjects)
    }

    /// Saves of other processes with at most this many objects are delivered with their values.
    static let valuesUpToObjects = 1_000
    /// Larger saves are delivered with the values of at most this many inserts of the entities
    /// whose every insert is looked for (``InsertInterest/every``; an import's chunk of bugs).
    static let insertValuesUpToObjects = 5_000

    /// The values of another process's save, read once here for every observer of this process
    /// (the history keeps none but a small save's own rows): a small save's changes, and the
    /// inserts the observers look for (``screenInsertsOfOthers(by:)``), which the server
    /// screens; those they do not look for are left out. A row a later save changed keeps its
    /// values out (they would not be this save's).
    private func attachValues(to didSave: inout DidSave, on connection: PostgresConnection?) throws {
        guard let state = loaded.withLock({ $0 }) else { return }
        let isSmall = didSave.objectCount <= Self.valuesUpToObjects
        // Small saves carry their updated rows (see `historyPayload`): those are not read again.
        var reading = isSmall ? didSave.updated.filter { $0.values == nil }.map(\.objectID) : []
        var rows: [ObjectID: RowSnapshot] = [:]
        // Inserts are handled by position: an import's chunk brings a thousand, which every
        // other daemon goes through (copying the changes, or hashing their IDs, cost more
        // than the rest of the delivery).
        var leftOut: [Bool] = []
        let interest = insertInterest.withLock { $0 }
        var every: [ObjectID] = []
        for (entity, positions) in Self.insertsWithoutValues(didSave.inserted) {
            // Without a screen, a small save's inserts are read and a large one's left without values.
            guard let interest else {
                if isSmall { every += positions.map { didSave.inserted[$0].objectID } }
                continue
            }
            switch interest(entity) {
            case .none:
                Self.leave(positions, outOf: &leftOut, count: didSave.inserted.count)
            case .every:
                every += positions.map { didSave.inserted[$0].objectID }
            case .matching(let predicate):
                guard let connection else { throw NeedsReading() }
                let keys = positions.map { didSave.inserted[$0].objectID.key }
                guard let found = try screened(keys, of: entity, matching: predicate, state: state, on: connection)
                else { continue }
                let unmatched =
                    found.isEmpty ? positions : positions.filter { found[didSave.inserted[$0].objectID] == nil }
                Self.leave(unmatched, outOf: &leftOut, count: didSave.inserted.count)
                rows.merge(found) { $1 }
            }
        }
        if isSmall || every.count <= Self.insertValuesUpToObjects { reading += every }
        if !reading.isEmpty {
            guard let connection else { throw NeedsReading() }
            rows.merge(try self.rows(for: reading, state: state, on: connection)) { $1 }
        }
        if !leftOut.isEmpty {
            didSave.inserted = didSave.inserted.indices.compactMap { leftOut[$0] ? nil : didSave.inserted[$0] }
        }
        guard !rows.isEmpty else { return }
        for index in didSave.inserted.indices {
            let change = didSave.inserted[index]
            if let row = rows[change.objectID], row.version == change.version { didSave.inserted[index].values = row }
        }
        for index in didSave.updated.indices {
            let change = didSave.updated[index]
            if let row = rows[change.objectID], row.version == change.version { didSave.updated[index].values = row }
        }
    }

    /// The positions of the inserts that came without values, by entity, in the order the
    /// entities first appear (a save's inserts come in runs of one entity).
    private static func insertsWithoutValues(_ inserted: [ObjectChange]) -> [(entity: String, positions: [Int])] {
        var groups: [(entity: String, positions: [Int])] = []
        var current = -1
        for (position, change) in inserted.enumerated() where change.values == nil {
            let entity = change.objectID.entityName
            if current < 0 || groups[current].entity != entity {
                current = groups.firstIndex { $0.entity == entity } ?? groups.count
                if current == groups.count { groups.append((entity, [])) }
            }
            groups[current].positions.append(position)
        }
        return groups
    }

    /// Marks the inserts at `positions` as left out of the delivery (`leftOut` has one flag
    /// per insert of the save, `count`, once any is).
    private static func leave(_ positions: [Int], outOf leftOut: inout [Bool], count: Int) {
        guard !positions.isEmpty else { return }
        if leftOut.isEmpty { leftOut = [Bool](repeating: false, count: count) }
        for position in positions { leftOut[position] = true }
    }

    /// The rows of the inserts of `keys` (of `entity`) that match `predicate`, screened by the
    /// server. A row changed again since matches or not as it is now (the caller keeps it
    /// without values).
    /// `nil` when the predicate cannot be screened (the server or the store refused it): the
    /// inserts then stay, without values, and pass every watch, rather than stop the delivery of
    /// every later save. A broken connection throws, and the delivery is tried again.
    private func screened(
        _ keys: [Int64], of entity: String, matching predicate: ObjectPredicate, state: Loaded,
        on connection: PostgresConnection
    ) throws -> [ObjectID: RowSnapshot]? {
        let refusal: String
        do {
            let description = try state.model.requireEntity(entity)
            var select = PostgresSelect(
                model: state.model, entity: description, storeIdentifier: state.metadata.storeIdentifier)
            // Unnamed: the predicate changes as subscribers come and go (see `PreparedNames`).
            let sql = try select.rows(among: keys, matching: predicate)
            let rows = try run(sql, binds: select.bindings, on: connection)
            return try Self.snapshots(rows, entity: description, store: state.metadata.storeIdentifier)
        } catch let error as PSQLError where error.serverInfo != nil {
            refusal = error.serverInfo?[.message] ?? "\(error.code)"
        } catch let error as GraphError {
            refusal = "\(error)"
        }
        logger.warning(
            "could not match other daemons' inserts against the subscribers' watches; they go to every watch",
            metadata: ["entity": "\(entity)", "error": "\(refusal)"])
        return nil
    }

    /// Delivers the saves other processes committed since the last one delivered (the follower
    /// calls this on each hint, and once a second). With `hinted`, the newest token hinted: once
    /// the connection is free, a save of this process may have delivered it meanwhile (its hint
    /// can arrive before the save's own answer), and then there is nothing to read.
    /// With `page`, the history as the listener read it after the hint (see
    /// ``readHistory(on:)``).
    func deliverCommitsOfOthers(hinted: Int64? = nil, read page: HistoryPage? = nil) {
        guard isObserved, let store = loaded.withLock({ $0?.metadata.storeIdentifier }) else { return }
        do {
            // Not counted as writing (`isWriting`): while this delivers one save, the listener
            // reads the history a new hint announces, for the next round to find read.
            try withConnection("read the history", countsAsWriting: false) { connection in
                if counterBehind.exchange(false, ordering: .relaxed) { try moveCounterPastDelivered(on: connection) }
                if let hinted, isDelivered(through: hinted) { return }
                try deliverHistory(before: nil, store: store, read: page, on: connection)
                // The listener may have read its page before saves committed since: before the
                // newest one hinted, or, in a look without a hint (the once-a-second one, or after
                // the listener reconnected), before any that came meanwhile.
                if hinted.map({ !isDelivered(through: $0) }) ?? (page != nil) {
                    try deliverHistory(before: nil, store: store, on: connection)
                }
            }
            if deliveryFailing.exchange(false, ordering: .relaxed) {
                logger.notice("reading other daemons' saves again")
            }
        } catch {
            guard !deliveryFailing.exchange(true, ordering: .relaxed) else { return }
            logger.warning(
                "could not read other daemons' saves; retrying every second (not logged again until it works)",
                metadata: ["error": "\(Self.describe(error))"])
        }
    }

    /// The database went back: its newest token issued is below the last one this process
    /// delivered (restored from a backup, or a replica promoted without the newest saves). The
    /// tokens in between would be issued again for other saves, and readers that saw them would
    /// skip those. The counter is moved one past the last token delivered: the token left
    /// unissued makes every reader resuming from one of the lost saves find that the history
    /// does not go on from its token, and refetch what it holds, as after saves pruned unread
    /// (docs/OPERATIONS.md, "Backup and restore").
    func moveCounterPastDelivered(on connection: PostgresConnection) throws {
        guard let last = delivered.withLock({ $0 }) else { return }
        let issued = try counterToken(on: connection)
        guard issued < last else { return }
        keyReserve.withLock { $0.removeAll() }
        _ = try run(
            "UPDATE bs_counter SET token = GREATEST(token, $1) WHERE id = 1", [.int64(last + 1)], on: connection)
        logger.error(
            "the database went back: its newest token is below the last one this daemon delivered (restored from a backup, or a replica promoted without the newest saves); tokens go on after a token left unissued, and every subscriber refetches what it holds at the next save",
            metadata: ["history.token": "\(issued)", "history.delivered": "\(last)"])
    }

    /// The most rows ``recentRows`` keeps, and the most objects a save may update for its rows
    /// to be kept (an import's chunk would only push out the rows of edits).
    static let recentRowLimit = 1_024
    static let rememberedUpdatesPerSave = 16

    /// Keeps the rows `didSave` updated, with their values, and forgets those it updated without
    /// values or deleted. Called as each save is delivered, in token order, so that a row kept is
    /// the newest one delivered; an edit that starts from a row another process changed since
    /// fails its version check and reads again.
    func remember(_ didSave: DidSave) {
        guard !didSave.updated.isEmpty || !didSave.deleted.isEmpty else { return }
        recentRows.withLock { rows in
            for change in didSave.deleted { rows[change.objectID] = nil }
            let keep = didSave.updated.count <= Self.rememberedUpdatesPerSave
            for change in didSave.updated { rows[change.objectID] = keep ? change.values : nil }
            if rows.count > Self.recentRowLimit { rows.removeAll(keepingCapacity: true) }
        }
    }

    /// Whether the saves up to `token` are delivered, or being delivered by the save of this
    /// process that committed it.
    func isDelivered(through token: Int64) -> Bool {
        token <= max(delivered.withLock { $0 ?? .max }, committedHere.withLock { $0 })
    }

    /// Whether anyone observes commits, this process's or the others'.
    var isObserved: Bool { !commitHandlers.withLock({ $0.isEmpty }) || !otherHandlers.withLock({ $0.isEmpty }) }
}

/// Rows of the history in token order, as read by one statement.
struct HistoryPage: Sendable {
    /// One history row: a save's token and its encoded did-save.
    struct Record: Sendable {
        let token: Int64
        let payload: Data
    }

    /// The most rows one page holds.
    static let size = 1_000

    var records: [Record]
    /// Whether the page holds every row there was after its first (it is shorter than a page).
    var isWhole: Bool
}

extension HistoryPage {
    /// The rows of a `token, payload` statement limited to ``size``, prepared through
    /// ``PreparedPages``.
    init(_ rows: [PostgresRow]) throws {
        records = try rows.map { row in
            let cells = row.makeRandomAccess()
            return Record(
                token: try cells[0].binary.decode(Int64.self), payload: try cells[1].binary.decode(Data.self))
        }
        isWhole = rows.count < Self.size
    }
}
