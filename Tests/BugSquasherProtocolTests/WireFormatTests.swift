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
