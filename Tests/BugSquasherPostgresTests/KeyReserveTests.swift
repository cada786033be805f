import Testing

@testable import BugSquasherPostgres

@Suite("Primary keys taken in blocks")
struct KeyReserveTests {
    @Test("a block holds what is wanted and eight times as many again, within bounds")
    func allocation() {
        #expect(KeyReserve.allocation(for: 1) == 64)
        #expect(KeyReserve.allocation(for: 5) == 68)
        #expect(KeyReserve.allocation(for: 1_000) == 9_000)
        #expect(KeyReserve.allocation(for: 100_000) == 165_535)
    }

    @Test("keys are taken in order until the reserve runs short; emptied, it serves nothing")
    func takeAndKeep() {
        var reserve = KeyReserve()
        #expect(reserve.take(1, of: "Bug") == nil)
        reserve.keep(10..<20, of: "Bug")
        #expect(reserve.take(4, of: "Bug") == 10)
        #expect(reserve.take(6, of: "Bug") == 14)
        #expect(reserve.take(1, of: "Bug") == nil)
        #expect(reserve.take(1, of: "Comment") == nil)
        reserve.keep(30..<40, of: "Bug")
        // Too few left for a save: nothing is taken (the store allocates a block for it).
        #expect(reserve.take(11, of: "Bug") == nil)
        #expect(reserve.take(10, of: "Bug") == 30)
        reserve.keep(50..<60, of: "Bug")
        reserve.removeAll()
        #expect(reserve.take(1, of: "Bug") == nil)
    }
}
