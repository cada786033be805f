public import NIOCore

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
