public import BugSquasherVarlink
import Foundation
import NIOCore
import NIOPosix

/// A streaming Varlink call over its own connection (NIO), structured: the connection lives as
/// long as `body` runs and is closed when it returns or throws (or its task is cancelled).
///
/// ```swift
/// try await VarlinkStream.call(path: socket, method: "io.bugsquasher.Changes.Subscribe",
///                              parameters: SubscribeParameters(since: 42)) { replies in
///     for try await reply in replies { print(try reply.parameters(SubscribeReply.self).event) }
/// }
/// ```
public enum VarlinkStream {
    /// Connects, sends the call with `more`, and hands the replies to `body`.
    ///
    /// - Throws: ``TransportError`` when the socket cannot be reached, and what `body` throws.
    public static func call<P: Encodable & Sendable, R: Sendable>(
        path: String, method: String, parameters: P, maximumMessageSize: Int = 64 * 1024 * 1024,
        _ body: (Replies) async throws -> R
    ) async throws -> R {
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: path) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)))
                        return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            throw TransportError("Could not connect to squasherd at \(path) (\(error)). Is it running?")
        }
        return try await channel.executeThenClose { inbound, outbound in
            var message = ByteBuffer(bytes: try VarlinkCall.encode(method: method, parameters: parameters, more: true))
            message.writeInteger(UInt8(0))
            try await outbound.write(message)
            return try await body(Replies(inbound: inbound))
        }
    }

    /// The replies of a streaming call, ending after the one without `continues`; an error
    /// reply is thrown.
    public struct Replies: AsyncSequence {
        public typealias Element = VarlinkReply
        let inbound: NIOAsyncChannelInboundStream<ByteBuffer>

        public func makeAsyncIterator() -> Iterator { Iterator(base: inbound.makeAsyncIterator()) }

        /// The same replies with their parameters read as `P`, each in one walk over the message
        /// (for a feed of thousands of replies).
        package func decoding<P: JSONReadable>(_ type: P.Type) -> Decoded<P> { Decoded(inbound: inbound) }

        /// Replies read as `P`: the parameters and the message's size in bytes (without its NUL).
        package struct Decoded<P: JSONReadable>: AsyncSequence {
            package typealias Element = (parameters: P, bytes: Int)
            let inbound: NIOAsyncChannelInboundStream<ByteBuffer>

            package func makeAsyncIterator() -> Iterator { Iterator(base: inbound.makeAsyncIterator()) }

            /// The iterator.
            package struct Iterator: AsyncIteratorProtocol {
                var base: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
                var finished = false

                package mutating func next() async throws -> Element? {
                    guard !finished, let frame = try await base.next() else { return nil }
                    let reply = try VarlinkReply.decode(P.self, from: Data(frame.readableBytesView))
                    finished = !reply.continues
                    return (reply.parameters, frame.readableBytes)
                }
            }
        }

        /// The iterator.
        public struct Iterator: AsyncIteratorProtocol {
            var base: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
            var finished = false

            public mutating func next() async throws -> VarlinkReply? {
                guard !finished, let frame = try await base.next() else { return nil }
                let reply = try VarlinkReply(message: Data(frame.readableBytesView))
                if let error = reply.error { throw error }
                finished = !reply.continues
                return reply
            }
        }
    }
}
