public import BugSquasherGraph
public import BugSquasherVarlink
import Foundation

/// Converts rows and did-saves between the object graph and the wire: attributes by name (dates
/// as ISO 8601 strings with fractional seconds, data as base64), to-one relationships as object
/// ID URIs.
public struct WireCoding: Sendable {
    /// The model both sides use.
    public let model: ManagedObjectModel

    /// Creates a coder for a model.
    public init(model: ManagedObjectModel) { self.model = model }

    /// A row's values as a JSON object: the attributes in the model's order, then the to-one
    /// relationships, where ``decodeRow(_:version:entity:)`` looks for them first.
    public func encode(_ row: RowSnapshot, entity: EntityDescription) -> WireValues {
        var values = WireValues(capacity: entity.attributes.count + entity.toOneRelationships.count)
        for (index, attribute) in entity.attributes.enumerated() where index < row.attributes.count {
            values.append(name: attribute.name, value: Self.encode(row.attributes[index]))
        }
        for (index, relationship) in entity.toOneRelationships.enumerated() where index < row.toOne.count {
            values.append(name: relationship.name, value: row.toOne[index].map { .string($0.uriString) } ?? .null)
        }
        return values
    }

    /// One value as JSON.
    public static func encode(_ value: Value) -> JSONValue {
        switch value {
        case .null: .null
        case .string(let s): .string(s)
        case .int64(let i): .int(i)
        case .double(let d): .double(d)
        case .bool(let b): .bool(b)
        case .date(let d): .string(ISO8601Date.format(d, fractionalSeconds: true))
        case .data(let d): .string(d.base64EncodedString())
        }
    }

    /// A value from JSON, as the attribute's type.
    ///
    /// - Throws: ``GraphError/Code/invalidArgument`` naming the attribute when the JSON value
    ///   cannot have its type.
    public static func decode(_ json: JSONValue, as attribute: AttributeDescription) throws -> Value {
        switch (json, attribute.type) {
        case (.null, _): return .null
        case (.string(let s), .string): return .string(s)
        case (.int(let i), .int64): return .int64(i)
        case (.double(let d), .int64):
            // A whole number written with a fraction or exponent; one past Int64 is refused.
            if let whole = Int64(exactly: d) { return .int64(whole) }
        case (.int(let i), .double): return .double(Double(i))
        case (.double(let d), .double): return .double(d)
        case (.bool(let b), .bool): return .bool(b)
        case (.string(let s), .date):
            // Strict: Foundation's parser would roll 2020-02-30 over to March 1st.
            if let date = ISO8601Date.parse(s) { return .date(date) }
            // ISO 8601 writes years 0001 to 9999 with four digits: a date outside them would
            // be written back in a form other programs do not read.
            if ISO8601Date.isOutsideFourDigitYears(s) {
                throw GraphError(
                    .invalidArgument,
                    "'\(attribute.name)' is date; \(s) is outside the years 0001 to 9999.",
                    advice: "Give a date in them, as ISO 8601 with a time zone: 2012-01-31T09:30:00Z."
                )
            }
        case (.string(let s), .data):
            if let data = Data(base64Encoded: s) { return .data(data) }
        default: break
        }
        let form =
            switch attribute.type {
            case .date:
                "Give a date and time that exist, as ISO 8601 with a time zone: 2012-01-31T09:30:00Z, or 2012-01-31T09:30:00.250+01:00."
            case .data: "Give data as base64."
            case .int64: "Give a whole number."
            case .double: "Give a number."
            case .bool: "Give true or false."
            case .string: "Give a string."
            }
        let text = (try? JSONEncoder().encode(json)).map { String(decoding: $0, as: UTF8.self) } ?? "\(json)"
        throw GraphError(
            .invalidArgument, "'\(attribute.name)' is \(attribute.type); \(text) cannot be one.", advice: form)
    }

    /// A row from its JSON values; each name is looked for first where
    /// ``encode(_:entity:)`` writes it. IDs of the store `storeIdentifier` share that string
    /// (see ``ObjectID/init(uri:reusingStore:)``).
    public func decodeRow(
        _ values: WireValues, version: Int64, entity: EntityDescription, storeIdentifier: String? = nil
    ) throws -> RowSnapshot {
        let attributes = try entity.attributes.enumerated().map { position, attribute in
            try Self.decode(values.value(named: attribute.name, expectedAt: position) ?? .null, as: attribute)
        }
        let first = entity.attributes.count
        let toOne = try entity.toOneRelationships.enumerated().map { position, relationship -> ObjectID? in
            guard case .string(let uri)? = values.value(named: relationship.name, expectedAt: first + position) else {
                return nil
            }
            guard let id = ObjectID(uri: uri, reusingStore: storeIdentifier) else {
                throw GraphError(
                    .invalidArgument, "'\(relationship.name)' holds '\(uri)', which is not an object ID URI.")
            }
            return id
        }
        return RowSnapshot(version: version, attributes: attributes, toOne: toOne)
    }

    /// A did-save on the wire; values only when `includeValues`. With `idRuns`, inserted and
    /// deleted objects without values whose primary keys follow one another (one entity, one
    /// version) become one change with a `count` (see ``WireObjectChange/count``).
    public func encode(_ didSave: DidSave, includeValues: Bool, idRuns: Bool = false) -> WireSave {
        func change(_ change: ObjectChange, keys: Bool) -> WireObjectChange {
            var values: WireValues?
            if includeValues, let row = change.values, let entity = model.entity(named: change.objectID.entityName) {
                values = encode(row, entity: entity)
            }
            return WireObjectChange(
                id: change.objectID.uriString, version: change.version, keys: keys ? change.changedKeys : nil,
                values: values)
        }
        func list(_ changes: [ObjectChange]) -> [WireObjectChange] {
            guard idRuns, !includeValues else { return changes.map { change($0, keys: false) } }
            var result: [WireObjectChange] = []
            var index = changes.startIndex
            while index < changes.endIndex {
                let first = changes[index]
                var end = index + 1
                while end < changes.endIndex, end - index < WireObjectChange.maximumRunLength,
                    changes[end].version == first.version,
                    changes[end].objectID.key == changes[end - 1].objectID.key + 1,
                    changes[end].objectID.entityName == first.objectID.entityName,
                    changes[end].objectID.isTemporary == first.objectID.isTemporary
                {
                    end += 1
                }
                result.append(
                    WireObjectChange(
                        id: first.objectID.uriString, version: first.version,
                        count: end - index > 1 ? Int64(end - index) : nil))
                index = end
            }
            return result
        }
        return WireSave(
            token: didSave.token.rawValue,
            inserted: list(didSave.inserted),
            updated: didSave.updated.map { change($0, keys: true) },
            deleted: list(didSave.deleted)
        )
    }

    /// A did-save from the wire.
    public func decode(_ save: WireSave, storeIdentifier: String) throws -> DidSave {
        func change(_ wire: WireObjectChange) throws -> ObjectChange {
            guard let id = ObjectID(uri: wire.id, reusingStore: storeIdentifier) else {
                throw GraphError(.invalidArgument, "'\(wire.id)' is not an object ID URI.")
            }
            var row: RowSnapshot?
            if let values = wire.values, let entity = model.entity(named: id.entityName) {
                row = try decodeRow(values, version: wire.version, entity: entity, storeIdentifier: storeIdentifier)
            }
            return ObjectChange(objectID: id, version: wire.version, changedKeys: wire.keys ?? [], values: row)
        }
        return DidSave(
            token: HistoryToken(rawValue: save.token), storeIdentifier: storeIdentifier,
            inserted: try save.inserted.map(change), updated: try save.updated.map(change),
            deleted: try save.deleted.map(change)
        )
    }
}
