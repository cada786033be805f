import BugSquasherGraph
import BugSquasherPostgres
import BugSquasherTesting
import Foundation
import Synchronization
import Testing

/// A model's change on a store that several processes share: the first process on a model with
/// added attributes migrates the store, the others on the old model go on, and one started on
/// the old model later is refused, as a fleet upgraded host by host meets it. (An incompatible
/// model is refused on every store alike: `SQLiteMetadataTests`.)
@Suite("PostgreSQL store metadata", .dropsPostgresSchemas)
struct PostgresMetadataTests {
    /// Notes with a unique key and a title, and `extra` attributes.
    func model(extra: [AttributeDescription] = []) throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Note", uniqueKey: "key",
                attributes: [.attribute("key", .string), .attribute("title", .string)] + extra)
        ])
    }

    /// The model of the next version: an optional attribute and one with a default.
    func newerModel() throws -> ManagedObjectModel {
        try model(extra: [.attribute("tag", .string, optional: true), .attribute("rank", .int64, default: 5)])
    }

    /// A store of the schema in `url`, as another process would open it.
    func store(_ url: String) throws -> PostgresStore {
        PostgresStore(configuration: try PostgresStoreConfiguration(url: url))
    }

    /// Inserts note `key` titled `title` through `coordinator` and saves.
    func insert(_ key: String, _ title: String, through coordinator: StoreCoordinator) async throws {
        try await ObjectContext(coordinator: coordinator).perform { context in
            let note = try context.insert(entityNamed: "Note")
            (note["key"], note["title"]) = (.string(key), .string(title))
            try context.saveToStore()
        }
    }

    /// Note `key` as a new context of `coordinator` reads it from the store.
    func note(_ key: String, through coordinator: StoreCoordinator) async throws -> [String: Value] {
        let names = try #require(coordinator.model.entity(named: "Note")).attributes.map(\.name)
        return try await ObjectContext(coordinator: coordinator).perform { context in
            let note = try #require(
                try context.fetch(
                    FetchRequest<ManagedObject>(entityName: "Note", predicate: Key("key") == .string(key))
                )
                .first)
            return Dictionary(uniqueKeysWithValues: names.map { ($0, note[$0]) })
        }
    }

    @Test("a process on a model with added attributes migrates the store; one on the old model goes on")
    func migrationWhileTheOldModelRuns() async throws {
        guard let url = TestPostgres.url(schemaPrefix: "meta") else { return }
        let oldStore = try store(url)
        let old = try StoreCoordinator(model: try model(), store: oldStore)
        let heard = Mutex<[Int64]>([])
        oldStore.observeCommits { didSave in heard.withLock { $0.append(didSave.token.rawValue) } }
        try await insert("n1", "first", through: old)

        let newer = try newerModel()
        let new = try StoreCoordinator(model: newer, store: try store(url))
        #expect(new.metadata.modelVersionHash == newer.versionHash && new.storeIdentifier == old.storeIdentifier)
        // The rows written before have the new attributes' defaults.
        let migrated = try await note("n1", through: new)
        #expect(migrated["tag"] == .null && migrated["rank"] == .int64(5), "\(migrated)")
        try await ObjectContext(coordinator: new).perform { context in
            let note = try #require(try context.fetch(FetchRequest<ManagedObject>(entityName: "Note")).first)
            (note["title"], note["tag"]) = (.string("edited"), .string("x"))
            try context.saveToStore()
        }

        // The process on the old model hears the new one's save, whose row in the history has
        // attributes it does not know, reads the row it knows, and saves on.
        let deadline = ContinuousClock.now + .seconds(30)
        while !heard.withLock({ $0.contains(2) }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(heard.withLock { $0 } == [1, 2])
        #expect(try await note("n1", through: old)["title"] == .string("edited"))
        try await insert("n2", "from the old model", through: old)
        // Its rows get the new attributes' defaults, and the new process reads them.
        let fromOld = try await note("n2", through: new)
        #expect(
            fromOld["title"] == .string("from the old model") && fromOld["tag"] == .null
                && fromOld["rank"] == .int64(5),
            "\(fromOld)")
        #expect(try await note("n1", through: new)["tag"] == .string("x"))

        // A process started on the old model now is refused: the store is a newer version's.
        let late = #expect(throws: GraphError.self) { try StoreCoordinator(model: try model(), store: try store(url)) }
        #expect(late?.code == .incompatibleModel)
        #expect(
            late?.message.contains("'Note.tag' was removed") == true
                && late?.message.contains("written by a newer version") == true, "\(String(describing: late))")
        // Another process on the new model opens it as it is.
        let again = try StoreCoordinator(model: newer, store: try store(url))
        #expect(again.metadata.modelVersionHash == newer.versionHash)
    }
}
