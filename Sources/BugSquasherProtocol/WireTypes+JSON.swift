package import BugSquasherJSON
import BugSquasherVarlink

// The change feed's messages and edits, read and written without Codable: every save goes to
// every subscriber, and JSONDecoder/JSONEncoder were the largest share of a subscriber's CPU
// and of the daemon's per-save work. The Codable conformances stay for everything else; both
// read and write the same JSON.

extension WireObjectChange: JSONReadable, JSONWritable {
    package init(reading reader: inout JSONReader) throws {
        var id: String?
        var version: Int64?
        var keys: [String]?
        var values: WireValues?
        var count: Int64?
        try reader.object { reader, key in
            switch key {
            case "id": id = try reader.field("id") { try $0.string() }
            case "version": version = Int64(try reader.field("version") { try $0.integer() })
            case "keys": keys = reader.null() ? nil : try reader.strings()
            case "values": values = reader.null() ? nil : try WireValues(reading: &reader)
            case "count": count = reader.null() ? nil : Int64(try reader.field("count") { try $0.integer() })
            default: try reader.skip()
            }
        }
        guard let id else { throw JSONReader.Failure.missing("id") }
        guard let version else { throw JSONReader.Failure.missing("version") }
        self.init(id: id, version: version, keys: keys, values: values, count: count)
    }

    /// The changes a run stands for (see ``count``); the change itself when it is no run.
    package func expandingRun() throws -> [WireObjectChange] {
        guard let count else { return [self] }
        // The ID's primary key is the number after the last "/p".
        guard (1...Self.maximumRunLength).contains(count), let slash = id.utf8.lastIndex(of: UInt8(ascii: "/")),
            id[slash...].hasPrefix("/p"), let first = Int64(id[id.index(slash, offsetBy: 2)...])
        else {
            throw JSONReader.Failure(
                message:
                    "'count' \(count) with ID \(id): a run needs an ID ending in /p<key> and a count from 1 to \(Self.maximumRunLength)",
                offset: 0, field: "count")
        }
        let prefix = id[...id.index(after: slash)]
        return (0..<count).map { WireObjectChange(id: prefix + String(first + $0), version: version) }
    }

    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("id")
            writer.string(id)
            writer.key("version")
            writer.integer(version)
            if let keys {
                writer.key("keys")
                writer.array { writer in for key in keys { writer.string(key) } }
            }
            if let values {
                writer.key("values")
                values.write(to: &writer)
            }
            if let count {
                writer.key("count")
                writer.integer(count)
            }
        }
    }
}

extension WireSave: JSONReadable, JSONWritable {
    package init(reading reader: inout JSONReader) throws {
        var token: Int64?
        var inserted: [WireObjectChange]?
        var updated: [WireObjectChange]?
        var deleted: [WireObjectChange]?
        func changes(_ reader: inout JSONReader) throws -> [WireObjectChange] {
            var result: [WireObjectChange] = []
            try reader.array { result += try WireObjectChange(reading: &$0).expandingRun() }
            return result
        }
        try reader.object { reader, key in
            switch key {
            case "token": token = Int64(try reader.field("token") { try $0.integer() })
            case "inserted": inserted = try changes(&reader)
            case "updated": updated = try changes(&reader)
            case "deleted": deleted = try changes(&reader)
            default: try reader.skip()
            }
        }
        guard let token else { throw JSONReader.Failure.missing("token") }
        guard let inserted else { throw JSONReader.Failure.missing("inserted") }
        guard let updated else { throw JSONReader.Failure.missing("updated") }
        guard let deleted else { throw JSONReader.Failure.missing("deleted") }
        self.init(token: token, inserted: inserted, updated: updated, deleted: deleted)
    }

    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("token")
            writer.integer(token)
            for (name, changes) in [("inserted", inserted), ("updated", updated), ("deleted", deleted)] {
                writer.key(name)
                writer.array { writer in for change in changes { change.write(to: &writer) } }
            }
        }
    }
}

extension SubscribeReply: JSONReadable, JSONWritable {
    package init(reading reader: inout JSONReader) throws {
        var event: String?
        var subscription: String?
        var token: Int64?
        var save: WireSave?
        var resyncFrom: Int64?
        var reason: String?
        try reader.object { reader, key in
            switch key {
            case "event": event = try reader.field("event") { try $0.string() }
            case "subscription": subscription = try reader.optionalString()
            case "token": token = Int64(try reader.field("token") { try $0.integer() })
            case "save": save = reader.null() ? nil : try WireSave(reading: &reader)
            case "resyncFrom":
                resyncFrom = reader.null() ? nil : Int64(try reader.field("resyncFrom") { try $0.integer() })
            case "reason": reason = try reader.optionalString()
            default: try reader.skip()
            }
        }
        guard let event else { throw JSONReader.Failure.missing("event") }
        guard let token else { throw JSONReader.Failure.missing("token") }
        self.init(
            event: event, subscription: subscription, token: token, save: save, resyncFrom: resyncFrom, reason: reason)
    }

    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("event")
            writer.string(event)
            if let subscription {
                writer.key("subscription")
                writer.string(subscription)
            }
            writer.key("token")
            writer.integer(token)
            if let save {
                writer.key("save")
                save.write(to: &writer)
            }
            if let resyncFrom {
                writer.key("resyncFrom")
                writer.integer(resyncFrom)
            }
            if let reason {
                writer.key("reason")
                writer.string(reason)
            }
        }
    }
}

extension UpdateParameters: JSONReadable {
    package init(reading reader: inout JSONReader) throws {
        var id: String?
        var values: [String: JSONValue]?
        var ifVersion: Int64?
        try reader.object { reader, key in
            switch key {
            case "id": id = try reader.field("id") { try $0.string() }
            case "values": values = try reader.field("values") { try [String: JSONValue](reading: &$0) }
            case "ifVersion":
                ifVersion = reader.null() ? nil : Int64(try reader.field("ifVersion") { try $0.integer() })
            default: try reader.skip()
            }
        }
        guard let id else { throw JSONReader.Failure.missing("id") }
        guard let values else { throw JSONReader.Failure.missing("values") }
        self.init(id: id, values: values, ifVersion: ifVersion)
    }
}

extension UpdateReply: JSONWritable {
    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("version")
            writer.integer(version)
            writer.key("token")
            writer.integer(token)
        }
    }
}

extension AppendParameters: JSONReadable, JSONWritable {
    /// An upload sends its file as base64 strings of 512 KiB of input: read in one pass.
    package init(reading reader: inout JSONReader) throws {
        var job: String?
        var data: String?
        try reader.object { reader, key in
            switch key {
            case "job": job = try reader.field("job") { try $0.string() }
            case "data": data = try reader.field("data") { try $0.string() }
            default: try reader.skip()
            }
        }
        guard let job else { throw JSONReader.Failure.missing("job") }
        guard let data else { throw JSONReader.Failure.missing("data") }
        self.init(job: job, data: data)
    }

    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("job")
            writer.string(job)
            writer.key("data")
            writer.string(data)
        }
    }
}

/// A save's inserted and deleted objects as JSON, each list its elements joined by commas,
/// without the brackets.
///
/// The daemon encodes these lists of a committed save once and splices those of consecutive
/// saves into one reply for every subscriber that fell behind by them (see
/// ``SubscribeReply/splicedSave(token:lists:updated:)``), instead of merging and encoding the
/// saves again for each such subscriber: an import's chunks are nearly all inserted objects.
package struct EncodedChangeLists: Sendable {
    /// The inserted objects' JSON.
    package let inserted: [UInt8]
    /// The deleted objects' JSON.
    package let deleted: [UInt8]

    /// The inserted and deleted lists of a save, encoded.
    package init(_ save: WireSave) {
        func list(_ changes: [WireObjectChange]) -> [UInt8] {
            var writer = JSONWriter(capacity: changes.count * 80)
            for change in changes { change.write(to: &writer) }
            return writer.bytes
        }
        inserted = list(save.inserted)
        deleted = list(save.deleted)
    }
}

extension SubscribeReply {
    /// The Varlink reply (`continues`) of one "save" event: the inserted and deleted lists of
    /// several saves, concatenated in order, and `updated`. Encoded as
    /// `VarlinkReply.encode(SubscribeReply(event: "save", …), continues: true)` would encode that
    /// save.
    package static func splicedSave(token: Int64, lists: [EncodedChangeLists], updated: [WireObjectChange]) -> [UInt8] {
        var writer = JSONWriter(
            capacity: lists.reduce(160 + updated.count * 100) { $0 + $1.inserted.count + $1.deleted.count + 2 })
        writer.object { writer in
            writer.key("parameters")
            writer.object { writer in
                writer.key("event")
                writer.string("save")
                writer.key("token")
                writer.integer(token)
                writer.key("save")
                writer.object { writer in
                    writer.key("token")
                    writer.integer(token)
                    writer.key("inserted")
                    writer.array { writer in
                        for list in lists where !list.inserted.isEmpty { writer.raw(list.inserted) }
                    }
                    writer.key("updated")
                    writer.array { writer in for change in updated { change.write(to: &writer) } }
                    writer.key("deleted")
                    writer.array { writer in for list in lists where !list.deleted.isEmpty { writer.raw(list.deleted) }
                    }
                }
            }
            writer.key("continues")
            writer.bool(true)
        }
        return writer.bytes
    }
}

// Rows are written field by field, each object's values in the order WireCoding gave them (the
// model's): JSONEncoder would write them from a dictionary, in an order of its own.
extension WireRow: JSONWritable {
    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("id")
            writer.string(id)
            writer.key("version")
            writer.integer(version)
            writer.key("values")
            values.write(to: &writer)
        }
    }
}

extension FetchReply: JSONWritable {
    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            if let ids {
                writer.key("ids")
                writer.array { writer in for id in ids { writer.string(id) } }
            }
            if let rows {
                writer.key("rows")
                writer.array { writer in for row in rows { row.write(to: &writer) } }
            }
            if let count {
                writer.key("count")
                writer.integer(Int64(count))
            }
            if let more {
                writer.key("more")
                writer.bool(more)
            }
        }
    }
}

extension RowsReply: JSONWritable {
    package func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("rows")
            writer.array { writer in for row in rows { row.write(to: &writer) } }
        }
    }
}
