import BugSquasherGraph
import BugSquasherSQL
import Foundation
import GRDB

/// How the object graph maps to SQL: one table per entity (`pk`, `_version`, one column per
/// attribute and per to-one relationship), one join table per many-to-many relationship (on its
/// owning side), and the store's own `bs_` tables for metadata, ID sequences and history.
enum SQLSchema {
    static let reservedColumns: Set<String> = ["pk", "_version"]

    static func quote(_ name: String) -> String { SQLNames.quote(name) }

    static func sqlType(_ type: AttributeType) -> String {
        switch type {
        case .string: "TEXT"
        case .int64, .bool: "INTEGER"
        case .double, .date: "REAL"
        case .data: "BLOB"
        }
    }

    /// The join table of a many-to-many relationship, named after its owning side.
    static func joinTable(owner: String, relationship: String) -> String {
        SQLNames.joinTable(owner: owner, relationship: relationship)
    }

    /// The `SELECT` list that reads a row of `entity` from alias `t`.
    static func columns(of entity: EntityDescription, alias: String = "t", only: Set<String>? = nil) -> String {
        SQLNames.columns(of: entity, alias: alias, only: only)
    }

    static func defaultClause(_ attribute: AttributeDescription) -> String {
        guard !attribute.defaultValue.isNull else { return "" }
        switch attribute.defaultValue {
        case .string(let s): return " DEFAULT '\(s.replacingOccurrences(of: "'", with: "''"))'"
        case .int64(let i): return " DEFAULT \(i)"
        case .double(let d): return " DEFAULT \(d)"
        case .bool(let b): return " DEFAULT \(b ? 1 : 0)"
        case .date(let d): return " DEFAULT \(d.timeIntervalSince1970)"
        case .data, .null: return ""
        }
    }

    /// Creates the store's tables for a new store.
    static func create(_ model: ManagedObjectModel, in db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE bs_metadata (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                CREATE TABLE bs_sequence (entity TEXT PRIMARY KEY NOT NULL, next INTEGER NOT NULL);
                CREATE TABLE bs_history (token INTEGER PRIMARY KEY AUTOINCREMENT, committed_at REAL NOT NULL, payload BLOB NOT NULL);
                """)
        for entity in model.entities {
            for name in entity.attributes.map(\.name) + entity.relationships.map(\.name)
            where reservedColumns.contains(name) {
                throw GraphError(
                    .invalidArgument, "Entity '\(entity.name)' uses the reserved name '\(name)'.",
                    advice: "Rename the property.")
            }
            let columns =
                ["pk INTEGER PRIMARY KEY", "_version INTEGER NOT NULL"]
                + entity.attributes.map { "\(quote($0.name)) \(sqlType($0.type))\(defaultClause($0))" }
                + entity.toOneRelationships.map { "\(quote($0.name)) INTEGER" }
            try db.execute(sql: "CREATE TABLE \(quote(entity.name)) (\(columns.joined(separator: ", ")))")
            if let key = entity.uniqueKey {
                try db.execute(
                    sql:
                        "CREATE UNIQUE INDEX \(quote("\(entity.name)_\(key)_unique")) ON \(quote(entity.name))(\(quote(key)))"
                )
            }
            for relationship in entity.toOneRelationships {
                try db.execute(
                    sql:
                        "CREATE INDEX \(quote("\(entity.name)_\(relationship.name)_fk")) ON \(quote(entity.name))(\(quote(relationship.name)))"
                )
            }
            for relationship in entity.toManyRelationships where relationship.ownsManyToManyLinks(in: entity.name) {
                guard
                    model.entity(named: relationship.destination)?.relationship(named: relationship.inverse)?.isToMany
                        == true
                else { continue }
                let table = joinTable(owner: entity.name, relationship: relationship.name)
                try db.execute(
                    sql:
                        "CREATE TABLE \(table) (src INTEGER NOT NULL, dst INTEGER NOT NULL, PRIMARY KEY (src, dst)) WITHOUT ROWID"
                )
                try db.execute(
                    sql: "CREATE INDEX \(quote("\(entity.name)_\(relationship.name)_dst")) ON \(table)(dst, src)")
            }
        }
    }

    /// The tables and indexes `create` makes for a model, read back from a scratch in-memory
    /// database, so that checking a store against them cannot drift from `create`.
    struct Expected {
        /// Tables and indexes by name, with their columns.
        let layout: [String: (type: String, columns: Set<String>)]
        /// The indexes, with their tables and the SQL that creates them.
        let indexes: [(name: String, table: String, sql: String)]
    }

    /// The schema `create` makes for `model`.
    static func expected(_ model: ManagedObjectModel) throws -> Expected {
        try DatabaseQueue().write { scratch in
            try create(model, in: scratch)
            let indexes = try Row.fetchAll(
                scratch,
                sql:
                    "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name"
            )
            .map { (name: $0["name"] as String, table: $0["tbl_name"] as String, sql: $0["sql"] as String) }
            return Expected(layout: try layout(scratch), indexes: indexes)
        }
    }

    /// Re-creates the `expected` indexes that the store lacks, on tables it has (dropped by
    /// hand, or from a build that did not make them yet): an index holds nothing that its table
    /// does not. Returns their names.
    ///
    /// - Throws: ``GraphError/Code/invalidStore`` when a unique index cannot be rebuilt because
    ///   its table holds duplicates (they went in while the index was missing).
    static func recreateMissingIndexes(_ expected: Expected, in db: Database) throws -> [String] {
        var rebuilt: [String] = []
        for index in expected.indexes
        where try db.tableExists(index.table) && !db.indexes(on: index.table).contains(where: { $0.name == index.name })
        {
            do {
                try db.execute(sql: index.sql)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                throw GraphError(
                    .invalidStore,
                    "The unique index \(index.name) is missing and cannot be rebuilt: \(index.table) holds duplicates, which went in while the index was missing (the store was changed outside BugSquasher).",
                    advice: "Restore it from a backup, or remove the duplicates by hand.",
                    cause: error)
            }
            rebuilt.append(index.name)
        }
        return rebuilt
    }

    /// What the store lacks of the `expected` schema: missing tables, columns and indexes,
    /// described for a person (empty when nothing is missing). A store whose metadata names the
    /// model but whose tables were changed by hand (a dropped column) would fail on every request.
    static func missing(_ expected: Expected, in db: Database) throws -> [String] {
        let found = try layout(db)
        var missing: [String] = []
        for (name, item) in expected.layout.sorted(by: { $0.key < $1.key }) {
            guard let present = found[name], present.type == item.type else {
                missing.append("\(item.type) \(name)")
                continue
            }
            for column in item.columns.sorted() where !present.columns.contains(column) {
                missing.append("column \(name).\(column)")
            }
        }
        return missing
    }

    /// Tables and indexes by name, with their columns.
    private static func layout(_ db: Database) throws -> [String: (type: String, columns: Set<String>)] {
        var items: [String: (type: String, columns: Set<String>)] = [:]
        for row in try Row.fetchAll(
            db,
            sql: "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'")
        {
            let (type, name): (String, String) = (row["type"], row["name"])
            let pragma = type == "table" ? "table_info" : "index_info"
            let columns = try String.fetchAll(db, sql: "SELECT name FROM pragma_\(pragma)(?)", arguments: [name])
            items[name] = (type, Set(columns))
        }
        return items
    }

    /// Adds the columns of an automatic migration.
    static func migrate(_ migration: ModelMigration, in db: Database) throws {
        for (entity, attributes) in migration.addedAttributes.sorted(by: { $0.key < $1.key }) {
            for attribute in attributes {
                try db.execute(
                    sql:
                        "ALTER TABLE \(quote(entity)) ADD COLUMN \(quote(attribute.name)) \(sqlType(attribute.type))\(defaultClause(attribute))"
                )
            }
        }
    }
}
