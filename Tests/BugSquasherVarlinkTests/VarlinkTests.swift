import BugSquasherProtocol
import BugSquasherVarlink
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import BugSquasherTransport

@Suite("Varlink")
struct VarlinkTests {
    @Test("frames split on NUL, across reads, and refuse oversized messages before buffering them")
    func framing() throws {
        var decoder = VarlinkFrameDecoder(maximumMessageSize: 16)
        var buffer = ByteBuffer(string: "{\"a\":1}\0{\"b\"")
        let first = try decoder.decode(buffer: &buffer)
        #expect(first.map { String(buffer: $0) } == "{\"a\":1}")
        #expect(try decoder.decode(buffer: &buffer) == nil)
        buffer.writeString(":2}\0")
        #expect(try decoder.decode(buffer: &buffer).map { String(buffer: $0) } == "{\"b\":2}")
        var big = ByteBuffer(repeating: 0x41, count: 17)
        #expect(throws: VarlinkFramingError.messageTooLarge(limit: 16)) { try decoder.decode(buffer: &big) }
    }

    /// They give the bytes back when a message completes or a decoder goes away.
    @Test("decoders sharing a budget hold at most its bytes of incomplete messages")
    func incomingBudget() throws {
        let budget = IncomingMessageBudget(limit: 100)
        var first = VarlinkServerDecoder(maximumMessageSize: 1000, budget: budget)
        var second: VarlinkServerDecoder? = VarlinkServerDecoder(maximumMessageSize: 1000, budget: budget)
        var a = ByteBuffer(string: #"{"method":"a.b.C","parameters":{"x":""# + String(repeating: "x", count: 30))
        #expect(try first.decode(buffer: &a) == nil)
        #expect(budget.current == a.readableBytes)
        var b = ByteBuffer(string: String(repeating: "y", count: 50))
        #expect(throws: VarlinkFramingError.incomingBudgetExceeded(limit: 100)) { try second!.decode(buffer: &b) }
        #expect(budget.current == a.readableBytes, "the refused decoder holds nothing")
        a.writeString(#""}}"# + "\0")
        guard case .call? = try first.decode(buffer: &a) else {
            Issue.record("no call")
            return
        }
        #expect(budget.current == 0)
        var c = ByteBuffer(string: String(repeating: "z", count: 90))
        second = VarlinkServerDecoder(maximumMessageSize: 1000, budget: budget)
        #expect(try second!.decode(buffer: &c) == nil)
        #expect(budget.current == 90)
        second = nil
        #expect(budget.current == 0)
    }

    /// It holds nothing.
    @Test("a server message past the limit is reported once, and nothing after it is read")
    func serverMessageTooLarge() throws {
        let budget = IncomingMessageBudget(limit: 10_000)
        var decoder = VarlinkServerDecoder(maximumMessageSize: 100, budget: budget)
        var buffer = ByteBuffer(string: #"{"method":"a.b.C","parameters":{"x":""# + String(repeating: "x", count: 40))
        #expect(try decoder.decode(buffer: &buffer) == nil)
        buffer.writeString(String(repeating: "x", count: 40))
        guard case .tooLarge(let limit)? = try decoder.decode(buffer: &buffer) else {
            Issue.record("not refused as too large")
            return
        }
        #expect(limit == 100)
        #expect(budget.current == 0, "the refused message holds none of the budget")
        #expect(buffer.readableBytes == 0)
        var after = ByteBuffer(string: #"{"method":"a.b.C"}"# + "\0")
        #expect(try decoder.decode(buffer: &after) == nil, "a call after the refused message was read")
        // squasherd's answer to it (the generic server takes it from its owner): the same on the wire as ever.
        #expect(VarlinkError.messageTooLarge(limit: 100).parameters["limit"] == .int(100))
        #expect(VarlinkError.messageTooLarge(limit: 100).name == "io.bugsquasher.MessageTooLarge")
    }

    /// In one task per event loop; outside a fan-out they are written at once.
    @Test("saves written during a fan-out reach each connection when the fan-out ends")
    func writeBatch() throws {
        let loop = EmbeddedEventLoop()
        let channels = [EmbeddedChannel(loop: loop), EmbeddedChannel(loop: loop)]
        for channel in channels { try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait() }
        let repliers = channels.map {
            ChannelReplier(outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>.makeTestingWriter().0, channel: $0)
        }
        let written = { (channel: EmbeddedChannel) in
            try channel.readOutbound(as: ByteBuffer.self).map { String(buffer: $0) }
        }
        try ChannelWriteBatch.collecting {
            #expect(repliers[0].sendNow(continuing: Data("first".utf8)))
            #expect(repliers[1].sendNow(continuing: Data("second".utf8)))
            #expect(repliers[0].sendNow(continuing: Data("third".utf8)))
            loop.run()
            let early = try written(channels[0])
            #expect(early == nil, "handed to the event loop before the fan-out ended")
        }
        #expect(ChannelWriteBatch.current == nil)
        loop.run()
        #expect(try written(channels[0]) == "first\0")
        #expect(try written(channels[0]) == "third\0")
        #expect(try written(channels[1]) == "second\0")
        // Outside a fan-out, a write is handed over at once.
        #expect(repliers[1].sendNow(continuing: Data("alone".utf8)))
        loop.run()
        #expect(try written(channels[1]) == "alone\0")
        // A write through a collector whose fan-out has ended (a task that inherited it and
        // outlived it) is not held, where it would never be handed over, but written at once.
        var late: ChannelWriteBatch.Collector?
        ChannelWriteBatch.collecting { late = ChannelWriteBatch.current }
        let ended = try #require(late)
        ChannelWriteBatch.$current.withValue(ended) {
            #expect(repliers[0].sendNow(continuing: Data("late".utf8)))
        }
        loop.run()
        #expect(try written(channels[0]) == "late\0")
        for channel in channels { _ = try channel.finish() }
    }

    @Test("after an upgrade call, a connection reads raw bytes, even within the same read")
    func upgradeDecoding() throws {
        var decoder = VarlinkServerDecoder(maximumMessageSize: 1024)
        // A plain call, then one with upgrade and, in the same read, bytes with NULs in them.
        var buffer = ByteBuffer(
            string: #"{"method":"a.b.C"}"# + "\0" + #"{"method":"a.b.Upload","upgrade":true}"# + "\0")
        buffer.writeBytes([0, 0, 0, 3, 0x41, 0, 0x42])
        guard case .call(let plain)? = try decoder.decode(buffer: &buffer) else {
            Issue.record("no call")
            return
        }
        #expect(plain.method == "a.b.C" && !plain.upgrade)
        guard case .call(let upgrade)? = try decoder.decode(buffer: &buffer) else {
            Issue.record("no upgrade call")
            return
        }
        #expect(upgrade.upgrade)
        guard case .raw(let raw)? = try decoder.decode(buffer: &buffer) else {
            Issue.record("no raw bytes")
            return
        }
        #expect(Array(raw.readableBytesView) == [0, 0, 0, 3, 0x41, 0, 0x42])
        #expect(try decoder.decode(buffer: &buffer) == nil)
        buffer.writeString(#"{"method":"a.b.C"}"# + "\0")
        guard case .raw(let later)? = try decoder.decode(buffer: &buffer) else {
            Issue.record("a message after the upgrade was decoded as a call")
            return
        }
        #expect(later.readableBytes == 19)

        // Something that is not a call ends the reading: nothing after it is decoded.
        var broken = VarlinkServerDecoder(maximumMessageSize: 1024)
        var garbage = ByteBuffer(string: "[1,2]\0" + #"{"method":"a.b.C"}"# + "\0")
        guard case .malformed(let error)? = try broken.decode(buffer: &garbage) else {
            Issue.record("not malformed")
            return
        }
        #expect(error == .invalidParameter("method"))
        #expect(try broken.decode(buffer: &garbage) == nil)
        // The error names the parameter at fault, which the server answers with.
        var twice = VarlinkServerDecoder(maximumMessageSize: 1024)
        var duplicate = ByteBuffer(string: #"{"method":"a.b.C","parameters":{"job":"1","job":"2"}}"# + "\0")
        guard case .malformed(let named)? = try twice.decode(buffer: &duplicate) else {
            Issue.record("a key twice was taken")
            return
        }
        #expect(named == .invalidParameter("job"))
    }

    @Test("calls decode their parameters and name the missing or mistyped one")
    func callParameters() throws {
        struct Parameters: Decodable {
            var entity: String
            var limit: Int?
        }
        let call = try VarlinkCall(
            message: Data(#"{"method":"io.x.Store.Fetch","parameters":{"entity":"Bug"},"more":true}"#.utf8))
        #expect(call.interface == "io.x.Store")
        #expect(call.methodName == "Fetch")
        #expect(call.more)
        #expect(try call.parameters(Parameters.self).entity == "Bug")
        #expect(call.parameterNames == ["entity"])
        // A flag of another type is refused naming the flag, not the method.
        #expect(throws: VarlinkError.invalidParameter("more")) {
            try VarlinkCall(message: Data(#"{"method":"io.x.Store.Fetch","more":"yes"}"#.utf8))
        }
        let missing = try VarlinkCall(message: Data(#"{"method":"io.x.Store.Fetch"}"#.utf8))
        #expect(throws: VarlinkError.invalidParameter("entity")) { try missing.parameters(Parameters.self) }
        let wrong = try VarlinkCall(message: Data(#"{"method":"io.x.Store.Fetch","parameters":{"entity":3}}"#.utf8))
        #expect(throws: VarlinkError.invalidParameter("entity")) { try wrong.parameters(Parameters.self) }
        #expect(throws: VarlinkError.self) { try VarlinkCall(message: Data("[1,2]".utf8)) }
    }

    /// Collects replies in memory.
    final class Recorder: VarlinkReplier, Sendable {
        let replies = Mutex<[String]>([])
        func send(_ message: consuming Data, continues: Bool) async throws {
            let text = String(decoding: message, as: UTF8.self)
            replies.withLock { $0.append(text) }
        }
        func sendNow(continuing message: Data) -> Bool { false }
    }

    struct Echo: VarlinkInterface {
        let name = "io.example.Echo"
        let writes: Bool
        struct Text: Codable { var text: String }
        struct Failure: Error {}
        func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
            if call.methodName == "Fail" { throw Failure() }
            guard call.methodName == "Say" else { throw VarlinkError.methodNotFound(call.method) }
            try await replier.reply(try call.parameters(Text.self))
        }
    }

    /// A burst is a fall of at least 1,000 from the peak, to half of it or less, since it last said so;
    /// connections still closing after it are a burst too.
    @Test("the connection limit reports bursts of closed connections")
    func connectionLimitNoticesClosedBursts() {
        let limit = ConnectionLimit(maximum: 10_000)
        let logger = Logger(label: "test")
        for _ in 0..<3_000 { #expect(limit.acquire(socket: "read", writer: false, advice: "", logger: logger)) }
        #expect(!limit.manyClosedSinceLastAsked())
        for _ in 0..<1_400 { limit.release() }
        // 1,400 closed, but 1,600 of the 3,000 are still open.
        #expect(!limit.manyClosedSinceLastAsked())
        for _ in 0..<100 { limit.release() }
        #expect(limit.manyClosedSinceLastAsked())
        // Measured from the 1,500 open when it said so.
        #expect(!limit.manyClosedSinceLastAsked())
        for _ in 0..<900 { limit.release() }
        #expect(!limit.manyClosedSinceLastAsked(), "only 900 closed since")
        for _ in 0..<100 { limit.release() }
        #expect(limit.manyClosedSinceLastAsked())
        // A burst met half closed: once it said so, it says so again while more close.
        for _ in 0..<3_500 { #expect(limit.acquire(socket: "read", writer: false, advice: "", logger: logger)) }
        for _ in 0..<3_000 { limit.release() }
        #expect(limit.manyClosedSinceLastAsked())
        for _ in 0..<500 { limit.release() }
        #expect(limit.manyClosedSinceLastAsked(), "500 more closed after the burst")
        #expect(!limit.manyClosedSinceLastAsked(), "none closed since")
    }

    @Test("the service answers org.varlink.service, dispatches, maps errors and guards writes")
    func service() async throws {
        let service = VarlinkService(
            vendor: "V", product: "P", version: "1", url: "u", interfaces: [Echo(writes: true)],
            internalError: { VarlinkError("io.example.InternalError", ["message": .string("\($0)")]) })
        let read = VarlinkCallContext(socket: "read", mayWrite: false, logger: Logger(label: "test"))
        let write = VarlinkCallContext(socket: "write", mayWrite: true, logger: Logger(label: "test"))
        func run(_ json: String, _ context: VarlinkCallContext) async throws -> String {
            let recorder = Recorder()
            try await service.handle(try VarlinkCall(message: Data(json.utf8)), context: context, replier: recorder)
            return recorder.replies.withLock { $0.joined(separator: "|") }
        }
        #expect(
            try await run(#"{"method":"org.varlink.service.GetInfo"}"#, write).contains(
                #""interfaces":["org.varlink.service","io.example.Echo"]"#))
        // A read-only socket lists only what it serves.
        #expect(
            try await run(#"{"method":"org.varlink.service.GetInfo"}"#, read).contains(
                #""interfaces":["org.varlink.service"]"#))
        #expect(
            try await run(#"{"method":"io.example.Echo.Say","parameters":{"text":"hi"}}"#, write)
                == #"{"parameters":{"text":"hi"}}"#)
        #expect(
            try await run(#"{"method":"io.example.Echo.Say","parameters":{"text":"hi"}}"#, read).contains(
                "PermissionDenied"))
        #expect(try await run(#"{"method":"io.example.Echo.Shout"}"#, write).contains("MethodNotFound"))
        // Anything else a handler throws is answered with the error its owner chose for it.
        #expect(try await run(#"{"method":"io.example.Echo.Fail"}"#, write).contains(#""io.example.InternalError""#))
        #expect(try await run(#"{"method":"io.example.Nope.X"}"#, write).contains("InterfaceNotFound"))
        #expect(
            try await run(#"{"method":"io.example.Echo.Say","parameters":{"text":"hi"},"oneway":true}"#, write) == "")
        let description = try await run(
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"org.varlink.service"}}"#,
            read)
        #expect(description.contains("interface org.varlink.service"))
        // A parameter the method does not declare is refused, naming it, rather than ignored.
        let misspelt = try await run(
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"org.varlink.service","interfaces":[]}}"#,
            read)
        #expect(
            misspelt == #"{"error":"org.varlink.service.InvalidParameter","parameters":{"parameter":"interfaces"}}"#
                || misspelt
                    == #"{"parameters":{"parameter":"interfaces"},"error":"org.varlink.service.InvalidParameter"}"#,
            "\(misspelt)")
    }

    @Test("method parameters are read from the IDL, with nested types and comments")
    func declaredParameters() throws {
        let store = InterfaceDefinitions.methodParameters(
            in: try #require(InterfaceDefinitions.text(of: "io.bugsquasher.Store")))
        #expect(store["Fetch"] == ["entity", "predicate", "sort", "limit", "offset", "result"])
        #expect(store["Info"] == [])
        #expect(store["Values"] == ["ids"])
        let changes = InterfaceDefinitions.methodParameters(
            in: try #require(InterfaceDefinitions.text(of: "io.bugsquasher.Changes")))
        #expect(
            changes["Subscribe"] == [
                "since", "registeredOnly", "includeValues", "register", "versions", "idRuns", "insertsOf",
                "insertsMatching",
            ])
        #expect(changes["History"] == ["after", "limit"])
        let nested = InterfaceDefinitions.methodParameters(
            in: """
                interface io.example.Nested
                # method Commented(x: int) -> ()
                method Deep(
                  # a comment, with a comma
                  outer: (inner: int, other: ?[]string),
                  plain: string # trailing
                ) -> (result: (a: int, b: int))
                method Bare() -> ()
                """)
        #expect(nested == ["Deep": ["outer", "plain"], "Bare": []])
    }

    @Test("every shipped interface definition names itself and is served")
    func definitions() {
        for name in [
            "io.bugsquasher.Changes", "io.bugsquasher.Store", "io.bugsquasher.Jobs", "io.bugsquasher.Import",
            "org.varlink.service",
        ] {
            #expect(InterfaceDefinitions.text(of: name)?.contains("interface \(name)\n") == true, "\(name)")
        }
    }
}

extension VarlinkTests {
    struct Number: Codable { var n: Int }
    struct NoParameters: Codable {}

    /// `Run` streams 2, then 1, then waits for `release` before it returns; `Ping` answers 0;
    /// `Where` answers 1 when its handler runs on `loop`'s thread, 0 elsewhere.
    struct Countdown: VarlinkInterface {
        let name = "io.example.Countdown"
        let writes = false
        let release: AsyncStream<Void>
        var loop: (any EventLoop)?
        func streams(_ method: String) -> Bool { method == "Run" }
        func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
            switch call.methodName {
            case "Run":
                try await replier.reply(Number(n: 2), continues: true)
                try await replier.reply(Number(n: 1))
                for await _ in release {}
            case "Ping":
                try await replier.reply(Number(n: 0))
            case "Where":
                try await replier.reply(Number(n: loop?.inEventLoop == true ? 1 : 0))
            default:
                throw VarlinkError.methodNotFound(call.method)
            }
        }
    }

    /// Serves `Countdown` on a socket in a fresh directory, and runs `client` with its path on a
    /// thread of its own, off the pool serving the daemon side.
    /// With `thread`, the server is bound to its loop and serves its connections on it.
    func withCountdownServer<R: Sendable>(
        release: AsyncStream<Void>, on thread: EventLoopExecutor? = nil,
        client: @escaping @Sendable (String) throws -> R
    ) async throws -> R {
        let directory = NSTemporaryDirectory() + "varlink-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/test.sock"
        let service = VarlinkService(
            vendor: "V", product: "P", version: "1", url: "u",
            interfaces: [Countdown(release: release, loop: thread?.loop)],
            internalError: { VarlinkError("io.example.InternalError", ["message": .string("\($0)")]) })
        let server = VarlinkServer(
            name: "read", address: .path(path, permissions: 0o600), mayWrite: false, service: service,
            group: thread?.loop, executor: thread, logger: Logger(label: "test"))
        return try await withThrowingTaskGroup { group in
            let (bound, boundSignal) = AsyncStream.makeStream(of: Void.self)
            group.addTask { try await server.run(onBound: { boundSignal.finish() }) }
            for await _ in bound {}
            defer { group.cancelAll() }
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<R, any Error>) in
                Thread.detachNewThread { continuation.resume(with: Result { try client(path) }) }
            }
        }
    }

    @Test("a call after a streaming call's last reply is served while the handler ends")
    func callAfterStreamingCall() async throws {
        let (release, releaser) = AsyncStream.makeStream(of: Void.self)
        defer { releaser.finish() }
        let numbers = try await withCountdownServer(release: release) { path in
            let client = try BlockingVarlinkClient(path: path)
            var numbers: [Int] = []
            try client.stream("io.example.Countdown.Run", NoParameters()) { reply in
                numbers.append(try reply.parameters(Number.self).n)
                return true
            }
            // Run's handler has not returned yet: it waits for `release`.
            numbers.append(try client.call("io.example.Countdown.Ping", NoParameters(), as: Number.self).n)
            return numbers
        }
        #expect(numbers == [2, 1, 0])
    }

    @Test("a server on an EventLoopExecutor reads, handles and answers a call on that one thread")
    func servedOnItsOwnThread() async throws {
        let (release, releaser) = AsyncStream.makeStream(of: Void.self)
        defer { releaser.finish() }
        let thread = EventLoopExecutor()
        let answers = try await withCountdownServer(release: release, on: thread) { path in
            let client = try BlockingVarlinkClient(path: path)
            return try (0..<3).map { _ in
                try client.call("io.example.Countdown.Where", NoParameters(), as: Number.self).n
            }
        }
        #expect(answers == [1, 1, 1])
        try await thread.shutdown()
    }

    /// In turn with the calls pipelined behind it.
    @Test("a call with more to a non-streaming method is answered once, in turn")
    func moreOnAMethodThatDoesNotStream() async throws {
        let (release, releaser) = AsyncStream.makeStream(of: Void.self)
        defer { releaser.finish() }
        let replies = try await withCountdownServer(release: release) { path in
            // 60 s: a bound for a broken server. In a full run the server's tasks can wait a long
            // while for a pool thread (the store tests block theirs on I/O); 10 s failed once.
            let fd = try BlockingVarlinkClient.connect(path, timeout: .seconds(60))
            defer { close(fd) }
            let calls =
                #"{"method":"io.example.Countdown.Ping","more":true}\#0{"method":"io.example.Countdown.Ping"}\#0"#
            try Array(calls.utf8).withUnsafeBytes {
                try BlockingVarlinkClient.sendAll(fd, $0, path: path, timeout: .seconds(60))
            }
            // Both replies, then the end of the connection once this side has shut down its own.
            shutdown(fd, CInt(SHUT_WR))
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(fd, &chunk, chunk.count)
                guard count > 0 else { break }
                received += chunk[..<count]
            }
            return received.split(separator: 0, omittingEmptySubsequences: false).map {
                String(decoding: $0, as: UTF8.self)
            }
        }
        #expect(replies == [#"{"parameters":{"n":0}}"#, #"{"parameters":{"n":0}}"#, ""])
    }
}
