package import BugSquasherGraph

/// The SQL names both SQL stores give the object graph: quoted identifiers, an entity's row
/// columns, and join tables. SQLite and PostgreSQL quote identifiers alike.
package enum SQLNames {
    /// `name` as a quoted SQL identifier.
    package static func quote(_ name: String) -> String {
        // Without Foundation: this runs for every query built.
        var quoted = "\""
        for character in name {
            if character == "\"" { quoted.append("\"") }
            quoted.append(character)
        }
        quoted.append("\"")
        return quoted
    }

    /// The join table of a many-to-many relationship, named after its owning side.
    package static func joinTable(owner: String, relationship: String) -> String {
        quote("\(owner)_\(relationship)")
    }

    /// The `SELECT` list that reads a row of `entity` from alias `t`: pk, version, attributes, to-one keys.
    /// With `only`, the attributes not in it and the to-one keys are `NULL` (see
    /// ``FetchDescription/attributesToFetch``).
    package static func columns(of entity: EntityDescription, alias: String = "t", only: Set<String>? = nil) -> String {
        (["\(alias).pk", "\(alias)._version"]
            + entity.attributes.map { only?.contains($0.name) == false ? "NULL" : "\(alias).\(quote($0.name))" }
            + entity.toOneRelationships.map { only == nil ? "\(alias).\(quote($0.name))" : "NULL" })
            .joined(separator: ", ")
    }

    /// The query for the destinations of a to-many relationship of one object, whose key is the
    /// statement's one parameter (`?` in SQLite, `$1` in PostgreSQL), and the destination entity.
    package static func toMany(
        _ name: String, of entityName: String, in model: ManagedObjectModel, parameter: String
    ) throws -> (sql: String, destination: EntityDescription) {
        let (relationship, destination, inverse) = try model.toManyRelationship(name, of: entityName)
        let sql: String
        if !inverse.isToMany {
            sql = "SELECT pk FROM \(quote(destination.name)) WHERE \(quote(inverse.name)) = \(parameter) ORDER BY pk"
        } else if relationship.ownsManyToManyLinks(in: entityName) {
            sql =
                "SELECT dst FROM \(joinTable(owner: entityName, relationship: name)) WHERE src = \(parameter) ORDER BY dst"
        } else {
            sql =
                "SELECT src FROM \(joinTable(owner: destination.name, relationship: inverse.name)) WHERE dst = \(parameter) ORDER BY src"
        }
        return (sql, destination)
    }
}

/// The columns of a fetch's key paths, with the `LEFT JOIN`s that the to-one links they follow
/// need (one per distinct path prefix, aliased `j1`, `j2`, …), for both SQL stores.
package struct KeyPathJoins: Sendable {
    let model: ManagedObjectModel
    let entity: EntityDescription
    /// The `LEFT JOIN` clauses so far.
    package private(set) var joins: [String] = []
    private var aliases: [String: String] = [:]

    /// Joins for key paths of `entity`, aliased `t`.
    package init(model: ManagedObjectModel, entity: EntityDescription) {
        self.model = model
        self.entity = entity
    }

    /// The SQL column for a key path and the attribute it ends at (`nil` for a relationship),
    /// adding the joins for the to-one links it follows.
    ///
    /// - Throws: ``GraphError/Code/invalidArgument`` when the path names no attribute (or, with
    ///   `relationship`, no to-one relationship) of the entity.
    package mutating func resolve(_ keyPath: String, relationship: Bool = false) throws -> (
        column: String, attribute: AttributeDescription?
    ) {
        let parts = keyPath.split(separator: ".").map(String.init)
        var alias = "t"
        var current = entity
        var prefix = ""
        for (index, part) in parts.enumerated() {
            if index == parts.count - 1 {
                let column = "\(alias).\(SQLNames.quote(part))"
                if relationship {
                    if current.toOneRelationships.contains(where: { $0.name == part }) { return (column, nil) }
                } else if let attribute = current.attribute(named: part) {
                    return (column, attribute)
                }
                break
            }
            guard let link = current.relationship(named: part), !link.isToMany,
                let next = model.entity(named: link.destination)
            else { break }
            prefix += (prefix.isEmpty ? "" : ".") + part
            if let known = aliases[prefix] {
                alias = known
            } else {
                let newAlias = "j\(aliases.count + 1)"
                joins.append(
                    "LEFT JOIN \(SQLNames.quote(next.name)) \(newAlias) ON \(newAlias).pk = \(alias).\(SQLNames.quote(part))"
                )
                aliases[prefix] = newAlias
                alias = newAlias
            }
            current = next
        }
        // A path of any length may come from a client: the message quotes its start only.
        let shown = keyPath.count > 200 ? "\(keyPath.prefix(200))… (\(keyPath.count) characters)" : keyPath
        throw GraphError(
            .invalidArgument,
            "'\(shown)' is not \(relationship ? "a to-one relationship" : "an attribute") key path of \(entity.name).",
            advice: "Use an attribute name, or to-one relationships leading to one (like 'project.key')."
        )
    }
}
