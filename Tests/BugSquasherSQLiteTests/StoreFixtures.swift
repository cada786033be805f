import BugSquasherGraph
import BugSquasherModel
import BugSquasherPostgres
import BugSquasherSQLite
import BugSquasherTesting
import Foundation
import Synchronization

/// The stores every store test runs against: PostgreSQL too when `BUGSQUASHER_POSTGRES_URL`
/// names a server (scripts/test.sh starts one), and otherwise the suite says it left it out.
enum StoreKind: String, CaseIterable, Sendable {
    case sqlite, inMemory, postgres

    static let allCases: [StoreKind] = {
        guard TestPostgres.server != nil else {
            print("note: BUGSQUASHER_POSTGRES_URL is not set: the store tests leave PostgresStore out")
            return [.sqlite, .inMemory]
        }
        return [.sqlite, .inMemory, .postgres]
    }()
}

/// A fresh directory under the system's temporary directory; ``remove()`` it when done (a
/// `defer` right after creating it: a deinit could run as soon as its last use).
struct TemporaryDirectory: Sendable {
    let url: URL

    init(prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The path of `name` in the directory.
    func file(_ name: String) -> URL { url.appendingPathComponent(name) }

    /// Removes the directory and everything in it.
    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// A fresh store of one kind, wrapped in a ``CountingStore``, with a temporary directory that
/// goes away with the fixture.
final class StoreFixture: Sendable {
    let kind: StoreKind
    let directory: URL
    let counting: CountingStore
    let coordinator: StoreCoordinator

    init(_ kind: StoreKind, model: ManagedObjectModel = BugModel.model) throws {
        self.kind = kind
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let base: any IncrementalStore =
            switch kind {
            case .sqlite: try SQLiteStore(url: directory.appendingPathComponent("store.sqlite"))
            case .inMemory: InMemoryStore()
            case .postgres:
                PostgresStore(
                    configuration: try PostgresStoreConfiguration(
                        url: TestPostgres.url(schemaPrefix: "test")!))
            }
        counting = CountingStore(base)
        coordinator = try StoreCoordinator(model: model, store: counting)
    }

    /// Another coordinator on the same store (as a second process or the stack's other side).
    func secondCoordinator() throws -> StoreCoordinator {
        try StoreCoordinator(model: coordinator.model, store: counting)
    }

    func context(_ policy: MergePolicy = .error, name: String = "test") -> ObjectContext {
        ObjectContext(coordinator: coordinator, mergePolicy: policy, name: name)
    }

    deinit { try? FileManager.default.removeItem(at: directory) }
}

/// An incremental store that forwards to another and counts what it is asked: proves that the
/// protocol is enough to wrap a store, and lets tests assert how much I/O an operation did.
final class CountingStore: IncrementalStore {
    struct Counts: Sendable, Equatable {
        var fetches = 0
        var saves = 0
        var valueLoads = 0
        var loadedObjects = 0
        var relationshipLoads = 0
    }

    let base: any IncrementalStore
    private let counts = Mutex(Counts())

    init(_ base: any IncrementalStore) { self.base = base }

    var current: Counts { counts.withLock { $0 } }
    func resetCounts() { counts.withLock { $0 = Counts() } }

    var storeType: String { base.storeType }
    func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata { try base.loadMetadata(for: model) }
    func execute(_ request: any StoreRequest) throws -> StoreResult {
        counts.withLock { if request is SaveChanges { $0.saves += 1 } else { $0.fetches += 1 } }
        return try base.execute(request)
    }
    func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot] {
        counts.withLock {
            $0.valueLoads += 1
            $0.loadedObjects += objectIDs.count
        }
        return try base.newValues(for: objectIDs)
    }
    func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID] {
        counts.withLock { $0.relationshipLoads += 1 }
        return try base.newValue(forRelationship: name, of: objectID)
    }
    func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID] {
        try base.obtainPermanentIDs(for: objectIDs)
    }
    func didRegister(_ objectIDs: [ObjectID]) { base.didRegister(objectIDs) }
    func didUnregister(_ objectIDs: [ObjectID]) { base.didUnregister(objectIDs) }
    func changes(after token: HistoryToken, limit: Int) throws -> [DidSave] {
        try base.changes(after: token, limit: limit)
    }
    func currentHistoryToken() throws -> HistoryToken { try base.currentHistoryToken() }
}

extension ObjectContext {
    /// Inserts bugs `PREFIX-1`…`PREFIX-n` (with a project) and saves; returns their IDs in order.
    func seedBugs(_ count: Int, prefix: String = "TIMOB", status: (Int) -> String = { $0 % 2 == 0 ? "Open" : "Closed" })
        throws -> [ObjectID]
    {
        let project =
            try fetch(FetchRequest<Project>(predicate: Key("key") == .string(prefix))).first
            ?? {
                let project = insert(Project.self)
                project.key = prefix
                project.name = "Project \(prefix)"
                return project
            }()
        let bugs = (1...count).map { index in
            let bug = insert(Bug.self)
            bug.key = "\(prefix)-\(index)"
            bug.title = "Bug number \(index)"
            bug.status = status(index)
            bug.priority = ["Low", "Medium", "High"][index % 3]
            bug.created = Date(timeIntervalSince1970: Double(index) * 86_400)
            bug.project = project
            return bug
        }
        try saveToStore()
        return bugs.map(\.objectID)
    }
}

/// Swift Testing has a `Bug` trait; in tests, `Bug` is the model's class.
typealias Bug = BugSquasherModel.Bug
/// Swift Testing has a `Comment` type; in tests, `Comment` is the model's class.
typealias Comment = BugSquasherModel.Comment
