public import BugSquasherGraph
import Foundation
import GRDB
import Logging
import Synchronization

// Opening the store: creating its tables, checking them, and migrating them to the model.
extension SQLiteStore {
    public func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata {
        if let current = loaded.withLock({ $0 }) {
            guard current.model.versionHash == model.versionHash else {
                throw GraphError(
                    .incompatibleModel,
                    "\(url.path) is already open with another model in this process.",
                    advice: "Use one model per store.")
            }
            return current.metadata
        }
        let metadata: StoreMetadata = try wrap("open the store") {
            try pool.barrierWriteWithoutTransaction { db in
                try createIfNew(model, in: db)
                if isNewFile {
                    // The new tables are committed (to the write-ahead log, which SQLite applies
                    // on every open): from here on, a store file without tables is one whose log
                    // was lost, and is refused.
                    try? FileManager.default.removeItem(atPath: Self.creationMarkerPath(for: file))
                }
                let metadata = try readAndMigrate(model: model, db: db)
                try checkTables(of: model, in: db)
                try checkHistory(in: db)
                return metadata
            }
        }
        loaded.withLock { $0 = Loaded(model: model, metadata: metadata) }
        return metadata
    }

    /// Creates the tables and metadata of a new store; refuses a file with tables that is not a
    /// BugSquasher store, and one with no tables that is not new (its log is lost).
    private func createIfNew(_ model: ManagedObjectModel, in db: Database) throws {
        try db.inTransaction(.immediate) {
            guard try db.tableExists("bs_metadata") else {
                guard try isEmpty(db) else {
                    throw GraphError(
                        .invalidStore,
                        "\(url.path) is an SQLite database but not a BugSquasher store (it has no bs_metadata table).",
                        advice: "Point the store at a new or empty file."
                    )
                }
                // A store's tables can live in its write-ahead log alone until the first
                // checkpoint: a store file copied without its -wal, or whose -wal was lost,
                // has a header and no tables. Created anew, it would be served as an empty
                // store in place of the one that was there.
                guard isNewFile else {
                    throw GraphError(
                        .invalidStore,
                        "\(url.path) is an SQLite file with no tables, so it is not a new store: its tables were in a write-ahead log (\(url.path)-wal) that is missing or was not applied, for example a store file copied without its -wal.",
                        advice:
                            "Restore the store together with its -wal from a backup; or, if the store was created moments ago and squasherd stopped before its first save, delete the file to start over."
                    )
                }
                try SQLSchema.create(model, in: db)
                let metadata = StoreMetadata(
                    storeIdentifier: UUID().uuidString, storeType: storeType,
                    modelVersionHash: model.versionHash)
                try write(metadata, schema: model.schema, in: db)
                logger.info(
                    "created store",
                    metadata: ["store.path": "\(url.path)", "store.id": "\(metadata.storeIdentifier)"])
                return .commit
            }
            return .commit
        }
    }

    /// Refuses a store that lacks tables its model needs, after re-creating any indexes it lacks.
    private func checkTables(of model: ManagedObjectModel, in db: Database) throws {
        let expected = try SQLSchema.expected(model)
        let rebuilt = try SQLSchema.recreateMissingIndexes(expected, in: db)
        if !rebuilt.isEmpty {
            logger.notice(
                "re-created indexes the store lacked",
                metadata: ["store.path": "\(url.path)", "store.indexes": "\(rebuilt.joined(separator: ", "))"])
        }
        let missing = try SQLSchema.missing(expected, in: db)
        guard missing.isEmpty else {
            throw GraphError(
                .invalidStore,
                "\(url.path) does not have the tables its model needs (missing: \(missing.prefix(5).joined(separator: ", "))\(missing.count > 5 ? ", …" : "")); it was changed outside BugSquasher.",
                advice: "Restore it from a backup, or move it away to start with an empty store and re-import."
            )
        }
    }

    /// Refuses a store whose newest history rows were deleted.
    private func checkHistory(in db: Database) throws {
        // Tokens are never reused: a history whose newest saves were deleted by hand would
        // hand their tokens' successors to new saves, and a subscriber resuming after one
        // of the deleted tokens would skip saves without a word.
        let issued =
            try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'bs_history'") ?? 0
        let newest = try Int64.fetchOne(db, sql: "SELECT max(token) FROM bs_history") ?? 0
        guard issued <= newest else {
            throw GraphError(
                .invalidStore,
                "\(url.path) has lost the newest saves of its history: tokens \(newest + 1) to \(issued) were issued but their rows are gone (deleted outside BugSquasher), so subscribers that saw them would skip saves.",
                advice: "Restore the store from a backup."
            )
        }
    }

    private func isEmpty(_ db: Database) throws -> Bool {
        try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'") == 0
    }

    private func write(_ metadata: StoreMetadata, schema: [EntitySchema], in db: Database) throws {
        let schemaJSON = String(decoding: try JSONEncoder().encode(schema), as: UTF8.self)
        for (key, value) in [
            ("storeIdentifier", metadata.storeIdentifier), ("storeType", metadata.storeType),
            ("modelVersionHash", metadata.modelVersionHash), ("modelSchema", schemaJSON),
        ] {
            try db.execute(
                sql: "INSERT OR REPLACE INTO bs_metadata(key, value) VALUES (?, ?)", arguments: [key, value])
        }
    }

    private func readAndMigrate(model: ManagedObjectModel, db: Database) throws -> StoreMetadata {
        let rows = try Row.fetchAll(db, sql: "SELECT key, value FROM bs_metadata")
        let values = Dictionary(
            rows.map { ($0["key"] as String, $0["value"] as String) }, uniquingKeysWith: { a, _ in a })
        guard let identifier = values["storeIdentifier"], let type = values["storeType"],
            let hash = values["modelVersionHash"],
            let schemaJSON = values["modelSchema"]
        else {
            throw GraphError(
                .invalidStore,
                "\(url.path) has damaged metadata (bs_metadata is missing keys).",
                advice: "Restore the file from a backup, or re-import into a new store."
            )
        }
        guard type == storeType else {
            throw GraphError(.invalidStore, "\(url.path) is a '\(type)' store, not an SQLite store.")
        }
        var metadata = StoreMetadata(storeIdentifier: identifier, storeType: type, modelVersionHash: hash)
        guard hash != model.versionHash else { return metadata }
        let stored: [EntitySchema]
        do {
            stored = try JSONDecoder().decode([EntitySchema].self, from: Data(schemaJSON.utf8))
        } catch {
            throw GraphError(
                .invalidStore,
                "\(url.path) has a model description that cannot be read.", advice: "Restore the file from a backup.",
                cause: error
            )
        }
        let migration = try ModelMigration.plan(from: stored, to: model)
        try db.inTransaction(.immediate) {
            try SQLSchema.migrate(migration, in: db)
            metadata.modelVersionHash = model.versionHash
            try write(metadata, schema: model.schema, in: db)
            return .commit
        }
        logger.info(
            "migrated store",
            metadata: [
                "store.path": "\(url.path)",
                "added.attributes": "\(migration.addedAttributes.mapValues { $0.map(\.name) })",
            ])
        return metadata
    }

    func requireLoaded() throws -> Loaded {
        guard let current = loaded.withLock({ $0 }) else {
            throw GraphError(
                .invalidStore,
                "SQLite store at \(url.path) used before loadMetadata(for:).",
                advice: "Open it through a StoreCoordinator.")
        }
        return current
    }
}
