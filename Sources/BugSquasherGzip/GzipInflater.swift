import CISAL

/// Inflates gzip data as it arrives, member by member, with ISA-L's igzip: about five times
/// zlib's speed on the same file, which matters because an upload is inflated before its job
/// starts (docs/DESIGN-NOTES.md, "Uploads are inflated with ISA-L").
///
/// Each member's header is parsed and its trailer checked (the CRC-32 and the size modulo
/// 2^32): a member reported ended is whole. What may follow a member (another one, padding,
/// something else) is the caller's business; call ``startMember()`` before feeding the next.
public final class GzipInflater {
    /// What one call of ``inflate(_:into:)`` did.
    public struct Step: Sendable, Equatable {
        /// The input bytes it took.
        public var consumed: Int
        /// The bytes it wrote at the start of the output.
        public var produced: Int
        /// Whether the member ended, its trailer checked: the input after `consumed` is not
        /// part of it.
        public var memberEnded: Bool
    }

    private let state: UnsafeMutablePointer<inflate_state>

    /// An inflater at the start of a member.
    public init() {
        state = .allocate(capacity: 1)
        isal_inflate_init(state)
        state.pointee.crc_flag = UInt32(ISAL_GZIP)
    }

    deinit { state.deallocate() }

    /// Starts over for the next member (its first byte is the next one fed).
    public func startMember() {
        isal_inflate_reset(state)
        state.pointee.crc_flag = UInt32(ISAL_GZIP)
    }

    /// Inflates from `input` into `output` until the input is used up, the output is full, or
    /// the member ends. Call it again with no more input while it fills the output: it may
    /// hold inflated bytes back.
    ///
    /// - Throws: ``GzipError`` when the data is not gzip, or is corrupt.
    public func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(GzipError)
        -> Step
    {
        let inputCount = UInt32(clamping: input.count)
        let outputCount = UInt32(clamping: output.count)
        state.pointee.next_in = UnsafeMutablePointer(
            mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
        state.pointee.avail_in = inputCount
        state.pointee.next_out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
        state.pointee.avail_out = outputCount
        let status = isal_inflate(state)
        let step = Step(
            consumed: Int(inputCount - state.pointee.avail_in), produced: Int(outputCount - state.pointee.avail_out),
            memberEnded: state.pointee.block_state == ISAL_BLOCK_FINISH)
        state.pointee.next_in = nil
        state.pointee.next_out = nil
        guard status >= 0 else { throw GzipError(status: status) }
        return step
    }
}

/// Gzip data that cannot be inflated, and why.
public struct GzipError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong with the data, in a few words.
    public let description: String

    /// The inflater took no input while it had room to write: the data cannot be read further.
    public static let stalled = GzipError(description: "the inflater took none of the data that followed")

    private init(description: String) { self.description = description }

    init(status: Int32) {
        description =
            switch status {
            case ISAL_INCORRECT_CHECKSUM:
                "a member's trailer does not match what it inflates to (its CRC-32 or size): the data is corrupt"
            case ISAL_INVALID_WRAPPER: "the gzip header is invalid"
            case ISAL_UNSUPPORTED_METHOD: "the gzip header names a compression method other than deflate"
            case ISAL_INVALID_BLOCK, ISAL_INVALID_SYMBOL, ISAL_INVALID_LOOKBACK:
                "the compressed data is corrupt (an invalid deflate block)"
            default: "inflating failed (ISA-L status \(status))"
            }
    }
}
