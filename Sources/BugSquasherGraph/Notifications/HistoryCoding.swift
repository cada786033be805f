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

    /// Whether a payload may list inserts: `false` only when its first bytes say it lists none
    /// (``encode(_:withValues:)`` writes the inserts first, an empty object when there are
    /// none), so that a reader can tell without decoding it (an import's chunk takes
    /// milliseconds to decode).
    package static func mayHaveInserts(_ data: Data) -> Bool {
        !data.starts(with: noInserts)
    }

    /// The first bytes of a payload without inserts.
    private static let noInserts = Array(#"{"i":{}"#.utf8)

    /// The did-save of a history row; with `model`, the values of updated objects whose entries
    /// carry them. Read with ``JSONReader``, as every daemon reads every other daemon's saves:
    /// `JSONSerialization`'s boxed values cost a follower more than the rest of its work.
    package static func decode(_ data: Data, store: String, token: HistoryToken, model: ManagedObjectModel? = nil)
        throws -> DidSave
    {
        do {
            return try data.withUnsafeBytes { raw in
                var reader = JSONReader(raw.bindMemory(to: UInt8.self))
                var didSave = DidSave(token: token, storeIdentifier: store)
                var fields = try reader.beginObject()
                while let key = try reader.nextName(&fields) {
                    switch key {
                    case "i": didSave.inserted = try readPairs(&reader, store: store)
                    case "d": didSave.deleted = try readPairs(&reader, store: store)
                    case "u": didSave.updated = try readUpdates(&reader, store: store, model: model)
                    default: try reader.skip()
                    }
                }
                try reader.end()
                return didSave
            }
        } catch let failure as JSONReader.Failure {
            throw GraphError(
                .invalidStore, "A history row is not the JSON a save writes (\(failure)); the history table is damaged."
            )
        }
    }

    /// An object of entries by entity, `{"Entity":…, …}`, each read by `entries`; the changes
    /// in entity-name order.
    private static func readByEntity(
        _ reader: inout JSONReader, _ entries: (inout JSONReader, String) throws -> [ObjectChange]
    ) throws -> [ObjectChange] {
        var byEntity: [(entity: String, changes: [ObjectChange])] = []
        try reader.object { reader, entity in byEntity.append((entity, try entries(&reader, entity))) }
        // One entity (an import's chunk of bugs) as it is: copying a thousand changes costs.
        if byEntity.count == 1 { return byEntity[0].changes }
        return byEntity.sorted { $0.entity < $1.entity }.flatMap(\.changes)
    }

    /// `{"Entity":[primaryKey, version, …], …}`, entities in name order.
    private static func readPairs(_ reader: inout JSONReader, store: String) throws -> [ObjectChange] {
        try readByEntity(&reader) { reader, entity in
            var numbers: [Int64] = []
            try reader.array { numbers.append(try $0.int64()) }
            return stride(from: 0, to: numbers.count - 1, by: 2).map {
                ObjectChange(
                    objectID: ObjectID(store: store, entity: entity, primaryKey: numbers[$0]), version: numbers[$0 + 1],
                    changedKeys: [])
            }
        }
    }

    /// `{"Entity":[[primaryKey, version, changed keys…, row?], …], …}`, entities in name order.
    private static func readUpdates(_ reader: inout JSONReader, store: String, model: ManagedObjectModel?) throws
        -> [ObjectChange]
    {
        try readByEntity(&reader) { reader, entity in
            let description = model?.entity(named: entity)
            var changes: [ObjectChange] = []
            try reader.array { reader in
                var numbers: [Int64] = []
                var keys: [String] = []
                var row: RowSnapshot?
                try reader.array { reader in
                    switch try reader.peek() {
                    case .number where numbers.count < 2: numbers.append(try reader.int64())
                    case .string: keys.append(try reader.string())
                    case .object:
                        if let description, numbers.count == 2 {
                            row = try readRow(&reader, of: description, version: numbers[1], store: store)
                        } else {
                            try reader.skip()
                        }
                    default: try reader.skip()
                    }
                }
                guard numbers.count == 2 else { return }
                changes.append(
                    ObjectChange(
                        objectID: ObjectID(store: store, entity: entity, primaryKey: numbers[0]), version: numbers[1],
                        changedKeys: keys, values: row))
            }
            return changes
        }
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
    private static func readRow(_ reader: inout JSONReader, of entity: EntityDescription, version: Int64, store: String)
        throws -> RowSnapshot?
    {
        var attributes: [Value]?
        var toOne: [ObjectID?]?
        var fits = true
        var fields = try reader.beginObject()
        while let key = try reader.nextName(&fields) {
            switch key {
            case "a":
                var cells: [Value] = []
                cells.reserveCapacity(entity.attributes.count)
                try reader.array { reader in
                    guard fits, cells.count < entity.attributes.count,
                        let value = try readCell(&reader, as: entity.attributes[cells.count].type)
                    else {
                        fits = false
                        return try reader.skip()
                    }
                    cells.append(value)
                }
                attributes = cells
            case "o":
                var keys: [ObjectID?] = []
                try reader.array { reader in
                    guard fits, keys.count < entity.toOneRelationships.count else {
                        fits = false
                        return try reader.skip()
                    }
                    if reader.null() {
                        keys.append(nil)
                    } else if try reader.peek() == .number {
                        keys.append(
                            ObjectID(
                                store: store, entity: entity.toOneRelationships[keys.count].destination,
                                primaryKey: try reader.int64()))
                    } else {
                        fits = false
                        try reader.skip()
                    }
                }
                toOne = keys
            default: try reader.skip()
            }
        }
        guard fits, let attributes, let toOne, attributes.count == entity.attributes.count,
            toOne.count == entity.toOneRelationships.count
        else { return nil }
        return RowSnapshot(version: version, attributes: attributes, toOne: toOne)
    }

    /// One attribute's cell as `writeRow` wrote it for `type`; `nil` (skipped) when it is not
    /// one: the row does not fit the entity.
    private static func readCell(_ reader: inout JSONReader, as type: AttributeType) throws -> Value? {
        if reader.null() { return .null }
        switch (type, try reader.peek()) {
        case (.string, .string): return .string(try reader.string())
        case (.int64, .string): return Int64(try reader.string()).map { .int64($0) }
        case (.double, .number): return .double(try reader.double())
        case (.double, .string): return Double(try reader.string()).map { .double($0) }
        case (.date, .number): return .date(Date(timeIntervalSince1970: try reader.double()))
        case (.bool, .bool): return .bool(try reader.bool())
        case (.data, .string): return Data(base64Encoded: try reader.string()).map { .data($0) }
        default:
            try reader.skip()
            return nil
        }
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
