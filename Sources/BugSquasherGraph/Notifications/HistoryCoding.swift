import BugSquasherJSON
package import Foundation

/// The payload of one history row (`bs_history`, in every store that keeps one): a did-save without values, as compact JSON grouped by
/// entity, written by hand because it is on the save path of every chunk. `i` and `d` hold flat
/// `[primaryKey, version, …]` pairs, `u` one `[primaryKey, version, changed keys…]` per object; the
/// store identifier and token come from the store and the row.
///
/// ```json
/// {"i":{"Bug":[1,1,2,1]},"u":{"Bug":[[7,3,"title","status"]]},"d":{"Comment":[9,2]}}
/// ```
///
/// With values, an updated object's entry ends with its row, `{"a":[attributes…],"o":[to-one
/// keys…]}` (dates as seconds since 1970, data as base64, integers as strings, which JSON
/// numbers cannot all hold): what a reader in another process would otherwise read from the
/// table. A reader of entries without it skips the object.
package enum HistoryCoding {
    package static func encode(_ didSave: DidSave, withValues: Bool = false) -> Data {
        // About 12 bytes an object.
        var writer = JSONWriter(capacity: 64 + 12 * (didSave.inserted.count + didSave.updated.count))
        writer.object { writer in
            writer.key("i")
            writePairs(didSave.inserted, to: &writer)
            writer.key("u")
            writer.object { writer in
                for (entity, positions) in grouped(didSave.updated) {
                    writer.key(entity)
                    writer.array { writer in
                        for position in positions {
                            let change = didSave.updated[position]
                            writer.array { writer in
                                writer.integer(change.objectID.key)
                                writer.integer(change.version)
                                for key in change.changedKeys { writer.string(key) }
                                if withValues, let row = change.values { writeRow(row, to: &writer) }
                            }
                        }
                    }
                }
            }
            writer.key("d")
            writePairs(didSave.deleted, to: &writer)
        }
        return Data(writer.bytes)
    }

    /// The did-save of a history row; with `model`, the values of updated objects whose entries
    /// carry them.
    package static func decode(_ data: Data, store: String, token: HistoryToken, model: ManagedObjectModel? = nil)
        throws -> DidSave
    {
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw GraphError(.invalidStore, "A history row is not a JSON object; the history table is damaged.")
        }
        func pairs(_ key: String) -> [ObjectChange] {
            guard let byEntity = object[key] as? [String: [NSNumber]] else { return [] }
            return byEntity.sorted { $0.key < $1.key }.flatMap { entity, numbers in
                stride(from: 0, to: numbers.count - 1, by: 2).map {
                    ObjectChange(
                        objectID: ObjectID(store: store, entity: entity, primaryKey: numbers[$0].int64Value),
                        version: numbers[$0 + 1].int64Value, changedKeys: [])
                }
            }
        }
        var updated: [ObjectChange] = []
        for (entity, entries) in ((object["u"] as? [String: [[Any]]]) ?? [:]).sorted(by: { $0.key < $1.key }) {
            for entry in entries where entry.count >= 2 {
                guard let pk = entry[0] as? NSNumber, let version = entry[1] as? NSNumber else { continue }
                let row = (entry.last as? [String: Any]).flatMap { fields in
                    model?.entity(named: entity).flatMap {
                        readRow(fields, of: $0, version: version.int64Value, store: store)
                    }
                }
                updated.append(
                    ObjectChange(
                        objectID: ObjectID(store: store, entity: entity, primaryKey: pk.int64Value),
                        version: version.int64Value, changedKeys: entry.dropFirst(2).compactMap { $0 as? String },
                        values: row))
            }
        }
        return DidSave(
            token: token, storeIdentifier: store, inserted: pairs("i"), updated: updated, deleted: pairs("d"))
    }

    /// An updated object's row, `{"a":[…],"o":[…]}`.
    private static func writeRow(_ row: RowSnapshot, to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("a")
            writer.array { writer in
                for value in row.attributes {
                    switch value {
                    case .null: writer.null()
                    case .string(let text): writer.string(text)
                    case .int64(let number): writer.string(String(number))
                    // Infinities and NaN, which JSON lacks, as text Double(_:) reads back.
                    case .double(let number): number.isFinite ? writer.double(number) : writer.string("\(number)")
                    case .date(let date): writer.double(date.timeIntervalSince1970)
                    case .bool(let flag): writer.bool(flag)
                    case .data(let bytes): writer.string(bytes.base64EncodedString())
                    }
                }
            }
            writer.key("o")
            writer.array { writer in
                for destination in row.toOne {
                    if let destination { writer.integer(destination.key) } else { writer.null() }
                }
            }
        }
    }

    /// The row `writeRow` wrote for an object of `entity`; `nil` when it does not fit the entity
    /// (a model changed since), so that the reader reads the row from the table instead.
    private static func readRow(_ fields: [String: Any], of entity: EntityDescription, version: Int64, store: String)
        -> RowSnapshot?
    {
        guard let cells = fields["a"] as? [Any], let keys = fields["o"] as? [Any],
            cells.count == entity.attributes.count, keys.count == entity.toOneRelationships.count
        else { return nil }
        var attributes: [Value] = []
        attributes.reserveCapacity(cells.count)
        for (attribute, cell) in zip(entity.attributes, cells) {
            if cell is NSNull {
                attributes.append(.null)
                continue
            }
            let value: Value? =
                switch attribute.type {
                case .string: (cell as? String).map { .string($0) }
                case .int64: (cell as? String).flatMap { Int64($0) }.map { .int64($0) }
                case .double:
                    (cell as? NSNumber).map { .double($0.doubleValue) }
                        ?? (cell as? String).flatMap { Double($0) }.map { .double($0) }
                case .date: (cell as? NSNumber).map { .date(Date(timeIntervalSince1970: $0.doubleValue)) }
                case .bool: (cell as? NSNumber).map { .bool($0.boolValue) }
                case .data: (cell as? String).flatMap { Data(base64Encoded: $0) }.map { .data($0) }
                }
            guard let value else { return nil }
            attributes.append(value)
        }
        var toOne: [ObjectID?] = []
        for (relationship, key) in zip(entity.toOneRelationships, keys) {
            if key is NSNull {
                toOne.append(nil)
            } else if let key = key as? NSNumber {
                toOne.append(ObjectID(store: store, entity: relationship.destination, primaryKey: key.int64Value))
            } else {
                return nil
            }
        }
        return RowSnapshot(version: version, attributes: attributes, toOne: toOne)
    }

    /// The positions of `changes` by entity, entities in order of appearance. Positions, not
    /// the changes: a change copied into a group retains its ID's strings and its values (a
    /// chunk's did-save has a change per object).
    private static func grouped(_ changes: [ObjectChange]) -> [(entity: String, value: [Int])] {
        var groups = ByEntity<[Int]>()
        for position in changes.indices {
            groups[groups.index(of: changes[position].objectID.entityName) { [] }].append(position)
        }
        return groups.entries
    }

    private static func writePairs(_ changes: [ObjectChange], to writer: inout JSONWriter) {
        writer.object { writer in
            for (entity, positions) in grouped(changes) {
                writer.key(entity)
                writer.array { writer in
                    for position in positions {
                        writer.integer(changes[position].objectID.key)
                        writer.integer(changes[position].version)
                    }
                }
            }
        }
    }
}
