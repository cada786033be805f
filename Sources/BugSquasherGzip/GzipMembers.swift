/// The bookkeeping of a gzip upload's members, apart from inflating them: where a member ends,
/// what may follow it (another member, as `gzip -d` reads concatenated ones, or zero padding),
/// and whether the data ended whole.
///
/// The spooler inflates with ``GzipInflater``, which checks each member's trailer, and reports
/// each step here; pure, so the rules are tested with plain bytes.
public struct GzipMembers: Sendable {
    /// What the bytes after a member are.
    public enum AfterMember: Sendable, Equatable {
        /// Not enough yet to tell (padding so far, or one byte of a header).
        case needMore
        /// Another member begins with these bytes: restart inflating with them.
        case nextMember(start: [UInt8])
        /// Bytes that are not gzip: the file was appended to, or is not one gzip file.
        case notGzip
    }

    /// How the gzip data ended.
    public enum End: Sendable, Equatable {
        /// With the trailer of its last member.
        case whole
        /// Followed by the start of something that is not a gzip member.
        case trailingData
        /// Without the trailer that ends its last member (cut short); `inflatedBytes` is what
        /// that member inflated to.
        case incomplete(inflatedBytes: UInt64)
    }

    /// Whether the member read last has ended: what follows goes to ``afterMember(_:)``.
    public private(set) var memberEnded = false
    /// The bytes the member being read inflated to so far.
    public private(set) var inflatedBytes: UInt64 = 0
    /// The first bytes after a member's end, held until there are two of them to check.
    private var nextStart: [UInt8] = []

    /// Bookkeeping for an upload whose first member starts now.
    public init() {}

    /// A step of inflating the current member wrote `inflated` bytes, and ended the member
    /// (its trailer read and checked) or not.
    public mutating func inflated(_ inflated: Int, memberEnded ended: Bool) {
        inflatedBytes += UInt64(inflated)
        if ended { memberEnded = true }
    }

    /// Takes the bytes that follow a member's end: zero padding is skipped, and a gzip header
    /// starts the next member. Returns how many of `bytes` were taken, and what they are.
    public mutating func afterMember(_ bytes: [UInt8]) -> (taken: Int, AfterMember) {
        var taken = 0
        if nextStart.isEmpty {
            while taken < bytes.count, bytes[taken] == 0 { taken += 1 }
        }
        let wanted = min(2 - nextStart.count, bytes.count - taken)
        nextStart += bytes[taken..<(taken + wanted)]
        taken += wanted
        guard nextStart.count == 2 else { return (taken, .needMore) }
        guard nextStart == [0x1F, 0x8B] else { return (taken, .notGzip) }
        defer {
            nextStart = []
            memberEnded = false
            inflatedBytes = 0
        }
        return (taken, .nextMember(start: nextStart))
    }

    /// The upload ended: whether its gzip data was whole.
    public func end() -> End {
        if !nextStart.isEmpty { return .trailingData }
        return memberEnded ? .whole : .incomplete(inflatedBytes: inflatedBytes)
    }
}
