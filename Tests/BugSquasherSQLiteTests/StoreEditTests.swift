import BugSquasherGraph
import BugSquasherModel
import BugSquasherPostgres
import BugSquasherSQLite
import BugSquasherTesting
import Foundation
import Synchronization
import Testing

@Suite("Store edits: single edits on SQLite and PostgreSQL", .dropsPostgresSchemas)
struct StoreEditTests {
    /// The stores that edit without a context.
    static let editingKinds = StoreKind.allCases.filter { $0 != .inMemory }

    /// A fresh store of `kind` that edits without a context.
    static func editingStore(_ kind: StoreKind, in directory: TemporaryDirectory) throws
        -> any IncrementalStore & AttributeEditable & CommitObservable
    {
        switch kind {
        case .postgres:
            PostgresStore(
                configuration: try PostgresStoreConfiguration(
                    url: TestPostgres.url(schemaPrefix: "edit")!))
        default: try SQLiteStore(url: directory.file("store.sqlite"))
        }
    }

    /// What a client is answered must hold what it wrote: an edit that changes nothing answers
    /// the version that held the values when it compared them, not one another edit made after;
    /// an edit that names the version it read applies only at that version (compare-and-set).
    @Test(
        "an unchanged edit answers the version it compared; an expected version is a compare-and-set",
        arguments: editingKinds)
    func expectedVersions(kind: StoreKind) async throws {
        let directory = try TemporaryDirectory(prefix: "bs-edit-cas")
        defer { directory.remove() }
        let store = try Self.editingStore(kind, in: directory)
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        let context = ObjectContext(coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump, name: "test")
        let id = try await context.perform { context in
            let bug = context.insert(BugSquasherModel.Bug.self)
            (bug.key, bug.title, bug.status) = ("C-1", "t", "Open")
            try context.saveToStore()
            return bug.objectID
        }
        func request(_ status: String, at version: Int64? = nil) -> AttributeEditRequest {
            AttributeEditRequest(id, attributes: ["status": .string(status)], expectedVersion: version)
        }
        #expect(try store.edit(request("Open")).didSave == nil)
        #expect(try store.edit(request("Open")).version(of: id) == 1)
        let closed = try store.edit(request("Closed", at: 1))
        #expect(closed.version(of: id) == 2 && closed.didSave?.updated.first?.changedKeys == ["status"])
        let token = try store.currentHistoryToken()
        // Version 1 is gone: refused with both versions, and nothing written.
        let stale = #expect(throws: GraphError.self) { try store.edit(request("Reopened", at: 1)) }
        #expect(stale?.code == .mergeConflict && stale?.conflicts.first?.persistedVersion == 2)
        #expect(stale?.message.contains("is at version 2, not 1") == true, "\(String(describing: stale))")
        #expect(try store.currentHistoryToken() == token)
        // Unchanged at the version expected: answered with it; at another, refused all the same.
        #expect(try store.edit(request("Closed", at: 2)).version(of: id) == 2)
        #expect(throws: GraphError.self) { try store.edit(request("Closed", at: 3)) }
        // A row that is gone is named as such.
        var deletion = SaveChanges()
        deletion.deleted = [.init(objectID: id, expectedVersion: 2)]
        _ = try coordinator.save(deletion)
        let gone = #expect(throws: GraphError.self) { try store.edit(request("Open")) }
        #expect(gone?.code == .objectNotFound && gone?.message.contains("deleted, or never saved") == true)

        // PostgreSQL: the row kept from this store's last save may be older than the store's; the
        // version expected is checked against the store's row, either way.
        guard kind == .postgres, let postgres = store as? PostgresStore else { return }
        let other = PostgresStore(configuration: postgres.configuration)
        _ = try StoreCoordinator(model: BugModel.model, store: other)
        let second = try await context.perform { context in
            let bug = context.insert(BugSquasherModel.Bug.self)
            (bug.key, bug.title, bug.status) = ("C-2", "t", "Open")
            try context.saveToStore()
            return bug.objectID
        }
        _ = try store.edit(AttributeEditRequest(second, attributes: ["status": "A"]))  // kept at 2
        _ = try other.edit(AttributeEditRequest(second, attributes: ["status": "B"]))  // the store's at 3
        #expect(
            try store.edit(AttributeEditRequest(second, attributes: ["status": "C"], expectedVersion: 3)).version(
                of: second) == 4)
        _ = try other.edit(AttributeEditRequest(second, attributes: ["status": "A"]))  // 5, as kept
        let behind = #expect(throws: GraphError.self) {
            try store.edit(AttributeEditRequest(second, attributes: ["status": "A"], expectedVersion: 4))
        }
        #expect(behind?.conflicts.first?.persistedVersion == 5, "\(String(describing: behind))")
        // Unchanged against the store's row, which another process made: its version.
        #expect(try store.edit(AttributeEditRequest(second, attributes: ["status": "A"])).version(of: second) == 5)
    }

    /// Version bumped, only changed keys named, a history row and the commit observers; nothing written
    /// when nothing changes; a context holding the object sees it as a change made elsewhere.
    @Test("an edit reads, changes and writes one row, as a save", arguments: editingKinds)
    func edits(kind: StoreKind) async throws {
        let directory = try TemporaryDirectory(prefix: "bs-edit")
        defer { directory.remove() }
        let store = try Self.editingStore(kind, in: directory)
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        let observed = Mutex<[DidSave]>([])
        store.observeCommits { didSave in observed.withLock { $0.append(didSave) } }

        let context = ObjectContext(coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump, name: "test")
        await context.perform { context in
            let project = context.insert(Project.self)
            project.key = "E"
            for key in ["E-1", "E-2"] {
                let bug = context.insert(BugSquasherModel.Bug.self)
                bug.key = key
                bug.title = "before"
                bug.status = "Open"
                bug.project = project
            }
        }
        try await context.save()
        let ids = try await context.perform { context in
            try context.fetch(FetchRequest<BugSquasherModel.Bug>(sort: [Key("key").ascending])).map(\.objectID)
        }
        let (id, otherID) = (ids[0], ids[1])
        let saves = observed.withLock { $0.count }

        let edited = try store.edit(id, attributes: ["status": "Closed", "title": "before"])
        let didSave = try #require(edited)
        #expect(didSave.updated.map(\.objectID) == [id])
        #expect(didSave.updated.first?.version == 2)
        #expect(didSave.updated.first?.changedKeys == ["status"])
        #expect(didSave.updated.first?.values?.attributes.contains(Value.string("Closed")) == true)
        #expect(try store.newValues(for: [id])[id]?.version == 2)
        #expect(try store.currentHistoryToken() == didSave.token)
        #expect(observed.withLock { $0.count } == saves + 1 && observed.withLock { $0.last?.token } == didSave.token)

        // Nothing changes: nothing is written.
        #expect(try store.edit(id, attributes: ["status": "Closed"]) == nil)
        #expect(try store.currentHistoryToken() == didSave.token)

        // Refused, naming why: a missing object, a nil in a required attribute, another type,
        // an unknown attribute, a unique key another object has.
        let missing = ObjectID(store: id.storeIdentifier, entity: "Bug", primaryKey: 999)
        #expect(throws: GraphError.self) { try store.edit(missing, attributes: ["status": "x"]) }
        for (attributes, code) in [
            (["status": Value.null], GraphError.Code.validation), (["status": .int64(3)], .validation),
            (["colour": "red"], .invalidArgument), (["key": "E-2"], .constraintViolation),
        ] {
            let error = #expect(throws: GraphError.self) { try store.edit(id, attributes: attributes) }
            #expect(error?.code == code, "\(attributes): \(String(describing: error))")
        }
        #expect(try store.newValues(for: [otherID])[otherID]?.version == 1)

        // The context that holds the bug saved at version 1: its next save of it meets version
        // 2, and its merge policy keeps the edit's status beside its own title.
        try await context.perform { context in
            let bug = try context.existingObject(with: id)
            bug["title"] = "after"
        }
        try await context.save()
        let row = try #require(try store.newValues(for: [id])[id])
        let entity = BugModel.model.entity(named: "Bug")!
        #expect(row.attributes[entity.attributeIndex["status"]!] == "Closed")
        #expect(row.attributes[entity.attributeIndex["title"]!] == "after")
        #expect(row.version == 3)

        // Another process's edit of the same bug, then this one's: PostgreSQL's edit starts from
        // the row its last save left (version 3, kept by the store), fails the version check
        // (the other made version 4), and starts again from the row as it is, so neither edit
        // undoes the other.
        if kind == .postgres {
            let other = PostgresStore(configuration: try #require(store as? PostgresStore).configuration)
            _ = try StoreCoordinator(model: BugModel.model, store: other)
            let concurrent = try #require(try other.edit(id, attributes: ["title": "elsewhere"]))
            #expect(concurrent.updated.first?.version == 4)
            let again = try #require(try store.edit(id, attributes: ["status": "Reopened"]))
            #expect(again.updated.first?.version == 5)
            #expect(again.updated.first?.changedKeys == ["status"])
            let edited = try #require(try store.newValues(for: [id])[id])
            #expect(edited.attributes[entity.attributeIndex["title"]!] == "elsewhere")
            #expect(edited.attributes[entity.attributeIndex["status"]!] == "Reopened")
            // The other sets the status this store's kept row still holds; an edit back to it
            // is a change against the store's row, not against the kept one.
            _ = try #require(try other.edit(id, attributes: ["status": "Closed"]))
            let back = try #require(try store.edit(id, attributes: ["status": "Reopened"]))
            #expect(back.updated.first?.version == 7)
            #expect(try store.newValues(for: [id])[id]?.attributes[entity.attributeIndex["status"]!] == "Reopened")
            let final = try #require(try store.newValues(for: [otherID])[otherID])

            // Both at once, one attribute each: an edit whose row changed after it read it reads
            // again (the other's edit is kept), and none fails.
            let rounds = 30
            async let mine: Void = Task.detached {
                for n in 0..<rounds { _ = try store.edit(otherID, attributes: ["status": .string("S\(n)")]) }
            }.value
            async let theirs: Void = Task.detached {
                for n in 0..<rounds { _ = try other.edit(otherID, attributes: ["title": .string("T\(n)")]) }
            }.value
            _ = try await (mine, theirs)
            let raced = try #require(try store.newValues(for: [otherID])[otherID])
            #expect(raced.version == final.version + Int64(2 * rounds))
            #expect(raced.attributes[entity.attributeIndex["status"]!] == .string("S\(rounds - 1)"))
            #expect(raced.attributes[entity.attributeIndex["title"]!] == .string("T\(rounds - 1)"))
        }
    }
}

extension StoreEditTests {
    /// squasherd hands PostgreSQL the edits that queued up while one committed: those of rows
    /// it kept commit as one save, the others alone, and a batch that cannot commit whole
    /// commits nothing before each edit goes alone and says what it says alone.
    @Test("a batch of edits commits as one save; a stale or clashing one goes alone")
    func batches() async throws {
        guard TestPostgres.isAvailable() else { return }
        let directory = try TemporaryDirectory(prefix: "bs-batch")
        defer { directory.remove() }
        let store = try #require(try Self.editingStore(.postgres, in: directory) as? PostgresStore)
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        let observed = Mutex<[DidSave]>([])
        store.observeCommits { didSave in observed.withLock { $0.append(didSave) } }
        let context = ObjectContext(coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump, name: "test")
        await context.perform { context in
            for key in ["B-1", "B-2", "B-3", "B-4"] {
                let bug = context.insert(BugSquasherModel.Bug.self)
                (bug.key, bug.title, bug.status) = (key, "t", "Open")
            }
        }
        try await context.save()
        let ids = try await context.perform { context in
            try context.fetch(FetchRequest<BugSquasherModel.Bug>(sort: [Key("key").ascending])).map(\.objectID)
        }
        let entity = BugModel.model.entity(named: "Bug")!
        func status(_ id: ObjectID) throws -> Value? {
            try store.newValues(for: [id])[id]?.attributes[entity.attributeIndex["status"]!]
        }
        func batch(_ edits: [(Int, [String: Value])]) throws -> [DidSave?] {
            try store.edit(batch: edits.map { AttributeEditRequest(ids[$0.0], attributes: $0.1) }).map {
                try $0.get().didSave
            }
        }

        // Rows the store has not kept: each edit reads its own and commits alone.
        let alone = try batch([(0, ["status": "A"]), (1, ["status": "A"]), (2, ["status": "A"]), (3, ["status": "A"])])
        #expect(Set(alone.map { $0?.token }).count == 4)

        // Kept now: one save, one token, every edit in it with its new version (whichever
        // attributes each sets); an edit that changes nothing is no part of it.
        let before = try store.currentHistoryToken().rawValue
        let together = try batch([
            (0, ["status": "B"]), (1, ["status": "B"]), (2, ["status": "A"]), (3, ["status": "B", "title": "u"]),
        ])
        let save = try #require(together[0])
        #expect(together[1]?.token == save.token && together[3]?.token == save.token)
        #expect(together[2] == nil)
        #expect(save.token.rawValue == before + 1)
        #expect(Set(save.updated.map(\.objectID)) == [ids[0], ids[1], ids[3]])
        #expect(save.updated.first { $0.objectID == ids[0] }?.version == 3)
        #expect(observed.withLock { $0.last?.token } == save.token)
        #expect(try [0, 1, 3].map { try status(ids[$0]) } == ["B", "B", "B"])
        let title = entity.attributeIndex["title"]!
        #expect(try store.newValues(for: [ids[3]])[ids[3]]?.attributes[title] == "u")
        #expect(try store.newValues(for: [ids[1]])[ids[1]]?.attributes[title] == "t")

        // Another process edits B-1. Whether this store has heard of it by the batch (its kept
        // row is then the new one, and the batch commits whole) or not (the batch commits
        // nothing, and each edit goes alone; PostgresStoreTests makes that case certain), neither
        // edit undoes the other.
        let other = PostgresStore(configuration: store.configuration)
        _ = try StoreCoordinator(model: BugModel.model, store: other)
        _ = try #require(try other.edit(ids[0], attributes: ["title": "elsewhere"]))
        let stale = try batch([(0, ["status": "C"]), (1, ["status": "C"])])
        #expect(stale[0] != nil && stale[1] != nil)
        let row = try #require(try store.newValues(for: [ids[0]])[ids[0]])
        #expect(row.attributes[entity.attributeIndex["title"]!] == "elsewhere" && row.version == 5)
        #expect(try status(ids[0]) == "C")

        // A key another bug has: the batch commits nothing, and the clashing edit alone is refused
        // as it would be by itself, while the other commits.
        let results = store.edit(batch: [
            AttributeEditRequest(ids[1], attributes: ["key": "B-4"]),
            AttributeEditRequest(ids[2], attributes: ["status": "D"]),
        ])
        #expect(throws: GraphError.self) { try results[0].get() }
        #expect(try results[1].get().didSave != nil)
        #expect(try status(ids[2]) == "D")

        // Every save's token once, in order, with none lost to a batch that rolled back.
        let tokens = observed.withLock { $0.map(\.token.rawValue) }
        #expect(tokens == Array(1...(try store.currentHistoryToken().rawValue)), "\(tokens)")
    }
}

@Suite("SQLite store: requests past SQLite's limits")
struct StoreLimitTests {
    /// With what to do, not as a store failure.
    @Test("a fetch with more values than SQLite binds is refused as the request's fault")
    func tooManyValues() throws {
        let fixture = try StoreFixture(.sqlite)
        let values = (0..<1_000_000).map { Value.string("K-\($0)") }
        let error = #expect(throws: GraphError.self) {
            _ = try fixture.coordinator.fetch(
                FetchDescription(entityName: "Bug", predicate: .isIn(keyPath: "key", values), resultType: .objectIDs))
        }
        #expect(error?.code == .invalidArgument, "\(String(describing: error))")
        #expect(
            error?.message.contains("Split it into requests of at most 10,000 values") == true,
            "\(String(describing: error))")
        #expect(error?.message.contains(fixture.directory.path) == false)
    }
}

@Suite("SQLite store: bulk saves give way to interactive ones")
struct EditsFirstStoreTests {
    /// The window follows an interactive save; an edit that changes nothing holds none back.
    @Test("with an EditsFirst, a bulk save in an edit window commits after the window")
    func bulkSavesGiveWayToInteractiveOnes() async throws {
        let directory = try TemporaryDirectory(prefix: "bs-edits-first")
        defer { directory.remove() }
        let window = Duration.milliseconds(200)
        let store = try SQLiteStore(url: directory.file("store.sqlite"), editsFirst: EditsFirst(window: window))
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        let commits = Mutex<[ContinuousClock.Instant]>([])
        func insertBug(_ key: String, bulk: Bool) async throws {
            let context = ObjectContext(
                coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump, savesAreBulk: bulk)
            await context.perform { context in
                let project = context.insert(Project.self)
                project.key = key
                let bug = context.insert(BugSquasherModel.Bug.self)
                bug.key = "\(key)-1"
                bug.project = project
            }
            try await context.save()
        }
        store.observeCommits { _ in commits.withLock { $0.append(ContinuousClock.now) } }
        try await insertBug("I", bulk: false)
        try await insertBug("B", bulk: true)
        let times = commits.withLock { $0 }
        try #require(times.count == 2)
        // The bulk save came right after the interactive one and waited for the window.
        #expect(
            times[1] - times[0] >= window * 0.9,
            "the bulk save committed \(times[1] - times[0]) after the interactive one")

        // An edit that changes nothing commits nothing, and holds no bulk save back. (With a
        // long window, so that a slow machine cannot make a bulk save look held.)
        let patient = try SQLiteStore(
            url: directory.file("patient.sqlite"), editsFirst: EditsFirst(window: .seconds(5)))
        let patientCoordinator = try StoreCoordinator(model: BugModel.model, store: patient)
        let seeded = ObjectContext(
            coordinator: patientCoordinator, mergePolicy: .mergeByPropertyObjectTrump, savesAreBulk: true)
        await seeded.perform { context in
            let project = context.insert(Project.self)
            project.key = "N"
            let bug = context.insert(BugSquasherModel.Bug.self)
            bug.key = "N-1"
            bug.status = "Open"
            bug.project = project
        }
        try await seeded.save()
        let bugID = try #require(
            try await seeded.perform { context in
                try context.fetch(FetchRequest<BugSquasherModel.Bug>()).first?.objectID
            })
        #expect(try patient.edit(bugID, attributes: ["status": "Open"]) == nil)
        let start = ContinuousClock.now
        let bulk = ObjectContext(
            coordinator: patientCoordinator, mergePolicy: .mergeByPropertyObjectTrump, savesAreBulk: true)
        await bulk.perform { context in
            let project = context.insert(Project.self)
            project.key = "M"
        }
        try await bulk.save()
        #expect(ContinuousClock.now - start < .seconds(4), "a bulk save waited for an edit that changed nothing")
    }

    /// It opens when an interactive save gets the writer, and again at its commit, before the observers
    /// (which send the did-save to the subscribers) see it.
    @Test("the edit window opens before the did-save reaches the store's observers")
    func windowOpensBeforeTheDidSaveGoesOut() async throws {
        let directory = try TemporaryDirectory(prefix: "bs-edits-first")
        defer { directory.remove() }
        let window = Duration.seconds(5)
        let editsFirst = EditsFirst(window: window)
        let store = try SQLiteStore(url: directory.file("store.sqlite"), editsFirst: editsFirst)
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        func insertProject(_ key: String) async throws {
            let context = ObjectContext(coordinator: coordinator, mergePolicy: .error)
            await context.perform { context in context.insert(Project.self).key = key }
            try await context.save()
        }
        // Published before the window opened, the did-save reached the subscribers while the
        // import ran on: the window was still closed when the observers ran.
        let remainingAtPublish = Mutex<[UInt64]>([])
        store.observeCommits { _ in remainingAtPublish.withLock { $0.append(editsFirst.windowRemaining()) } }
        try await insertProject("P")
        let remaining = try #require(remainingAtPublish.withLock { $0 }.first)
        #expect(remaining > 0, "the window was closed when the did-save went out")

        // A save that gets the writer and then rolls back (a second project "Q") still opened
        // it: an import step under way meanwhile has time to reach its yield point.
        let fresh = EditsFirst(window: window)
        let other = try SQLiteStore(url: directory.file("other.sqlite"), editsFirst: fresh)
        let otherCoordinator = try StoreCoordinator(model: BugModel.model, store: other)
        let seed = ObjectContext(coordinator: otherCoordinator, mergePolicy: .error, savesAreBulk: true)
        await seed.perform { context in context.insert(Project.self).key = "Q" }
        try await seed.save()
        #expect(fresh.windowRemaining() == 0, "a bulk save opened the window")
        let clash = ObjectContext(coordinator: otherCoordinator, mergePolicy: .error)
        await clash.perform { context in context.insert(Project.self).key = "Q" }
        await #expect(throws: GraphError.self) { try await clash.save() }
        #expect(fresh.windowRemaining() > 0, "the window did not open when the save got the writer")
    }
}
