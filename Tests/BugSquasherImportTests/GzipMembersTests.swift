import BugSquasherImport
import Testing

/// The rules of a gzip upload's members, with plain bytes: no zlib.
@Suite("Gzip members")
struct GzipMembersTests {
    /// The 8-byte trailer of a member that inflated to `size` bytes (the CRC-32 is not checked here).
    func trailer(size: UInt32) -> [UInt8] {
        [0, 0, 0, 0] + (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) }
    }

    /// One cut short, or whose trailer disagrees, is not whole.
    @Test("a member is whole only when its trailer matches what it inflated to")
    func trailer() {
        var whole = GzipMembers()
        whole.inflated(consumed: 100, lastBytes: trailer(size: 70_000), inflated: 65_536, outputFull: true)
        whole.inflated(consumed: 0, lastBytes: [], inflated: 4_464, outputFull: false)
        #expect(whole.end() == .whole)
        var cut = GzipMembers()
        cut.inflated(consumed: 5, lastBytes: [1, 2, 3, 4, 5], inflated: 10, outputFull: false)
        #expect(cut.end() == .incomplete(inflatedBytes: 10))
        var wrong = GzipMembers()
        wrong.inflated(consumed: 100, lastBytes: trailer(size: 11), inflated: 10, outputFull: false)
        #expect(wrong.end() == .incomplete(inflatedBytes: 10))
    }

    /// Even a header split across reads; anything else is not gzip.
    @Test("after a member, zero padding is skipped and a gzip header starts the next")
    func afterMember() {
        var members = GzipMembers()
        members.inflated(consumed: 8, lastBytes: trailer(size: 3), inflated: 3, outputFull: false)
        members.inflated(consumed: 0, lastBytes: [], inflated: 0, outputFull: false)
        #expect(members.memberEnded)
        let step1 = members.afterMember([0, 0, 0])
        #expect(step1 == (3, .needMore))
        let step2 = members.afterMember([0, 0x1F])
        #expect(step2 == (2, .needMore))
        let step3 = members.afterMember([0x8B, 8, 0])
        #expect(step3 == (1, .nextMember(start: [0x1F, 0x8B])))
        #expect(!members.memberEnded && members.inflatedBytes == 0)
        // The new member has read nothing yet: cut here, it is incomplete.
        #expect(members.end() == .incomplete(inflatedBytes: 0))

        var appended = GzipMembers()
        appended.inflated(consumed: 0, lastBytes: [], inflated: 0, outputFull: false)
        let step4 = appended.afterMember(Array("PK".utf8))
        #expect(step4 == (2, .notGzip))
        var halfHeader = GzipMembers()
        halfHeader.inflated(consumed: 0, lastBytes: [], inflated: 0, outputFull: false)
        _ = halfHeader.afterMember([0x1F])
        #expect(halfHeader.end() == .trailingData)
    }

    @Test("a full output window is not the end of a member, even when nothing more was consumed")
    func fullWindow() {
        var members = GzipMembers()
        members.inflated(consumed: 0, lastBytes: [], inflated: 0, outputFull: true)
        #expect(!members.memberEnded)
    }
}
