import BugSquasherGraph
import BugSquasherSQL
import Foundation

/// How the object graph maps to PostgreSQL: the same layout as the SQLite store's (one table per
/// entity with `pk`, `_version`, a column per attribute and per to-one relationship; a join table
/// per many-to-many relationship; `bs_metadata`, `bs_sequence`, `bs_history`), plus `bs_counter`,
/// the one row whose update issues history tokens, and `bs_daemons`, the programs attached. Text columns sort byte-wise (`COLLATE "C"`),
/// as SQLite's do; dates are seconds since 1970, as there.
enum PostgresSchema {
    static let reservedColumns: Set<String> = ["pk", "_version"]

    /// `name` as a quoted SQL identifier.
    static func quote(_ name: String) -> String { SQLNames.quote(name) }

    /// The column type of an attribute type: ``castType(_:)``, text compared byte for byte.
    static func sqlType(_ type: AttributeType) -> String {
        type == .string ? "text COLLATE \"C\"" : castType(type)
    }

    /// The type of an attribute type's values, as a parameter is cast to it (`$1::bigint`).
    static func castType(_ type: AttributeType) -> String {
        switch type {
        case .string: "text"
        case .int64: "bigint"
        case .bool: "boolean"
        case .double, .date: "double precision"
        case .data: "bytea"
        }
    }

    /// The join table of a many-to-many relationship, named after its owning side.
    static func joinTable(owner: String, relationship: String) -> String {
        SQLNames.joinTable(owner: owner, relationship: relationship)
    }

    /// The `SELECT` list that reads a row of `entity` from alias `t`: with `only`, those attributes,
    /// and NULL for the others and the to-one keys.
    static func columns(of entity: EntityDescription, alias: String = "t", only: Set<String>? = nil) -> String {
        SQLNames.columns(of: entity, alias: alias, only: only)
    }

    /// ` DEFAULT <literal>` for an attribute with a default value.
    static func defaultClause(_ attribute: AttributeDescription) -> String {
        switch attribute.defaultValue {
        case .string(let s): " DEFAULT '\(PostgresText.encode(s).replacingOccurrences(of: "'", with: "''"))'"
        case .int64(let i): " DEFAULT \(i)"
        case .double(let d): " DEFAULT \(d)"
        case .bool(let b): " DEFAULT \(b ? "TRUE" : "FALSE")"
        case .date(let d): " DEFAULT \(d.timeIntervalSince1970)"
        case .data, .null: ""
        }
    }

    /// The programs attached to the store (``PostgresStore/attach(as:host:)``), created with a new
    /// store and added to one created before it existed.
    static let membersTable =
        "CREATE TABLE IF NOT EXISTS bs_daemons (id text PRIMARY KEY, host text NOT NULL, token bigint NOT NULL, started_at timestamptz NOT NULL, last_seen timestamptz NOT NULL)"

    /// The statements that create the store's tables, for a new store.
    static func create(_ model: ManagedObjectModel) throws -> [String] {
        var statements = [
            "CREATE TABLE bs_metadata (key text PRIMARY KEY, value text NOT NULL)",
            "CREATE TABLE bs_sequence (entity text PRIMARY KEY, next bigint NOT NULL)",
            "CREATE TABLE bs_history (token bigint PRIMARY KEY, committed_at double precision NOT NULL, payload bytea NOT NULL)",
            "CREATE TABLE bs_counter (id integer PRIMARY KEY CHECK (id = 1), token bigint NOT NULL)",
            "INSERT INTO bs_counter (id, token) VALUES (1, 0)",
            membersTable,
        ]
        for entity in model.entities {
            statements += try create(entity, in: model)
        }
        return statements
    }

    private static func create(_ entity: EntityDescription, in model: ManagedObjectModel) throws -> [String] {
        for name in entity.attributes.map(\.name) + entity.relationships.map(\.name)
        where reservedColumns.contains(name) {
            throw GraphError(
                .invalidArgument, "Entity '\(entity.name)' uses the reserved name '\(name)'.",
                advice: "Rename the property.")
        }
        let table = quote(entity.name)
        let columns =
            ["pk bigint PRIMARY KEY", "_version bigint NOT NULL"]
            + entity.attributes.map { "\(quote($0.name)) \(sqlType($0.type))\(defaultClause($0))" }
            + entity.toOneRelationships.map { "\(quote($0.name)) bigint" }
        var statements = ["CREATE TABLE \(table) (\(columns.joined(separator: ", ")))"]
        if let key = entity.uniqueKey {
            statements.append(
                "CREATE UNIQUE INDEX \(quote("\(entity.name)_\(key)_unique")) ON \(table) (\(quote(key)))")
        }
        for relationship in entity.toOneRelationships {
            statements.append(
                "CREATE INDEX \(quote("\(entity.name)_\(relationship.name)_fk")) ON \(table) (\(quote(relationship.name)))"
            )
        }
        for relationship in entity.toManyRelationships where relationship.ownsManyToManyLinks(in: entity.name) {
            guard
                model.entity(named: relationship.destination)?.relationship(named: relationship.inverse)?.isToMany
                    == true
            else { continue }
            let join = joinTable(owner: entity.name, relationship: relationship.name)
            statements.append("CREATE TABLE \(join) (src bigint NOT NULL, dst bigint NOT NULL, PRIMARY KEY (src, dst))")
            statements.append("CREATE INDEX \(quote("\(entity.name)_\(relationship.name)_dst")) ON \(join) (dst, src)")
        }
        return statements
    }

    /// The statements that add the columns of an automatic migration.
    static func migrate(_ migration: ModelMigration) -> [String] {
        migration.addedAttributes.sorted(by: { $0.key < $1.key }).flatMap { entity, attributes in
            attributes.map {
                "ALTER TABLE \(quote(entity)) ADD COLUMN \(quote($0.name)) \(sqlType($0.type))\(defaultClause($0))"
            }
        }
    }
}

/// Text as PostgreSQL stores it. PostgreSQL's text cannot hold U+0000, which real bug data
/// does (console output pasted into a description); it is written as U+10FFFF U+10FFFE, and
/// U+10FFFF itself as U+10FFFF U+10FFFF. Equality, prefixes, order and substring search keep
/// their meaning in text without these noncharacters, which bug data does not hold.
/// Why it is built this way: docs/DESIGN-NOTES.md, "PostgreSQL text holds U+0000 escaped".
enum PostgresText {
    static let escape: Character = "\u{10FFFF}"
    static let nul: Character = "\u{10FFFE}"

    /// `text` with U+0000 and the escape character escaped.
    static func encode(_ text: String) -> String {
        // On the bytes first: every value of an import passes here, and 0xF4 leads only the
        // UTF-8 of U+100000 and above.
        guard mayNeedEscaping(text, nul: true),
            text.unicodeScalars.contains(where: { $0.value == 0 || $0.value == 0x10FFFF })
        else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0: out.unicodeScalars.append(contentsOf: "\u{10FFFF}\u{10FFFE}".unicodeScalars)
            case 0x10FFFF: out.unicodeScalars.append(contentsOf: "\u{10FFFF}\u{10FFFF}".unicodeScalars)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether `text` has a byte of U+0000 (when `nul`) or of a code point from U+100000 on.
    private static func mayNeedEscaping(_ text: String, nul: Bool) -> Bool {
        var text = text
        return text.withUTF8 { bytes in bytes.contains { $0 == 0xF4 || (nul && $0 == 0) } }
    }

    /// The text `encode` escaped.
    static func decode(_ stored: String) -> String {
        guard mayNeedEscaping(stored, nul: false), stored.unicodeScalars.contains(where: { $0.value == 0x10FFFF })
        else { return stored }
        var out = String.UnicodeScalarView()
        var escaped = false
        for scalar in stored.unicodeScalars {
            if escaped {
                out.append(scalar.value == 0x10FFFE ? "\u{0}" : scalar)
                escaped = false
            } else if scalar.value == 0x10FFFF {
                escaped = true
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}
