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
package enum HistoryCoding {
    package static func encode(_ didSave: DidSave) -> Data {
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

    package static func decode(_ data: Data, store: String, token: HistoryToken) throws -> DidSave {
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
                updated.append(
                    ObjectChange(
                        objectID: ObjectID(store: store, entity: entity, primaryKey: pk.int64Value),
                        version: version.int64Value, changedKeys: entry.dropFirst(2).compactMap { $0 as? String }))
            }
        }
        return DidSave(
            token: token, storeIdentifier: store, inserted: pairs("i"), updated: updated, deleted: pairs("d"))
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
