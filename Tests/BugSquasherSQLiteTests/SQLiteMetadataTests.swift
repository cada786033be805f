import BugSquasherGraph
import BugSquasherModel
import BugSquasherPostgres
import BugSquasherSQLite
import BugSquasherTesting
import Foundation
import GRDB
import Testing

/// What only a file-backed store does: metadata, migration, damaged files; and the model check,
/// on PostgreSQL too (its migration with processes on both models: `PostgresMetadataTests`).
@Suite("SQLite store metadata", .dropsPostgresSchemas)
final class SQLiteMetadataTests {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-meta-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    func model(extra: [AttributeDescription] = [], titleType: AttributeType = .string) throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Note", uniqueKey: "key",
                attributes: [
                    .attribute("key", .string), .attribute("title", titleType),
                ] + extra)
        ])
    }

    @Test("a zero-length file is a new store; reopening keeps its identifier and rows")
    func zeroLengthFileIsNew() async throws {
        let url = directory.appendingPathComponent("empty.sqlite")
        _ = FileManager.default.createFile(atPath: url.path, contents: Data())
        let model = try model()
        let first = try StoreCoordinator(model: model, store: SQLiteStore(url: url))
        try await ObjectContext(coordinator: first).perform { context in
            let note = try context.insert(entityNamed: "Note")
            note["key"] = "n1"
            note["title"] = "hello"
            try context.saveToStore()
        }
        let second = try StoreCoordinator(model: model, store: SQLiteStore(url: url))
        #expect(second.storeIdentifier == first.storeIdentifier)
        #expect(UUID(uuidString: second.storeIdentifier) != nil)
        #expect(second.metadata.modelVersionHash == model.versionHash)
        let count = try await ObjectContext(coordinator: second).perform {
            try $0.count(FetchRequest<ManagedObject>(entityName: "Note"))
        }
        #expect(count == 1)
    }

    @Test("adding an optional attribute migrates automatically")
    func optionalAttributeMigrates() async throws {
        let url = directory.appendingPathComponent("migrate.sqlite")
        let old = try StoreCoordinator(model: try model(), store: SQLiteStore(url: url))
        try await ObjectContext(coordinator: old).perform { context in
            let note = try context.insert(entityNamed: "Note")
            note["key"] = "n1"
            try context.saveToStore()
        }
        let newModel = try model(extra: [
            .attribute("tag", .string, optional: true), .attribute("rank", .int64, default: 5),
        ])
        #expect(newModel.versionHash != old.model.versionHash)
        let migrated = try StoreCoordinator(model: newModel, store: SQLiteStore(url: url))
        #expect(migrated.metadata.modelVersionHash == newModel.versionHash)
        try await ObjectContext(coordinator: migrated).perform { context in
            let note = try context.fetch(FetchRequest<ManagedObject>(entityName: "Note"))[0]
            #expect(note["tag"] == .null)
            #expect(note["rank"] == .int64(5))
            note["tag"] = "x"
            try context.saveToStore()
        }
    }

    /// A new place for a store of `kind` (a file, or a schema of the test server), and how to
    /// open the store there, as one more process would.
    func newPlace(_ kind: StoreKind) throws -> () throws -> any IncrementalStore {
        switch kind {
        case .sqlite:
            let url = directory.appendingPathComponent("\(UUID().uuidString).sqlite")
            return { try SQLiteStore(url: url) }
        case .postgres:
            let url = try #require(TestPostgres.url(schemaPrefix: "meta"))
            return { PostgresStore(configuration: try PostgresStoreConfiguration(url: url)) }
        case .inMemory:
            throw HarnessError("an in-memory store has no place to open again")
        }
    }

    @Test(
        "an incompatible model is refused with a message that says what changed; the store stays as it was",
        arguments: StoreKind.allCases.filter { $0 != .inMemory })
    func incompatibleModel(_ kind: StoreKind) async throws {
        let open = try newPlace(kind)
        let first = try StoreCoordinator(model: try model(), store: try open())
        try await ObjectContext(coordinator: first).perform { context in
            let note = try context.insert(entityNamed: "Note")
            (note["key"], note["title"]) = ("n1", "kept")
            try context.saveToStore()
        }
        let error = #expect(throws: GraphError.self) {
            try StoreCoordinator(model: try model(titleType: .int64), store: try open())
        }
        #expect(error?.code == .incompatibleModel)
        #expect(error?.message.contains("Note.title") == true)
        let required = #expect(throws: GraphError.self) {
            var required = AttributeDescription(name: "must", type: .string)
            required.defaultValue = .null
            return try StoreCoordinator(model: try model(extra: [required]), store: try open())
        }
        #expect(required?.code == .incompatibleModel)
        #expect(
            required?.message.contains("required attribute 'Note.must' was added without a default") == true
                && required?.message.contains("newer version") == false, "\(String(describing: required))")
        // Refused, the store opens as it was.
        let reopened = try StoreCoordinator(model: try model(), store: try open())
        #expect(reopened.metadata.modelVersionHash == first.metadata.modelVersionHash)
        let title = try await ObjectContext(coordinator: reopened).perform { context in
            try context.fetch(FetchRequest<ManagedObject>(entityName: "Note")).first?["title"]
        }
        #expect(title == "kept")
        // A store with an attribute this model lacks: a newer version's store, said so.
        let newer = try newPlace(kind)
        _ = try StoreCoordinator(
            model: try model(extra: [AttributeDescription(name: "severity", type: .string)]), store: try newer())
        let older = #expect(throws: GraphError.self) { try StoreCoordinator(model: try model(), store: try newer()) }
        #expect(
            older?.message.contains("'Note.severity' was removed") == true
                && older?.message.contains("written by a newer version") == true, "\(String(describing: older))")
    }

    /// Set with chattr; the message names the command that clears it, not this user's permissions.
    @Test("a store file marked immutable or append-only is refused, naming the mark")
    func markedStoreNamed() throws {
        let url = directory.appendingPathComponent("marked.sqlite")
        do { _ = try StoreCoordinator(model: try model(), store: SQLiteStore(url: url)) }
        func chattr(_ arguments: [String]) throws -> Int32 {
            let process = Process()
            process.executableURL = URL(filePath: "/usr/bin/chattr")
            process.arguments = arguments
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }
        for (flag, named) in [("+i", "immutable (chattr +i)"), ("+a", "append-only (chattr +a)")] {
            guard try chattr([flag, url.path]) == 0 else {
                print("skipped: this file system takes no chattr marks")
                return
            }
            defer { _ = try? chattr(["-i", "-a", url.path]) }
            #expect(
                SQLiteStore.markedFile(of: [directory.path, url.path])?.problem.contains(
                    "\(url.path) is marked \(named)")
                    == true)
            let error = #expect(throws: GraphError.self) {
                _ = try StoreCoordinator(model: try model(), store: SQLiteStore(url: url))
            }
            #expect(
                error?.message.contains("is marked \(named)") == true
                    && error?.message.contains("chattr -\(flag.dropFirst()) \(url.path)") == true,
                "\(String(describing: error))")
        }
        #expect(SQLiteStore.markedFile(of: [directory.path, url.path]) == nil)
    }

    @Test("a file that is not a store is refused, and nothing is written to it")
    func notAStore() throws {
        let garbage = directory.appendingPathComponent("garbage.sqlite")
        try Data(repeating: 0x41, count: 4096).write(to: garbage)
        let error = #expect(throws: GraphError.self) {
            try StoreCoordinator(model: try model(), store: SQLiteStore(url: garbage))
        }
        #expect(error?.code == .invalidStore)
        #expect(try Data(contentsOf: garbage) == Data(repeating: 0x41, count: 4096))
    }

    /// A dropped column or table, or duplicates behind a dropped unique index.
    @Test(
        "a store whose tables were changed outside BugSquasher is refused, saying how",
        arguments: [
            ("ALTER TABLE Note DROP COLUMN title", "column Note.title"),
            ("DROP TABLE bs_history", "table bs_history"),
            ("DELETE FROM bs_history", "has lost the newest saves of its history: tokens 1 to 1"),
            (
                "DROP INDEX Note_key_unique; INSERT INTO Note (_version, key) VALUES (1, 'n1')",
                "Note_key_unique is missing and cannot be rebuilt: Note holds duplicates"
            ),
        ])
    func tablesChangedByHand(change: String, missing: String) async throws {
        let model = try model()
        let url = try await storeWithNote(model: model)
        // Reopened unchanged, it is accepted.
        _ = try StoreCoordinator(model: model, store: SQLiteStore(url: url))
        try await changeByHand(url, change)
        let error = #expect(throws: GraphError.self) {
            try StoreCoordinator(model: model, store: SQLiteStore(url: url))
        }
        #expect(error?.code == .invalidStore)
        #expect(error?.message.contains(missing) == true, "\(String(describing: error))")
    }

    @Test("indexes dropped outside BugSquasher are re-created at open, and enforce again")
    func droppedIndexesRecreated() async throws {
        let model = try model()
        let url = try await storeWithNote(model: model)
        try await changeByHand(url, "DROP INDEX Note_key_unique")
        let coordinator = try StoreCoordinator(model: model, store: SQLiteStore(url: url))
        // The unique key holds again: a second n1 is refused.
        await #expect(throws: GraphError.self) { try await insertNote("n1", coordinator: coordinator) }
    }

    /// A new store file holding one note, `n1`.
    private func storeWithNote(model: ManagedObjectModel) async throws -> URL {
        let url = directory.appendingPathComponent("changed-\(UUID().uuidString).sqlite")
        try await insertNote("n1", coordinator: StoreCoordinator(model: model, store: SQLiteStore(url: url)))
        return url
    }

    private func insertNote(_ key: String, coordinator: StoreCoordinator) async throws {
        try await ObjectContext(coordinator: coordinator).perform { context in
            let note = try context.insert(entityNamed: "Note")
            note["key"] = .string(key)
            try context.saveToStore()
        }
    }

    /// Runs `sql` on the store file, as someone would with the sqlite3 shell.
    private func changeByHand(_ url: URL, _ sql: String) async throws {
        let queue = try DatabaseQueue(path: url.path)
        try await queue.write { db in try db.execute(sql: sql) }
        try queue.close()
    }

    @Test("the store passes SQLite's integrity check after saves")
    func integrity() async throws {
        let store = try SQLiteStore(url: directory.appendingPathComponent("ok.sqlite"))
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        _ = try await ObjectContext(coordinator: coordinator).perform { try $0.seedBugs(50) }
        #expect(try store.integrityCheck() == ["ok"])
        try store.checkpoint()
    }
}
