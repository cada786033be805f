public import NIOCore
import Foundation

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
        guard let index = buffer.readableBytesView.dropFirst(searched).firstIndex(of: 0) else {
            searched = buffer.readableBytes
            if buffer.readableBytes > maximumMessageSize { throw VarlinkFramingError.messageTooLarge(limit: maximumMessageSize) }
            return nil
        }
        searched = 0
        let length = index - buffer.readerIndex
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
    /// A message that is not a call; nothing after it is read.
    case malformed
    /// Bytes sent after a call with `upgrade: true`: the Varlink protocol has ended on the
    /// connection and these belong to the method's own protocol, unsplit.
    case raw(ByteBuffer)
}

/// Splits a server connection's bytes into calls, and hands over everything after a call that
/// asked for an upgrade as raw bytes. The switch happens here, as the call is decoded, so that
/// bytes the client sent right behind the call are never taken for Varlink messages.
public struct VarlinkServerDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = VarlinkServerInbound

    private enum Mode { case calls, raw, ignoring }

    private var frames: VarlinkFrameDecoder
    private var mode = Mode.calls

    /// Creates a decoder refusing messages longer than `maximumMessageSize` bytes.
    public init(maximumMessageSize: Int) {
        frames = VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> VarlinkServerInbound? {
        switch mode {
        case .calls:
            guard let frame = try frames.decode(buffer: &buffer) else { return nil }
            guard let call = try? VarlinkCall(message: Data(frame.readableBytesView)) else {
                mode = .ignoring
                return .malformed
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
