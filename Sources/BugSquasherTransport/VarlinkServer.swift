public import BugSquasherVarlink
import Foundation
public import Logging
public import NIOCore
import NIOPosix
import Synchronization

/// Serves a ``VarlinkService`` on one Unix stream socket: one task per connection, calls on a
/// connection handled in order, a streaming call cancelled when its peer goes away. One
/// connection's error — malformed JSON, an oversized message, a protocol violation — closes
/// that connection only. After a call with `upgrade: true` has been answered, the rest of the
/// connection goes to the ``VarlinkUpgradeHandler`` the call installed (or is closed if none).
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
        let bootstrap = makeBootstrap()
        let initializer = connectionInitializer
        let server: NIOAsyncChannel<AcceptedConnection, Never>
        // The socket file this server created, removed when it stops if the path still names it.
        var created: (path: String, identity: [UInt64])?
        defer {
            if let created, Self.identity(created.path) == created.identity { unlink(created.path) }
        }
        switch address.kind {
        case .path(let path, let permissions):
            let fd = try Self.bindListeningSocket(inDirectoryMadeFor: path)
            created = Self.identity(path).map { (path, $0) }
            server = try await bootstrap.bind(fd, childChannelInitializer: initializer)
            try Self.setPermissions(of: path, to: permissions)
        case .descriptor(let fd):
            try Self.makeNonBlocking(fd)
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

    /// Sets up each accepted connection: the Varlink decoder, then an async channel around it.
    private var connectionInitializer: @Sendable (any Channel) -> EventLoopFuture<AcceptedConnection> {
        let (maximumMessageSize, incomingBudget) = (self.maximumMessageSize, self.incomingBudget)
        return { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(
                        VarlinkServerDecoder(maximumMessageSize: maximumMessageSize, budget: incomingBudget)))
                return AcceptedConnection(
                    try NIOAsyncChannel<VarlinkServerInbound, ByteBuffer>(wrappingChannelSynchronously: channel))
            }
        }
    }

    /// The listening socket's bootstrap: its backlog, half-closure, and the accept-failure logger.
    private func makeBootstrap() -> ServerBootstrap {
        let (name, logger, descriptorAdvice) = (self.name, self.logger, wording.descriptorLimitAdvice)
        return ServerBootstrap(group: group).serverChannelOption(.backlog, value: 512)
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
    }

    /// Checks `path`, creates its directory, and binds a listening socket there.
    ///
    /// Bound here rather than by NIO, which removes whatever socket file the path names when the
    /// server closes: a server stopping because its socket was replaced would remove the
    /// replacement, the socket of another server that serves there now.
    private static func bindListeningSocket(inDirectoryMadeFor path: String) throws -> CInt {
        try checkSocketPath(path)
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw TransportError(
                .cannotCreateDirectory,
                "Cannot create the socket directory \(directory) (\((error as NSError).localizedDescription)).",
                advice: "Create it, or choose another place for the socket.", path: directory)
        }
        return try bindListeningSocket(path)
    }

    /// Sets the socket file's permissions.
    private static func setPermissions(of path: String, to permissions: Int) throws {
        guard chmod(path, mode_t(permissions)) == 0 else {
            let reason = errno
            throw TransportError(
                .listenFailed,
                "Could not set the permissions of \(path) to \(String(permissions, radix: 8)): \(String(cString: strerror(reason))).",
                path: path, systemError: reason)
        }
    }

    /// Makes a socket handed over by a service manager non-blocking: it may be blocking, and NIO
    /// accepts until EAGAIN, which a blocking socket would never return.
    private static func makeNonBlocking(_ fd: CInt) throws {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let reason = errno
            throw TransportError(
                .listenFailed,
                "The socket passed as fd \(fd) cannot be used: \(String(cString: strerror(reason))).",
                systemError: reason)
        }
    }

    private func serve(_ connection: NIOAsyncChannel<VarlinkServerInbound, ByteBuffer>) async {
        if let connectionLimit,
            !connectionLimit.acquire(
                socket: name, writer: mayWrite, advice: wording.connectionLimitAdvice, logger: logger)
        {
            try? await connection.executeThenClose { _, _ in }
            return
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
                let replier = ChannelReplier(outbound: outbound, channel: channel, budget: outgoingBudget) {
                    bytes, limit in
                    self.outgoingWarnings.warn(self.logger) { suppressed in
                        "Closed a connection instead of sending it a reply of \(bytes) bytes: the replies not yet read by their clients would have held more than \(limit) bytes\(suppressed). \(self.wording.outgoingBudgetAdvice)"
                    }
                }
                try await read(inbound, channel: channel, replier: replier, context: context)
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

    /// Reads a connection's messages until its state machine says to close, carrying out each
    /// action the machine decides; streaming calls run in tasks of their own.
    private func read(
        _ inbound: NIOAsyncChannelInboundStream<VarlinkServerInbound>, channel: any Channel, replier: ChannelReplier,
        context: VarlinkCallContext
    ) async throws {
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
                    await refuseTooLarge(limit, replier: replier)
                case (.startStreaming(let number), .call(let call)):
                    await Self.keepLittleInFlight(channel)
                    group.addTask {
                        defer { machine.streamEnded(number) }
                        let replier = StreamingReplier(base: replier, connection: machine, number: number)
                        try await self.service.handle(call, context: context, replier: replier)
                    }
                    continue
                case (.handle, .call(let call)):
                    try await service.handle(call, context: context, replier: replier)
                    // A download's bytes follow its reply; then, with no handler installed, the
                    // machine ends the connection.
                    if call.upgrade, let download = context.connection.takeDownload() {
                        do {
                            try await download.send { buffer in try await replier.sendRaw(buffer) }
                        } catch {
                            logger.debug("download ended early", metadata: ["error": "\(error)"])
                        }
                    }
                    // After an upgrade, what follows goes to the handler the call installed.
                    if call.upgrade { upgraded = context.connection.takeUpgradeHandler() }
                    if machine.callHandled(handlerInstalled: upgraded != nil) == .read { continue }
                case (.passToUpgradeHandler, .raw(let bytes)):
                    guard let handler = upgraded else { break }
                    guard try await pass(bytes, to: handler, replier: replier) else { continue }
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

    /// Warns of a message that grew past `limit` bytes and answers it with the owner's refusal,
    /// if it gave one.
    private func refuseTooLarge(_ limit: Int, replier: ChannelReplier) async {
        sizeWarnings.warn(logger) { suppressed in
            "Closed a connection whose message grew past \(limit) bytes without its terminating NUL byte\(suppressed). \(wording.messageTooLargeAdvice)"
        }
        if let refusal = wording.messageTooLarge?(limit) {
            try? await replier.send(try VarlinkReply.encode(refusal), continues: false)
        }
    }

    /// Hands raw bytes after an upgrade to `handler`; `true` when the upgraded exchange ended
    /// (its last reply, or an error reply, sent), `false` when the handler waits for more.
    private func pass(_ bytes: ByteBuffer, to handler: any VarlinkUpgradeHandler, replier: ChannelReplier)
        async throws -> Bool
    {
        do {
            guard let last = try await handler.receive(bytes) else { return false }
            try await replier.send(last, continues: false)
        } catch is CancellationError {
            throw CancellationError()
        } catch let error as VarlinkPeerGone {
            throw error
        } catch {
            try await replier.send(
                try service.errorReply(error, method: "upgraded connection", logger: logger), continues: false)
        }
        return true
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

/// A connection's ``VarlinkConnectionStateMachine``, shared by the task that reads the
/// connection and the task of its streaming call, which ends the call as it sends its last reply.
final class ConnectionState: Sendable {
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
