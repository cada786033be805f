import Foundation
public import NIOCore
import Synchronization

/// Splits a byte stream into NUL-terminated Varlink messages, refusing any message longer than
/// `maximumMessageSize` (the connection is then closed, before the bytes are buffered).
public struct VarlinkFrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer

    /// The longest message accepted, in bytes, without its terminator.
    public let maximumMessageSize: Int

    /// Bytes at the start of the buffer already searched for a terminator: each byte is looked
    /// at once, however the message arrives.
    private var searched = 0

    /// Creates a decoder.
    public init(maximumMessageSize: Int) { self.maximumMessageSize = maximumMessageSize }

    public mutating func decode(buffer: inout ByteBuffer) throws -> ByteBuffer? {
        // memchr: looking at each byte through the buffer's collection view cost a subscriber
        // 3 % of its instructions per save.
        let searched = self.searched
        let found = buffer.withUnsafeReadableBytes { bytes -> Int? in
            guard bytes.count > searched, let base = bytes.baseAddress,
                let terminator = memchr(base + searched, 0, bytes.count - searched)
            else { return nil }
            return base.distance(to: UnsafeRawPointer(terminator))
        }
        guard let length = found else {
            self.searched = buffer.readableBytes
            if buffer.readableBytes > maximumMessageSize {
                throw VarlinkFramingError.messageTooLarge(limit: maximumMessageSize)
            }
            return nil
        }
        self.searched = 0
        if length > maximumMessageSize { throw VarlinkFramingError.messageTooLarge(limit: maximumMessageSize) }
        let message = buffer.readSlice(length: length)
        buffer.moveReaderIndex(forwardBy: 1)
        return message
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> ByteBuffer? {
        try decode(buffer: &buffer)
    }
}

/// What a server connection receives, decoded on the event loop.
public enum VarlinkServerInbound: Sendable {
    /// A method call.
    case call(VarlinkCall)
    /// A message that is not a call, with the error to answer it with (naming the parameter
    /// at fault); nothing after it is read.
    case malformed(VarlinkError)
    /// Bytes sent after a call with `upgrade: true`: the Varlink protocol has ended on the
    /// connection and these belong to the method's own protocol, unsplit.
    case raw(ByteBuffer)
    /// A message that grew past the limit (in bytes) without its terminator; nothing after it
    /// is read (what arrives is dropped unbuffered until the connection is closed).
    case tooLarge(limit: Int)
}

/// Splits a server connection's bytes into calls, and hands over everything after a call that
/// asked for an upgrade as raw bytes. The switch happens here, as the call is decoded, so that
/// bytes the client sent right behind the call are never taken for Varlink messages.
public struct VarlinkServerDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = VarlinkServerInbound

    private enum Mode { case calls, raw, ignoring }

    private var frames: VarlinkFrameDecoder
    private var mode = Mode.calls
    private let charge: IncomingMessageBudget.Charge?

    /// Creates a decoder refusing messages longer than `maximumMessageSize` bytes, and an
    /// incomplete message that would take `budget` past its limit.
    public init(maximumMessageSize: Int, budget: IncomingMessageBudget? = nil) {
        frames = VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)
        charge = budget.map(IncomingMessageBudget.Charge.init)
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> VarlinkServerInbound? {
        switch mode {
        case .calls:
            let decoded: ByteBuffer?
            do {
                decoded = try frames.decode(buffer: &buffer)
            } catch VarlinkFramingError.messageTooLarge(let limit) {
                // Answered (with the server's error for it) before the connection is closed,
                // rather than closed on a client that would not know why.
                charge?.release()
                mode = .ignoring
                buffer.moveReaderIndex(to: buffer.writerIndex)
                return .tooLarge(limit: limit)
            }
            guard let frame = decoded else {
                try charge?.hold(buffer.readableBytes)
                return nil
            }
            charge?.release()
            let call: VarlinkCall
            do {
                call = try VarlinkCall(message: Data(frame.readableBytesView))
            } catch {
                mode = .ignoring
                return .malformed(error as? VarlinkError ?? .invalidParameter("method"))
            }
            if call.upgrade { mode = .raw }
            return .call(call)
        case .raw:
            guard buffer.readableBytes > 0 else { return nil }
            return .raw(buffer.readSlice(length: buffer.readableBytes)!)
        case .ignoring:
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return nil
        }
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> VarlinkServerInbound? {
        try decode(buffer: &buffer)
    }
}

/// The bytes of incomplete messages a server holds over all its connections.
///
/// Each connection may send a message of up to the maximum size, and the server buffers it
/// until its terminator arrives: without a shared budget, a client sending a large message
/// without its terminator on each of many connections could make the process hold gigabytes.
/// A connection whose incomplete message would take the total past ``limit`` is closed with
/// ``VarlinkFramingError/incomingBudgetExceeded(limit:)``; the others are not affected.
public final class IncomingMessageBudget: Sendable {
    /// The most bytes of incomplete messages held at once.
    public let limit: Int
    private let held = Atomic<Int>(0)

    /// A budget of `limit` bytes.
    public init(limit: Int) {
        self.limit = limit
    }

    /// The bytes of incomplete messages held now.
    public var current: Int { held.load(ordering: .relaxed) }

    /// One connection's share, given back when the connection's decoder goes away.
    final class Charge: Sendable {
        private let budget: IncomingMessageBudget
        private let amount = Atomic<Int>(0)

        init(_ budget: IncomingMessageBudget) {
            self.budget = budget
        }

        /// Holds `bytes` for the connection's incomplete message, instead of what it held.
        /// Throws, holding nothing, when that would take the budget past its limit.
        func hold(_ bytes: Int) throws(VarlinkFramingError) {
            let previous = amount.exchange(bytes, ordering: .relaxed)
            let total = budget.held.wrappingAdd(bytes - previous, ordering: .relaxed).newValue
            guard bytes <= previous || total <= budget.limit else {
                release()
                throw .incomingBudgetExceeded(limit: budget.limit)
            }
        }

        /// Gives back what the connection held (its message is complete).
        func release() {
            budget.held.subtract(amount.exchange(0, ordering: .relaxed), ordering: .relaxed)
        }

        deinit {
            budget.held.subtract(amount.load(ordering: .relaxed), ordering: .relaxed)
        }
    }
}
