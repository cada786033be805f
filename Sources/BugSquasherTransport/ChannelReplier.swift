import BugSquasherVarlink
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

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

    /// Writes bytes as they are (no terminator) until the last of them is in the socket, charged
    /// to the budget meanwhile: a download after an upgraded call's reply. (Handed to the
    /// channel without waiting, the last piece could still be queued when the connection closes.)
    func sendRaw(_ buffer: ByteBuffer) async throws {
        if let budget { return try await sendCharged(buffer, to: budget) }
        try await writeFlushed(buffer)
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
        try await writeFlushed(buffer)
    }

    /// Writes `buffer` and waits until its last byte is in the socket.
    private func writeFlushed(_ buffer: ByteBuffer) async throws {
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

/// The replier of a streaming call: the call ends, for the connection, as its last reply is
/// sent — before the write, so that a call the client sends once it has that reply never
/// finds the streaming call still running.
struct StreamingReplier<Base: VarlinkReplier>: VarlinkReplier {
    let base: Base
    let connection: ConnectionState
    let number: Int

    func send(_ message: consuming Data, continues: Bool) async throws {
        if !continues { connection.streamEnded(number) }
        try await base.send(message, continues: continues)
    }

    func sendNow(continuing message: Data) -> Bool { base.sendNow(continuing: message) }
}
