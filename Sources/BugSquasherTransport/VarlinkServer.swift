public import BugSquasherVarlink
import Foundation
public import Logging
public import NIOCore
import NIOPosix
import Synchronization

/// Where a server listens: a path it binds itself, or a socket handed over by systemd.
public struct VarlinkListenAddress: Sendable, CustomStringConvertible {
    enum Kind: Sendable {
        case path(String, permissions: Int)
        case descriptor(CInt)
    }

    let kind: Kind

    /// The path the server binds; `nil` for an inherited socket.
    public var path: String? {
        if case .path(let path, _) = kind { return path }
        return nil
    }

    /// A Unix socket the server binds at `path` (replacing a stale socket file) and `chmod`s to
    /// `permissions` — the permissions decide who may connect.
    public static func path(_ path: String, permissions: Int) -> Self {
        .init(kind: .path(path, permissions: permissions))
    }

    /// An already bound and listening socket, such as one passed by systemd socket activation.
    public static func descriptor(_ fd: CInt) -> Self { .init(kind: .descriptor(fd)) }

    public var description: String {
        switch kind {
        case .path(let path, let permissions): "\(path) (mode \(String(permissions, radix: 8)))"
        case .descriptor(let fd): "fd \(fd)"
        }
    }
}

/// Serves a ``VarlinkService`` on one Unix stream socket: one task per connection, calls on a
/// connection handled in order, a streaming call cancelled when its peer goes away. One
/// connection's error — malformed JSON, an oversized message, a protocol violation — closes
/// that connection only. After a call with `upgrade: true` has been answered, the rest of the
/// connection goes to the ``VarlinkUpgradeHandler`` the call installed (or the connection is
/// closed when it installed none).
///
/// ```swift
/// let server = VarlinkServer(name: "read", address: .path("/run/example/example.sock", permissions: 0o666),
///                            mayWrite: false, service: service, logger: logger)
/// try await server.run(onBound: { print("listening") })
/// ```
public final class VarlinkServer: Sendable {
    /// The socket's name in logs and call contexts (`read`, `write`).
    public let name: String
    /// Where it listens.
    public let address: VarlinkListenAddress
    /// Whether calls on this socket may write.
    public let mayWrite: Bool
    /// The longest message accepted; a longer one closes the connection.
    public let maximumMessageSize: Int
    /// The connections this server shares with others; `nil` for no limit.
    public let connectionLimit: ConnectionLimit?
    /// The bytes of incomplete messages this server shares with others; `nil` for no limit
    /// but the message size.
    public let incomingBudget: IncomingMessageBudget?
    /// The bytes of large replies not yet written that this server shares with others; `nil`
    /// for no limit.
    public let outgoingBudget: OutgoingReplyBudget?
    /// What it answers a message past ``maximumMessageSize`` with, and the advice of its warnings.
    public let wording: VarlinkServerWording
    private let budgetWarnings = WarningThrottle()
    private let outgoingWarnings = WarningThrottle()
    private let sizeWarnings = WarningThrottle()
    /// Where connections are served; `nil` for Swift's global concurrent executor.
    public let executor: (any TaskExecutor)?
    private let service: VarlinkService
    private let group: any EventLoopGroup
    private let logger: Logger
    private let connections = Atomic<Int>(0)

    /// Creates a server; nothing is bound until ``run(onBound:)``. Each connection's task —
    /// reading its calls, handling them, replying — runs on `executor` when one is given
    /// (as a task executor preference, which its streaming calls inherit). `wording` is what the
    /// server says of its limits, in its owner's terms (generic by default).
    public init(
        name: String, address: VarlinkListenAddress, mayWrite: Bool, service: VarlinkService,
        maximumMessageSize: Int = 8 * 1024 * 1024, connectionLimit: ConnectionLimit? = nil,
        incomingBudget: IncomingMessageBudget? = nil, outgoingBudget: OutgoingReplyBudget? = nil,
        wording: VarlinkServerWording = VarlinkServerWording(), group: (any EventLoopGroup)? = nil,
        executor: (any TaskExecutor)? = nil, logger: Logger
    ) {
        self.wording = wording
        self.executor = executor
        self.connectionLimit = connectionLimit
        self.incomingBudget = incomingBudget
        self.outgoingBudget = outgoingBudget
        self.name = name
        self.address = address
        self.mayWrite = mayWrite
        self.service = service
        self.maximumMessageSize = maximumMessageSize
        self.group = group ?? MultiThreadedEventLoopGroup.singleton
        var logger = logger
        logger[metadataKey: "socket"] = "\(name)"
        self.logger = logger
    }

    /// How many connections are open now.
    public var connectionCount: Int { connections.load(ordering: .relaxed) }

    /// Binds (or adopts) the socket, calls `onBound`, and serves until the task is cancelled.
    public func run(onBound: @Sendable () async -> Void = {}) async throws {
        let (maximumMessageSize, incomingBudget) = (self.maximumMessageSize, self.incomingBudget)
        let initializer: @Sendable (any Channel) -> EventLoopFuture<AcceptedConnection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(
                        VarlinkServerDecoder(maximumMessageSize: maximumMessageSize, budget: incomingBudget)))
                return AcceptedConnection(
                    try NIOAsyncChannel<VarlinkServerInbound, ByteBuffer>(wrappingChannelSynchronously: channel))
            }
        }
        let (name, logger, descriptorAdvice) = (self.name, self.logger, wording.descriptorLimitAdvice)
        let bootstrap = ServerBootstrap(group: group).serverChannelOption(.backlog, value: 512)
            // A client may shut down its sending side once its call is out (`socat`, `nc -N`,
            // a script's `shutdown(SHUT_WR)`) and still read the reply: the connection ends
            // once the calls read before the end of its input are answered.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptFailureLogger(socket: name, advice: descriptorAdvice, logger: logger))
                }
            }
        let server: NIOAsyncChannel<AcceptedConnection, Never>
        // The socket file this server created, removed when it stops if the path still names it.
        var created: (path: String, identity: [UInt64])?
        defer {
            if let created, Self.identity(created.path) == created.identity { unlink(created.path) }
        }
        switch address.kind {
        case .path(let path, let permissions):
            try Self.checkSocketPath(path)
            let directory = (path as NSString).deletingLastPathComponent
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw TransportError(
                    .cannotCreateDirectory,
                    "Cannot create the socket directory \(directory) (\((error as NSError).localizedDescription)).",
                    advice: "Create it, or choose another place for the socket.", path: directory)
            }
            // Bound here rather than by NIO, which removes whatever socket file the path names when
            // the server closes: a daemon stopping because its socket was replaced would remove
            // the replacement, the socket of another daemon that serves there now.
            let fd = try Self.bindListeningSocket(path)
            created = Self.identity(path).map { (path, $0) }
            server = try await bootstrap.bind(fd, childChannelInitializer: initializer)
            guard chmod(path, mode_t(permissions)) == 0 else {
                let reason = errno
                throw TransportError(
                    .listenFailed,
                    "Could not set the permissions of \(path) to \(String(permissions, radix: 8)): \(String(cString: strerror(reason))).",
                    path: path, systemError: reason)
            }
        case .descriptor(let fd):
            // Sockets handed over by a service manager may be blocking; NIO accepts until
            // EAGAIN, which a blocking socket would never return.
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
                let reason = errno
                throw TransportError(
                    .listenFailed,
                    "The socket passed as fd \(fd) cannot be used: \(String(cString: strerror(reason))).",
                    systemError: reason)
            }
            server = try await bootstrap.bind(fd, childChannelInitializer: initializer)
        }
        logger.info("listening", metadata: ["socket.address": "\(address)"])
        await onBound()
        try await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { inbound in
                for try await accepted in inbound {
                    let connection = accepted.take()
                    group.addTask(executorPreference: executor) { await self.serve(connection) }
                }
            }
        }
    }

    private func serve(_ connection: NIOAsyncChannel<VarlinkServerInbound, ByteBuffer>) async {
        if let connectionLimit {
            guard
                connectionLimit.acquire(
                    socket: name, writer: mayWrite, advice: wording.connectionLimitAdvice, logger: logger)
            else {
                try? await connection.executeThenClose { _, _ in }
                return
            }
        }
        defer { connectionLimit?.release() }
        connections.add(1, ordering: .relaxed)
        defer { connections.subtract(1, ordering: .relaxed) }
        let context = VarlinkCallContext(socket: name, mayWrite: mayWrite, logger: logger)
        let channel = connection.channel
        context.connection.onEnd { message in
            channel.eventLoop.execute {
                channel.writeAndFlush(ChannelReplier.terminated(message, allocator: channel.allocator)).whenComplete {
                    _ in
                    channel.close(promise: nil)
                }
            }
        }
        do {
            try await connection.executeThenClose { inbound, outbound in
                let replier = ChannelReplier(outbound: outbound, channel: connection.channel, budget: outgoingBudget) {
                    bytes, limit in
                    self.outgoingWarnings.warn(self.logger) { suppressed in
                        "Closed a connection instead of sending it a reply of \(bytes) bytes: the replies not yet read by their clients would have held more than \(limit) bytes\(suppressed). \(self.wording.outgoingBudgetAdvice)"
                    }
                }
                let machine = ConnectionState()
                var upgraded: (any VarlinkUpgradeHandler)?
                try await withThrowingDiscardingTaskGroup { group in
                    reading: for try await item in inbound {
                        switch (machine.received(Self.input(item, service: service)), item) {
                        case (.read, _):
                            continue
                        case (.replyMalformedThenClose, .malformed(let error)):
                            try? await replier.send(try VarlinkReply.encode(error), continues: false)
                            logger.debug("malformed message; closing the connection")
                        case (.replyTooLargeThenClose, .tooLarge(let limit)):
                            sizeWarnings.warn(logger) { suppressed in
                                "Closed a connection whose message grew past \(limit) bytes without its terminating NUL byte\(suppressed). \(wording.messageTooLargeAdvice)"
                            }
                            if let refusal = wording.messageTooLarge?(limit) {
                                try? await replier.send(try VarlinkReply.encode(refusal), continues: false)
                            }
                        case (.startStreaming(let number), .call(let call)):
                            await Self.keepLittleInFlight(connection.channel)
                            group.addTask {
                                defer { machine.streamEnded(number) }
                                let replier = StreamingReplier(base: replier, connection: machine, number: number)
                                try await self.service.handle(call, context: context, replier: replier)
                            }
                            continue
                        case (.handle, .call(let call)):
                            try await service.handle(call, context: context, replier: replier)
                            // After an upgrade, what follows goes to the handler the call installed.
                            if call.upgrade { upgraded = context.connection.takeUpgradeHandler() }
                            if machine.callHandled(handlerInstalled: upgraded != nil) == .read { continue }
                        case (.passToUpgradeHandler, .raw(let bytes)):
                            guard let handler = upgraded else { break }
                            do {
                                guard let last = try await handler.receive(bytes) else { continue }
                                try await replier.send(last, continues: false)
                            } catch is CancellationError {
                                throw CancellationError()
                            } catch let error as VarlinkPeerGone {
                                throw error
                            } catch {
                                try await replier.send(
                                    try service.errorReply(error, method: "upgraded connection", logger: logger),
                                    continues: false)
                            }
                            machine.upgradeEnded()
                        case (.close(.callDuringStreamingCall), _):
                            // Varlink allows no new call while a streaming call is running.
                            logger.debug("call during a streaming call; closing the connection")
                        case (.close, _), (.replyMalformedThenClose, _), (.replyTooLargeThenClose, _),
                            (.startStreaming, _), (.handle, _), (.passToUpgradeHandler, _):
                            break
                        }
                        break reading
                    }
                    group.cancelAll()
                }
            }
        } catch VarlinkFramingError.incomingBudgetExceeded(let limit) {
            budgetWarnings.warn(logger) { suppressed in
                "Closed a connection whose incomplete message would have taken the bytes held for incomplete messages past \(limit)\(suppressed). \(wording.incomingBudgetAdvice)"
            }
        } catch {
            logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
        await context.connection.close()
    }

    /// What a message read is, for the connection's state machine.
    private static func input(_ item: VarlinkServerInbound, service: VarlinkService)
        -> VarlinkConnectionStateMachine.Input
    {
        switch item {
        case .call(let call): .call(streams: service.streams(call), upgrade: call.upgrade)
        case .malformed: .malformed
        case .tooLarge: .tooLarge
        case .raw: .raw
        }
    }

    /// The kernel's send buffer of a connection that streams replies, before doubling for its
    /// bookkeeping (the kernel's default is about 208 KiB).
    static let streamingSendBuffer = 8 * 1024
    /// The bytes a streaming connection's channel buffers before its writer waits.
    static let streamingWriteWaterMark = ChannelOptions.Types.WriteBufferWaterMark(low: 1024, high: 2048)

    /// Makes a connection that streams replies buffer little: a reply written but not yet read
    /// should wait in the service (where a change feed coalesces what a slow reader has not
    /// taken yet), not in socket buffers. With the defaults, NIO's 64 KiB and the kernel's
    /// 208 KiB hold hundreds of small replies, each of which a slow reader then takes on its
    /// own, while the service's mailbox overflows behind them.
    static func keepLittleInFlight(_ channel: any Channel) async {
        // Best effort: a connection that refuses keeps the defaults and still works.
        try? await channel.setOption(.socketOption(.so_sndbuf), value: streamingSendBuffer).get()
        try? await channel.setOption(.writeBufferWaterMark, value: streamingWriteWaterMark).get()
    }

    /// The longest path a Unix socket address holds (`sun_path` less its terminating NUL).
    public static let maximumSocketPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Refuses a socket path the kernel cannot bind, one where a file that is not a socket would
    /// be replaced, or one a live process listens on (taking it over would cut that process's
    /// clients off), with what to do instead of NIO's bare error. ``run(onBound:)`` checks its
    /// own; a daemon checks them before it creates anything (a store file it would then leave).
    ///
    /// - Throws: ``TransportError`` with code ``TransportError/Code/pathTooLong``,
    ///   ``TransportError/Code/pathOccupied`` or ``TransportError/Code/addressInUse``.
    public static func checkSocketPath(_ path: String) throws {
        guard path.utf8.count <= maximumSocketPathBytes else { throw TransportError.pathTooLong(path) }
        var status = stat()
        guard lstat(path, &status) == 0 else { return }
        guard status.st_mode & S_IFMT == S_IFSOCK else {
            let kind = status.st_mode & S_IFMT == S_IFDIR ? "a directory" : "a file that is not a socket"
            throw TransportError(
                .pathOccupied, "\(path) is \(kind), where the socket would be created; it is not replaced.",
                advice: "Move it away, or choose another socket path.", path: path)
        }
        // A socket file left by a process that ended is replaced at bind; one a live process
        // listens on is not.
        if someoneListens(on: path) {
            throw TransportError(
                .addressInUse, "Another process is listening on \(path).",
                advice: "Stop it, or choose another socket path.", path: path)
        }
    }

    /// A non-blocking Unix stream socket bound to `path` and listening; a socket file left at
    /// `path` by a process that ended is replaced.
    static func bindListeningSocket(_ path: String) throws -> CInt {
        let fd = socket(
            AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else {
            let reason = errno
            throw TransportError(
                .listenFailed, "Cannot create a socket for \(path): \(String(cString: strerror(reason))).", path: path,
                systemError: reason)
        }
        do {
            var status = stat()
            if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK, unlink(path) != 0, errno != ENOENT {
                let reason = errno
                throw TransportError(
                    .listenFailed,
                    "Cannot replace the stale socket file \(path): \(String(cString: strerror(reason))).",
                    path: path, systemError: reason)
            }
            let bound = try withUnixAddress(path) { bind(fd, $0, $1) }
            guard bound == 0 else {
                let reason = errno
                throw TransportError(
                    .listenFailed, "Cannot bind the socket \(path): \(String(cString: strerror(reason))).", path: path,
                    systemError: reason)
            }
            guard listen(fd, 512) == 0 else {
                let reason = errno
                throw TransportError(
                    .listenFailed, "Cannot listen on the socket \(path): \(String(cString: strerror(reason))).",
                    path: path, systemError: reason)
            }
            return fd
        } catch {
            close(fd)
            throw error
        }
    }

    /// Which file a path names (device and inode), or `nil` when it names none.
    public static func identity(_ path: String) -> [UInt64]? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return [UInt64(status.st_dev), UInt64(status.st_ino)]
    }

    /// Whether a process accepts connections on the Unix socket at `path` (a connect succeeds);
    /// `false` for no file, or a socket file its listener left behind.
    static func someoneListens(on path: String) -> Bool {
        guard let fd = try? BlockingVarlinkClient.connect(path) else { return false }
        close(fd)
        return true
    }
}

/// A connection the server accepted, on its way to the task that serves it.
///
/// NIO traps when a `NIOAsyncChannel` goes away without `executeThenClose` having finished its
/// writer, and a connection accepted while the server stops can be dropped on the way from the
/// listening channel to the serving loop (apple/swift-nio#2813): a server then crashed on
/// SIGTERM under a stream of connections instead of exiting 0. One that was never taken is
/// finished and closed by a task of its own.
final class AcceptedConnection: Sendable {
    private let channel: NIOAsyncChannel<VarlinkServerInbound, ByteBuffer>
    private let taken = Atomic<Bool>(false)

    init(_ channel: NIOAsyncChannel<VarlinkServerInbound, ByteBuffer>) {
        self.channel = channel
    }

    /// The connection, for a task that will run `executeThenClose` on it.
    func take() -> NIOAsyncChannel<VarlinkServerInbound, ByteBuffer> {
        taken.store(true, ordering: .releasing)
        return channel
    }

    deinit {
        guard !taken.load(ordering: .acquiring) else { return }
        // `executeThenClose` finishes the writer and closes the connection; the task keeps
        // the writer alive until it has.
        let channel = self.channel
        Task { try? await channel.executeThenClose { _, _ in } }
    }
}

/// Logs why a listening socket cannot accept, such as running out of file descriptors; NIO
/// retries a second later by itself.
final class AcceptFailureLogger: ChannelInboundHandler, Sendable {
    typealias InboundIn = any Channel

    private let socket: String
    /// What to do when the process is out of file descriptors.
    private let descriptorAdvice: String
    private let logger: Logger
    private let throttle = WarningThrottle()

    init(socket: String, advice descriptorAdvice: String, logger: Logger) {
        self.socket = socket
        self.descriptorAdvice = descriptorAdvice
        self.logger = logger
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? IOError {
            let advice =
                [EMFILE, ENFILE].contains(error.errnoCode)
                ? "The process is out of file descriptors (limit \(FileDescriptorLimit.current)). \(descriptorAdvice)"
                : "It retries in a second."
            throttle.warn(logger) { suppressed in
                "Cannot accept connections on the \(self.socket) socket: \(error)\(suppressed). \(advice)"
            }
        }
        context.fireErrorCaught(error)
    }
}

/// Writes replies to a connection, each terminated by NUL; waits while the peer does not read.
struct ChannelReplier: VarlinkReplier {
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    /// The connection under `outbound`, written to directly by ``sendNow(continuing:)`` and
    /// for large replies.
    let channel: any Channel
    /// What large replies are charged to, until they are written.
    var budget: OutgoingReplyBudget?
    /// Told the size of a reply the budget refused, and the budget's limit.
    var onRefused: @Sendable (_ bytes: Int, _ limit: Int) -> Void = { _, _ in }

    /// Hands the message to the channel (its event loop writes it) when the channel is
    /// writable: below its high water mark, so a slow reader holds a few messages at most.
    /// Inside ``ChannelWriteBatch/collecting(_:)`` it is handed over when that fan-out ends,
    /// with the other messages for the same event loop. Ordered with ``send(_:continues:)``:
    /// both reach the event loop through its task queue (this one even when called on the
    /// loop), and a send that waited for writability has returned before its caller sends again.
    func sendNow(continuing message: Data) -> Bool {
        guard channel.isWritable, channel.isActive else { return false }
        let (channel, message) = (self.channel, Self.terminated(message, allocator: channel.allocator))
        if ChannelWriteBatch.current?.add(message, to: channel) != true {
            channel.eventLoop.execute { channel.writeAndFlush(message, promise: nil) }
        }
        return true
    }

    func send(_ message: consuming Data, continues: Bool) async throws {
        let buffer = Self.terminated(message, allocator: channel.allocator)
        // Copied: a large reply is held once while its peer reads it, not twice.
        _ = consume message
        if let budget, buffer.readableBytes >= OutgoingReplyBudget.smallestCharged {
            return try await sendCharged(buffer, to: budget)
        }
        do {
            try await outbound.write(buffer)
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw VarlinkPeerGone(reason: "\(error)")
        }
    }
}

extension ChannelReplier {
    /// Writes a large reply charged to `budget` until its last byte is in the socket (a peer
    /// that does not read holds it), or closes the connection, sending nothing, when the budget
    /// cannot take it. Ordered with the other sends: each returns before its caller sends again.
    private func sendCharged(_ buffer: ByteBuffer, to budget: OutgoingReplyBudget) async throws {
        let bytes = buffer.readableBytes
        guard budget.take(bytes) else {
            onRefused(bytes, budget.limit)
            throw VarlinkPeerGone(reason: "a reply of \(bytes) bytes was over the budget for replies not yet read")
        }
        defer { budget.giveBack(bytes) }
        let channel = self.channel
        do {
            // A future's wait does not end on cancellation (a stopping daemon, a streaming call
            // ended): closing the connection fails the write, which ends it.
            try await withTaskCancellationHandler {
                try await channel.writeAndFlush(buffer).get()
            } onCancel: {
                channel.close(promise: nil)
            }
        } catch {
            throw VarlinkPeerGone(reason: "\(error)")
        }
    }

    /// `message` with the NUL byte that ends a Varlink message.
    static func terminated(_ message: Data, allocator: ByteBufferAllocator) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: message.count + 1)
        buffer.writeBytes(message)
        buffer.writeInteger(UInt8(0))
        return buffer
    }
}

/// A connection's ``VarlinkConnectionStateMachine``, shared by the task that reads the
/// connection and the task of its streaming call, which ends the call as it sends its last reply.
private final class ConnectionState: Sendable {
    private let machine = Mutex(VarlinkConnectionStateMachine())

    func received(_ input: VarlinkConnectionStateMachine.Input) -> VarlinkConnectionStateMachine.Action {
        machine.withLock { $0.received(input) }
    }

    func callHandled(handlerInstalled: Bool) -> VarlinkConnectionStateMachine.Action {
        machine.withLock { $0.callHandled(handlerInstalled: handlerInstalled) }
    }

    func streamEnded(_ number: Int) {
        machine.withLock { $0.streamEnded(number) }
    }

    func upgradeEnded() {
        machine.withLock { _ = $0.upgradeEnded() }
    }
}

/// The replier of a streaming call: the call ends, for the connection, as its last reply is
/// sent — before the write, so that a call the client sends once it has that reply never
/// finds the streaming call still running.
private struct StreamingReplier<Base: VarlinkReplier>: VarlinkReplier {
    let base: Base
    let connection: ConnectionState
    let number: Int

    func send(_ message: consuming Data, continues: Bool) async throws {
        if !continues { connection.streamEnded(number) }
        try await base.send(message, continues: continues)
    }

    func sendNow(continuing message: Data) -> Bool { base.sendNow(continuing: message) }
}
