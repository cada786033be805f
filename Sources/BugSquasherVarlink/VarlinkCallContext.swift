public import Foundation
public import Logging
public import NIOCore
import Synchronization

/// Thrown by a ``VarlinkReplier`` when the connection is gone: the peer closed it or it broke.
/// Handlers let it pass; the service ends the call without an error reply or an error log.
public struct VarlinkPeerGone: Error, Sendable, CustomStringConvertible {
    /// What the transport reported.
    public var reason: String
    /// Creates the error.
    public init(reason: String) { self.reason = reason }
    public var description: String { "the client closed the connection (\(reason))" }
}

/// Sends replies to the call being handled. Writes wait while the peer is slow to read
/// (backpressure); they throw once the connection is gone.
public protocol VarlinkReplier: Sendable {
    /// Sends one encoded reply message (without its NUL terminator). `continues` is what the
    /// message says: whether more replies to the same `more` call follow it. After a reply that
    /// does not continue, the client may send its next call. The message is consumed: a
    /// replier that copies it into its own buffer frees it before waiting for its peer.
    func send(_ message: consuming Data, continues: Bool) async throws

    /// Sends one encoded reply message that continues (without its NUL terminator) at once,
    /// from any thread, without waiting: for a fan-out that must not wake a task per
    /// connection. Returns `false`, sending nothing, when the connection cannot take it now
    /// (its peer reads slowly, it is closing) or the replier has no such path; the caller then
    /// sends it with ``send(_:continues:)``, which waits. Messages sent either way arrive in
    /// the order they were sent. A replier that wraps another forwards it (no default, so that
    /// none forgets to).
    func sendNow(continuing message: Data) -> Bool
}

extension VarlinkReplier {
    /// Sends a successful reply; `continues` tells a `more` caller that others follow.
    public func reply<P: Encodable>(_ parameters: P, continues: Bool = false) async throws {
        try await send(try VarlinkReply.encode(parameters, continues: continues), continues: continues)
    }
}

/// What a handler knows about the connection a call arrived on.
public struct VarlinkCallContext: Sendable {
    /// The name of the socket (`read`, `write`, …): the access level the socket's file
    /// permissions grant.
    public var socket: String
    /// Whether calls on this socket may write.
    public var mayWrite: Bool
    /// A logger with the connection's metadata.
    public var logger: Logger
    /// The connection: register work to do when it closes.
    public var connection: VarlinkConnection

    /// Creates a context.
    public init(socket: String, mayWrite: Bool, logger: Logger, connection: VarlinkConnection = VarlinkConnection()) {
        self.socket = socket
        self.mayWrite = mayWrite
        self.logger = logger
        self.connection = connection
    }
}

/// Takes over a connection after a call with `upgrade: true` was answered: the transport hands
/// it every byte the client sends next, until it returns the last message.
public protocol VarlinkUpgradeHandler: Sendable {
    /// The next bytes the client sent, as they arrived. Returns the message to send last (the
    /// transport adds the NUL terminator and closes the connection) once the handler's protocol
    /// has ended, `nil` to read on. A thrown ``VarlinkError`` is sent as an error reply, and the
    /// connection closed. Should the client close the connection first, the handler is not
    /// called again, and what it registered with ``VarlinkConnection/onClose(_:)`` runs.
    func receive(_ bytes: ByteBuffer) async throws -> Data?
}

/// Sends bytes after the reply to a call with `upgrade: true`, in the method's own protocol (a
/// file's bytes as they are): the transport runs it once the reply is sent, then closes the
/// connection. For transfers that base64 in Varlink replies would make several times dearer.
public protocol VarlinkDownload: Sendable {
    /// Writes the bytes that follow the reply through `write`, which waits while the client
    /// reads slower than this writes and throws once it is gone.
    func send(through write: @Sendable (ByteBuffer) async throws -> Void) async throws
}

/// One client connection, as handlers see it: state that must not outlive the connection (an
/// upload that was never committed) registers its clean-up here.
public final class VarlinkConnection: Sendable {
    private let state = Mutex<(closed: Bool, actions: [@Sendable () async -> Void])>((false, []))
    private let upgradeHandler = Mutex<(any VarlinkUpgradeHandler)?>(nil)
    private let download = Mutex<(any VarlinkDownload)?>(nil)
    private let upgraded = Atomic<Bool>(false)
    private let ender = Mutex<(@Sendable (Data) -> Void)?>(nil)

    /// Creates a connection handle; the transport calls ``close()`` when the peer is gone.
    public init() {}

    /// Hands the connection to `handler` once the reply to the current call (which asked for an
    /// upgrade) has been sent. A call with `upgrade: true` whose handler does not call this ends
    /// the connection after its reply.
    public func upgrade(to handler: any VarlinkUpgradeHandler) {
        upgraded.store(true, ordering: .releasing)
        upgradeHandler.withLock { $0 = handler }
    }

    /// Has the transport send `download`'s bytes once the reply to the current call (which asked
    /// for an upgrade) has been sent, then close the connection.
    public func upgrade(toDownload download: any VarlinkDownload) {
        self.download.withLock { $0 = download }
    }

    /// The download an upgraded call installed, once (for the transport).
    public func takeDownload() -> (any VarlinkDownload)? {
        download.withLock { download in
            defer { download = nil }
            return download
        }
    }

    /// Installs how ``endUpgrade(lastReply:)`` sends a last message and closes the connection
    /// (for the transport).
    public func onEnd(_ end: @escaping @Sendable (_ lastMessage: Data) -> Void) {
        ender.withLock { $0 = end }
    }

    /// Ends a connection an upgrade handler took over, from outside it — an upload left idle, a
    /// daemon stopping — sending `lastReply` first: its client sends bytes and reads nothing
    /// but that last message, so without it the client would wait, or find the connection
    /// closed without a reason. A connection that was not upgraded is left as it is: its
    /// client is between calls, and its next call is answered.
    public func endUpgrade(lastReply: @autoclosure () throws -> Data) {
        guard upgraded.load(ordering: .acquiring), let message = try? lastReply() else { return }
        ender.withLock { $0 }?(message)
    }

    /// The handler an upgraded call installed, once (for the transport).
    public func takeUpgradeHandler() -> (any VarlinkUpgradeHandler)? {
        upgradeHandler.withLock { handler in
            defer { handler = nil }
            return handler
        }
    }

    /// Runs `action` when the connection closes (at once if it already has).
    public func onClose(_ action: @escaping @Sendable () async -> Void) async {
        let closed = state.withLock { state in
            if !state.closed { state.actions.append(action) }
            return state.closed
        }
        if closed { await action() }
    }

    /// Marks the connection closed and runs the registered clean-ups, in order.
    public func close() async {
        let actions = state.withLock { state in
            state.closed = true
            defer { state.actions = [] }
            return state.actions
        }
        for action in actions { await action() }
    }
}
