import BugSquasherRuntime
public import BugSquasherVarlink
import Foundation
import NIOCore
import NIOPosix

/// A streaming Varlink call over its own connection, structured: the connection lives as long as
/// `body` runs and is closed when it returns or throws (or its task is cancelled). The connection
/// is a SwiftNIO channel, or, under ``SingleThreadedRuntime``, a plain socket read by its loop.
/// Why it is built this way: docs/DESIGN-NOTES.md, "A subscriber runs on one thread".
public enum VarlinkStream {
    /// Connects, sends the call with `more`, and hands the replies to `body`.
    ///
    /// - Throws: ``TransportError`` when the socket cannot be reached, and what `body` throws.
    public static func call<P: Encodable & Sendable, R: Sendable>(
        path: String, method: String, parameters: P, maximumMessageSize: Int = BlockingVarlinkClient.maximumReplySize,
        _ body: (Replies) async throws -> R
    ) async throws -> R {
        var message = try VarlinkCall.encode(method: method, parameters: parameters, more: true)
        message.append(0)
        if SingleThreadedRuntime.isInstalled {
            let connection = try PollingConnection(path: path, maximumMessageSize: maximumMessageSize)
            defer { connection.close() }
            try connection.send(message)
            return try await body(Replies(source: .polling(connection)))
        }
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        // Connected here rather than by NIO, whose socket address stops short of the longest
        // path a Unix socket takes, and whose failure says less (missing, refused, forbidden).
        // Blocking, as `PollingConnection`'s: a Unix connect waits only while the server's
        // backlog is full.
        let fd = try BlockingVarlinkClient.connect(path)
        do {
            guard fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0 else {
                let reason = errno
                close(fd)
                throw TransportError(
                    .connectFailed, "Could not use the connection to \(path) (\(String(cString: strerror(reason)))).",
                    path: path, systemError: reason)
            }
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .withConnectedSocket(fd) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            ByteToMessageHandler(VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)))
                        return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch let error as TransportError {
            throw error
        } catch {
            throw TransportError(
                .connectFailed, "Could not connect to \(path) (\(error)).", advice: "Is the server running?", path: path
            )
        }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(bytes: message))
            return try await body(Replies(source: .channel(inbound)))
        }
    }

    /// Where a stream's messages come from.
    enum Source {
        case channel(NIOAsyncChannelInboundStream<ByteBuffer>)
        case polling(PollingConnection)

        func frames() -> Frames {
            switch self {
            case .channel(let inbound): .channel(inbound.makeAsyncIterator())
            case .polling(let connection): .polling(connection)
            }
        }
    }

    /// The next message of a stream, from either source.
    enum Frames {
        case channel(NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator)
        case polling(PollingConnection)

        mutating func next() async throws -> Data? {
            switch self {
            case .channel(var iterator):
                defer { self = .channel(iterator) }
                return try await iterator.next().map { $0.withUnsafeReadableBytes { Data($0) } }
            case .polling(let connection):
                return try await connection.next()
            }
        }
    }

    /// The replies of a streaming call, ending after the one without `continues`; an error
    /// reply is thrown.
    public struct Replies: AsyncSequence {
        public typealias Element = VarlinkReply
        let source: Source

        public func makeAsyncIterator() -> Iterator { Iterator(frames: source.frames()) }

        /// The same replies with their parameters read as `P`, each in one walk over the message
        /// (for a feed of thousands of replies).
        package func decoding<P: JSONReadable>(_ type: P.Type) -> Decoded<P> { Decoded(source: source) }

        /// The iterator.
        public struct Iterator: AsyncIteratorProtocol {
            var frames: Frames
            var finished = false

            public mutating func next() async throws -> VarlinkReply? {
                guard !finished, let message = try await frames.next() else { return nil }
                let reply = try VarlinkReply(message: message)
                if let error = reply.error { throw error }
                finished = !reply.continues
                return reply
            }
        }

        /// Replies read as `P`: the parameters and the message's size in bytes (without its NUL).
        package struct Decoded<P: JSONReadable>: AsyncSequence {
            package typealias Element = (parameters: P, bytes: Int)
            let source: Source

            package func makeAsyncIterator() -> Iterator { Iterator(frames: source.frames()) }

            /// The iterator.
            package struct Iterator: AsyncIteratorProtocol {
                var frames: Frames
                var finished = false

                package mutating func next() async throws -> Element? {
                    guard !finished, let message = try await frames.next() else { return nil }
                    let reply = try VarlinkReply.decode(P.self, from: message)
                    finished = !reply.continues
                    return (reply.parameters, message.count)
                }
            }
        }
    }
}

/// A stream's connection on a non-blocking socket, read on ``SingleThreadedRuntime``'s loop:
/// a message is read when the consumer asks for one, so a consumer that is busy leaves the rest
/// in the socket (the server sees it fall behind, as with a channel that stops reading).
final class PollingConnection {
    private let path: String
    private var fd: CInt
    private var buffer = ByteBuffer()
    private var decoder: VarlinkFrameDecoder
    /// Why the call could not be sent whole: the server closed the connection meanwhile. What it
    /// answered before closing (a refusal of a message past its size limit, say) is read first.
    private var sendFailure: TransportError?

    /// Connects to `path` (blocking, for the connect only).
    ///
    /// - Throws: ``TransportError`` saying whether the socket is missing, refused or forbidden.
    init(path: String, maximumMessageSize: Int) throws {
        self.path = path
        fd = try BlockingVarlinkClient.connect(path)
        decoder = VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)
    }

    /// Sends the call (before any reply is read, while the socket still blocks).
    func send(_ message: Data) throws {
        do {
            try message.withUnsafeBytes { try BlockingVarlinkClient.sendAll(fd, $0, path: path, timeout: nil) }
        } catch let error as TransportError where error.code == .closedByPeer || error.code == .peerGone {
            // Refused as it arrived (too long, say): the answer is in the socket, unread.
            sendFailure = error
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    /// The next message, or `nil` when the server closed the connection after a whole one.
    func next() async throws -> Data? {
        while true {
            if let frame = try decoder.decode(buffer: &buffer) {
                // Copied from raw bytes: `Data` made from the buffer's view looks up at run time
                // whether the view is contiguous, in tables each subscriber process holds cold.
                return frame.withUnsafeReadableBytes { Data($0) }
            }
            // What was decoded is dropped before more is read: the buffer holds the message being
            // read and what came behind it, not every byte of a feed that runs for days.
            if buffer.readableBytes == 0 {
                buffer.clear()
            } else if buffer.readerIndex >= Self.readSize {
                buffer.discardReadBytes()
            }
            var received = 0
            var failure: CInt = 0
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Self.readSize) { free in
                received = recv(fd, free.baseAddress, free.count, 0)
                failure = received < 0 ? errno : 0
                return max(0, received)
            }
            if received > 0 { continue }
            if received < 0 && (failure == EAGAIN || failure == EWOULDBLOCK || failure == EINTR) {
                try await SingleThreadedRuntime.readable(fd)
                continue
            }
            // End of file, or a reset: the server closed the connection.
            if received == 0 || failure == ECONNRESET {
                guard buffer.readableBytes == 0 else {
                    throw TransportError(
                        .closedMidMessage, "The server at \(path) closed the connection in the middle of a message.",
                        path: path)
                }
                if let sendFailure { throw sendFailure }
                return nil
            }
            throw TransportError(
                .transferFailed, "Reading from \(path) failed: \(String(cString: strerror(failure))).", path: path,
                systemError: failure)
        }
    }

    /// The most a read asks for, and the free space kept for it.
    static let readSize = 64 * 1024

    /// Closes the socket (once).
    func close() {
        if fd >= 0 { _ = Glibc.close(fd) }
        fd = -1
    }
}
