import BugSquasherJSON
import BugSquasherProtocol
import BugSquasherVarlink
import Foundation
import Testing

/// The hand-written JSON paths must read and write exactly what the Codable ones do.
@Suite("Streaming JSON for Varlink messages")
struct JSONStreamingTests {
    static let awkward: JSONValue = .object([
        "quote\"and\\backslash": .string("line\nbreak\ttab \u{01} \u{1F41B} é \"q\" \\"),
        "int": .int(-9_223_372_036_854_775_807),
        "double": .double(0.1),
        "big": .double(1.5e300),
        "small": .double(-2.5e-8),
        "bool": .bool(false),
        "null": .null,
        "array": .array([.int(1), .string(""), .array([]), .object([:])]),
    ])

    func read<T: JSONReadable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T {
        try JSONReader.read(Data(bytes)) { try T(reading: &$0) }
    }

    @Test("a JSONValue written by JSONWriter reads back equal, and JSONDecoder reads the same")
    func valueRoundTrip() throws {
        var writer = JSONWriter()
        Self.awkward.write(to: &writer)
        #expect(try read(JSONValue.self, writer.bytes) == Self.awkward)
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(writer.bytes)) == Self.awkward)
        // And what JSONEncoder writes, the reader reads.
        #expect(try read(JSONValue.self, Array(try JSONEncoder().encode(Self.awkward))) == Self.awkward)
    }

    @Test("calls: flags and parameters are read; bad parameters name the field")
    func calls() throws {
        let call = try VarlinkCall(
            message: Data(
                #"{"parameters":{"id":"x","values":{"status":"Open","n":2}},"method":"io.bugsquasher.Import.Update","more":false}"#
                    .utf8))
        #expect(call.method == "io.bugsquasher.Import.Update" && !call.more && !call.oneway)
        let parameters = try call.parameters(UpdateParameters.self)
        #expect(parameters.id == "x" && parameters.values == ["status": .string("Open"), "n": .int(2)])
        for (message, field) in [
            (#"{"method":"m","parameters":{"values":{}}}"#, "id"),
            (#"{"method":"m","parameters":{"id":1,"values":{}}}"#, "id"),
            (#"{"method":"m","parameters":{"id":"x","values":[1]}}"#, "values"),
            (#"{"method":"m","parameters":"no"}"#, "parameters"),
        ] {
            #expect(throws: VarlinkError.invalidParameter(field)) {
                try VarlinkCall(message: Data(message.utf8)).parameters(UpdateParameters.self)
            }
        }
        // A number no integer holds names its parameter too.
        for number in ["1.5", "1e30", "99999999999999999999", "-99999999999999999999"] {
            let message = #"{"method":"m","parameters":{"entity":"Bug","offset":0,"limit":"# + number + "}}"
            #expect(throws: VarlinkError.invalidParameter("limit")) {
                try VarlinkCall(message: Data(message.utf8)).parameters(FetchParameters.self)
            }
        }
        #expect(throws: VarlinkError.invalidParameter("more")) {
            try VarlinkCall(message: Data(#"{"method":"m","more":"yes"}"#.utf8))
        }
        for message in [
            #"{"more":true}"#, #"{"method":1}"#, #"["method"]"#, #"{"method":"m"} trailing"#,
            #"{"method":"m","method":"n"}"#, #"{"method":"m\ud800"}"#,
        ] {
            #expect(throws: VarlinkError.invalidParameter("method")) { try VarlinkCall(message: Data(message.utf8)) }
        }
        // What JSON allows but readers disagree on is refused as the call arrives, naming the
        // parameter it is in: a key twice (at any depth: which one counts differs from reader
        // to reader), a number no Double holds, a lone surrogate. Each of these was accepted
        // before (the last key won) or named `method`.
        for (parameters, field) in [
            (#"{"entity":"Bug","entity":"Project"}"#, "entity"),
            (#"{"id":"x","values":{"title":"a","title":"b"}}"#, "values"),
            (#"{"id":"x","values":{"n":[{"a":1,"a":2}]}}"#, "values"),
            (#"{"entity":"Bug","limit":1e400}"#, "limit"),
            (#"{"entity":"Bug","predicate":"title == \"\udc00\""}"#, "predicate"),
            (#"[{"a":1,"a":2}]"#, "parameters"),
        ] {
            let message = #"{"method":"m","parameters":"# + parameters + "}"
            #expect(throws: VarlinkError.invalidParameter(field), "\(parameters)") {
                try VarlinkCall(message: Data(message.utf8))
            }
        }
        // Keys in two Unicode forms of one text are one key to a Swift dictionary, which holds
        // the values the daemon reads: refused as twice too, not one silently dropped.
        #expect(throws: VarlinkError.invalidParameter("values")) {
            try VarlinkCall(
                message: Data(#"{"method":"m","parameters":{"id":"x","values":{"caf\u00e9":1,"cafe\u0301":2}}}"#.utf8))
        }
    }

    @Test("an error reply keeps its parameters, before or after the error name")
    func errorReplies() throws {
        for message in [
            #"{"error":"io.x.Failed","parameters":{"why":"disk"}}"#,
            #"{"parameters":{"why":"disk"},"error":"io.x.Failed"}"#,
        ] {
            let reply = try VarlinkReply(message: Data(message.utf8))
            #expect(reply.error == VarlinkError("io.x.Failed", ["why": .string("disk")]))
            // Read in one walk as a reply of another type, it is thrown as that error.
            #expect(throws: VarlinkError("io.x.Failed", ["why": .string("disk")])) {
                try VarlinkReply.decode(SubscribeReply.self, from: Data(message.utf8))
            }
        }
        // A last reply without parameters reads as `{}`; one whose parameters are not the type's
        // is refused, naming the field.
        let last = try VarlinkReply.decode(JSONValue.self, from: Data(#"{"continues":false}"#.utf8))
        #expect(last.parameters == .object([:]) && !last.continues)
        #expect(throws: (any Error).self) {
            try VarlinkReply.decode(
                SubscribeReply.self, from: Data(#"{"parameters":{"event":1},"continues":true}"#.utf8))
        }
    }
}
