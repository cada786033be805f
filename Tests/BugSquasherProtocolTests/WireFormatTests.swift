import BugSquasherGraph
import BugSquasherJSON
import BugSquasherProtocol
import BugSquasherVarlink
import Foundation
import Testing

/// BugSquasher's wire formats: the change feed's replies and the framing of uploads.
@Suite("Wire formats")
struct WireFormatTests {
    @Test("a change-feed reply written by hand decodes with Codable to the same value, and back")
    func subscribeReply() throws {
        let save = WireSave(
            token: 42,
            inserted: [
                WireObjectChange(id: "x-bugsquasher://S/Bug/p1", version: 1, values: ["title": .string("a \"crash\"")])
            ],
            updated: [
                WireObjectChange(
                    id: "x-bugsquasher://S/Bug/p2", version: 7, keys: ["status", "title"], values: ["status": .null])
            ],
            deleted: [WireObjectChange(id: "x-bugsquasher://S/Bug/p3", version: 3)])
        for reply in [
            SubscribeReply(event: "save", token: 42, save: save),
            SubscribeReply(event: "subscribed", subscription: "ID", token: 0),
            SubscribeReply(event: "resync", token: 9, resyncFrom: 9),
        ] {
            let message = try VarlinkReply.encode(reply, continues: true)
            // The envelope and the parameters, as a generic JSON reader sees them.
            let envelope = try JSONDecoder().decode([String: JSONValue].self, from: message)
            #expect(envelope["continues"] == .bool(true))
            let decoded = try JSONDecoder().decode(
                SubscribeReply.self, from: JSONEncoder().encode(envelope["parameters"]))
            #expect(
                decoded.event == reply.event && decoded.token == reply.token && decoded.save == reply.save
                    && decoded.subscription == reply.subscription && decoded.resyncFrom == reply.resyncFrom)
            // The fast reader reads it back, through the reply envelope.
            let parsed = try VarlinkReply(message: message)
            #expect(parsed.continues)
            let back = try parsed.parameters(SubscribeReply.self)
            #expect(back.save == reply.save && back.event == reply.event && back.resyncFrom == reply.resyncFrom)
            // And in one walk, as a feed reads it.
            let once = try VarlinkReply.decode(SubscribeReply.self, from: message)
            #expect(
                once.continues && once.parameters.save == reply.save && once.parameters.event == reply.event
                    && once.parameters.resyncFrom == reply.resyncFrom)
        }
    }

    @Test("an object's values keep their order, hold each name once, and compare in any order")
    func wireValues() throws {
        let read = try JSONReader.read(Data(#"{"b":1,"a":"x","c":null,"a":"y"}"#.utf8)) {
            try WireValues(reading: &$0)
        }
        // A repeated name keeps its last value, in its first place.
        #expect(read.fields.map(\.name) == ["b", "a", "c"])
        #expect(read["a"] == .string("y") && read["c"] == .null && read["d"] == nil)
        #expect(read.value(named: "c", expectedAt: 2) == .null)
        #expect(read.value(named: "b", expectedAt: 2) == .int(1))
        #expect(read.value(named: "b", expectedAt: 99) == .int(1))
        let reordered: WireValues = ["c": .null, "a": .string("y"), "b": .int(1)]
        #expect(read == reordered && read.hashValue == reordered.hashValue)
        #expect(read != ["a": .string("y"), "b": .int(1)])
        #expect(read != ["a": .string("z"), "b": .int(1), "c": .null])
        // Names of one length and first byte (one bit of the reader's filter) stay apart.
        let alike = try JSONReader.read(Data(#"{"ab":1,"ac":2,"ab":3}"#.utf8)) { try WireValues(reading: &$0) }
        #expect(alike.fields.map(\.name) == ["ab", "ac"] && alike["ab"] == .int(3) && alike["ac"] == .int(2))
        // Codable and the fast writer write the same object.
        var writer = JSONWriter()
        read.write(to: &writer)
        let written = try JSONDecoder().decode(WireValues.self, from: Data(writer.bytes))
        #expect(written == read && written.fields.count == 3)
        #expect(try JSONDecoder().decode(WireValues.self, from: JSONEncoder().encode(read)) == read)
        var edited = read
        edited["a"] = nil
        edited["d"] = .bool(true)
        #expect(edited.fields.map(\.name) == ["b", "c", "d"])
    }

    @Test("a row is written in the model's order and read back from values in any order")
    func rowValues() throws {
        let model = try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Bug", attributes: [.attribute("title", .string), .attribute("points", .int64)],
                relationships: [.toOne("project", "Project", inverse: "bugs")]),
            EntityDescription(
                name: "Project", attributes: [.attribute("name", .string)],
                relationships: [.toMany("bugs", "Bug", inverse: "project")]),
        ])
        let coding = WireCoding(model: model)
        let bug = try #require(model.entity(named: "Bug"))
        let project = ObjectID(store: "S", entity: "Project", primaryKey: 7)
        let row = RowSnapshot(version: 3, attributes: [.string("crash"), .int64(5)], toOne: [project])
        let values = coding.encode(row, entity: bug)
        #expect(values.fields.map(\.name) == ["title", "points", "project"])
        #expect(try coding.decodeRow(values, version: 3, entity: bug, storeIdentifier: "S") == row)
        let shuffled: WireValues = [
            "project": .string(project.uriString), "points": .int(5), "title": .string("crash"),
        ]
        #expect(try coding.decodeRow(shuffled, version: 3, entity: bug) == row)
        // Missing values are null; a to-one that is no ID URI is refused, naming it.
        let sparse = try coding.decodeRow(["points": .int(5)], version: 3, entity: bug)
        #expect(sparse.attributes == [.null, .int64(5)] && sparse.toOne == [nil])
        #expect(throws: GraphError.self) {
            try coding.decodeRow(["project": .string("Project 7")], version: 3, entity: bug)
        }
    }

    @Test("upload chunks are read however split; a bad length or trailing bytes are refused")
    func uploadFraming() throws {
        let file = Array("line one\nline two\n".utf8) + [0, 1, 2]
        let framed =
            UploadFraming.header(5) + file[..<5] + UploadFraming.header(file.count - 5) + file[5...]
            + UploadFraming.header(0)
        for split in 0...framed.count {
            var framing = UploadFraming()
            let first = try framed[..<split].withUnsafeBytes { try framing.payload(of: $0) }
            #expect(!framing.ended || split == framed.count)
            let second = try framed[split...].withUnsafeBytes { try framing.payload(of: $0) }
            #expect(first + second == file, "split at \(split)")
            #expect(framing.ended && framing.payloadBytes == Int64(file.count))
        }
        var tooLong = UploadFraming()
        #expect(throws: UploadFramingError.chunkTooLong(0x7B22_6D65)) {
            try Array(#"{"method":"#.utf8).withUnsafeBytes { try tooLong.payload(of: $0) }
        }
        var afterEnd = UploadFraming()
        #expect(throws: UploadFramingError.bytesAfterEnd) {
            try (UploadFraming.header(0) + [1]).withUnsafeBytes { try afterEnd.payload(of: $0) }
        }
    }
}
