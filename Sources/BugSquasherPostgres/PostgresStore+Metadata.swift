public import BugSquasherGraph
import Foundation
import PostgresNIO
import Synchronization

// Opening the store: creating its schema and tables, checking its metadata, migrating it.
extension PostgresStore {
    public func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata {
        if let current = loaded.withLock({ $0 }) {
            guard current.model.versionHash == model.versionHash else {
                throw GraphError(
                    .incompatibleModel,
                    "The PostgreSQL store at \(configuration.address) is already open with another model in this process.",
                    advice: "Use one model per store.")
            }
            return current.metadata
        }
        let metadata = try withConnection("open the store") { connection in
            try createIfNew(model, on: connection)
            return try readAndMigrate(model: model, on: connection)
        }
        loaded.withLock { $0 = Loaded(model: model, metadata: metadata) }
        return metadata
    }

    /// The schema, for messages.
    var place: String {
        "schema \(configuration.schema) of \(configuration.database) at \(configuration.address)"
    }

    /// Creates the schema, its tables and metadata when it has none; refuses a schema with tables
    /// that is not a BugSquasher store. Several daemons opening a new store at once create it once:
    /// the first takes the schema's lock, and `CREATE SCHEMA IF NOT EXISTS` alone is no guard
    /// (two at once both find no schema, and the second fails on the catalog's unique key). A
    /// schema that exists is not created again, so a role without `CREATE` on the database opens
    /// a schema made for it (`CREATE SCHEMA … AUTHORIZATION`).
    private func createIfNew(_ model: ManagedObjectModel, on connection: PostgresConnection) throws {
        try transaction(on: connection) {
            _ = try run(
                "SELECT pg_advisory_xact_lock(hashtext($1))", [.string("bugsquasher:" + configuration.schema)],
                on: connection)
            let schemaExists =
                try run(
                    "SELECT 1 FROM pg_namespace WHERE nspname = $1", [.string(configuration.schema)], on: connection
                ).first != nil
            if !schemaExists {
                _ = try run("CREATE SCHEMA \(PostgresSchema.quote(configuration.schema))", [], on: connection)
            }
            let tables =
                try run(
                    "SELECT count(*), count(*) FILTER (WHERE tablename = 'bs_metadata') FROM pg_tables WHERE schemaname = $1",
                    [.string(configuration.schema)], on: connection
                ).first.map { try Self.integers($0) } ?? [0, 0]
            guard tables[1] == 0 else {
                _ = try run(PostgresSchema.membersTable, [], on: connection)
                return
            }
            guard tables[0] == 0 else {
                throw GraphError(
                    .invalidStore,
                    "The \(place) holds tables but is not a BugSquasher store (it has no bs_metadata table).",
                    advice: "Give the store a schema of its own (schema=… in the store's URL).")
            }
            for statement in try PostgresSchema.create(model) { _ = try run(statement, [], on: connection) }
            let metadata = StoreMetadata(
                storeIdentifier: UUID().uuidString, storeType: storeType, modelVersionHash: model.versionHash)
            try write(metadata, schema: model.schema, on: connection)
            logger.info(
                "created store",
                metadata: ["store.schema": "\(configuration.schema)", "store.id": "\(metadata.storeIdentifier)"])
        }
    }

    private func write(_ metadata: StoreMetadata, schema: [EntitySchema], on connection: PostgresConnection) throws {
        let schemaJSON = String(decoding: try JSONEncoder().encode(schema), as: UTF8.self)
        for (key, value) in [
            ("storeIdentifier", metadata.storeIdentifier), ("storeType", metadata.storeType),
            ("modelVersionHash", metadata.modelVersionHash), ("modelSchema", schemaJSON),
        ] {
            _ = try run(
                "INSERT INTO bs_metadata (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                [.string(key), .string(value)], on: connection)
        }
    }

    private func readAndMigrate(model: ManagedObjectModel, on connection: PostgresConnection) throws -> StoreMetadata {
        let rows = try run("SELECT key, value FROM bs_metadata", [], on: connection)
        let values = Dictionary(
            try rows.map { row in
                let cells = row.makeRandomAccess()
                return (try cells[0].decode(String.self), try cells[1].decode(String.self))
            }, uniquingKeysWith: { a, _ in a })
        guard let identifier = values["storeIdentifier"], let type = values["storeType"],
            let hash = values["modelVersionHash"], let schemaJSON = values["modelSchema"]
        else {
            throw GraphError(
                .invalidStore, "The \(place) has damaged metadata (bs_metadata is missing keys).",
                advice: "Restore the database from a backup, or re-import into a new store.")
        }
        guard type == storeType else {
            throw GraphError(.invalidStore, "The \(place) is a '\(type)' store, not a PostgreSQL store.")
        }
        var metadata = StoreMetadata(storeIdentifier: identifier, storeType: type, modelVersionHash: hash)
        guard hash != model.versionHash else { return metadata }
        let stored: [EntitySchema]
        do {
            stored = try JSONDecoder().decode([EntitySchema].self, from: Data(schemaJSON.utf8))
        } catch {
            throw GraphError(
                .invalidStore, "The \(place) has a model description that cannot be read.",
                advice: "Restore the database from a backup.", cause: error)
        }
        let migration = try ModelMigration.plan(from: stored, to: model)
        try transaction(on: connection) {
            // Several daemons may start on the new model at once: the first migrates.
            _ = try run(
                "SELECT pg_advisory_xact_lock(hashtext($1))", [.string("bugsquasher:" + configuration.schema)],
                on: connection)
            let current = try run(
                "SELECT value FROM bs_metadata WHERE key = 'modelVersionHash'", [], on: connection
            ).first?.decode(String.self)
            metadata.modelVersionHash = model.versionHash
            guard current != model.versionHash else { return }
            for statement in PostgresSchema.migrate(migration) { _ = try run(statement, [], on: connection) }
            try write(metadata, schema: model.schema, on: connection)
        }
        logger.info("migrated store", metadata: ["store.schema": "\(configuration.schema)"])
        return metadata
    }
}
