import BugSquasherGzip
import Testing

/// The rules of a gzip upload's members, with plain bytes: no inflating.
@Suite("Gzip members")
struct GzipMembersTests {
    /// A member is whole once the inflater read and checked its trailer.
    @Test("the data is whole only when its last member ended")
    func wholeOrCut() {
        var whole = GzipMembers()
        whole.inflated(65_536, memberEnded: false)
        whole.inflated(4_464, memberEnded: true)
        #expect(whole.end() == .whole)
        var cut = GzipMembers()
        cut.inflated(10, memberEnded: false)
        #expect(cut.end() == .incomplete(inflatedBytes: 10))
    }

    /// Even a header split across reads; anything else is not gzip.
    @Test("after a member, zero padding is skipped and a gzip header starts the next")
    func afterMember() {
        var members = GzipMembers()
        members.inflated(3, memberEnded: true)
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
        appended.inflated(0, memberEnded: true)
        let step4 = appended.afterMember(Array("PK".utf8))
        #expect(step4 == (2, .notGzip))
        var halfHeader = GzipMembers()
        halfHeader.inflated(0, memberEnded: true)
        _ = halfHeader.afterMember([0x1F])
        #expect(halfHeader.end() == .trailingData)
    }
}
