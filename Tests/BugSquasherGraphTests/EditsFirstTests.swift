import BugSquasherGraph
import Testing

@Suite("EditsFirst: bulk work gives way to interactive saves")
struct EditsFirstTests {
    /// Milliseconds, as the gate's nanoseconds.
    private func ms(_ value: UInt64) -> UInt64 { value * 1_000_000 }

    /// Every stage asking during a pause waits until the same moment.
    @Test("bulk work waits until a window after the last interactive save")
    func pausesForTheWindow() {
        let gate = EditsFirst(window: .milliseconds(20))
        #expect(gate.pause(at: ms(1_000)) == 0, "no interactive save yet")
        gate.openWindow(at: ms(1_000))
        #expect(gate.pause(at: ms(1_005)) == ms(15))
        // A second stage (the chunk save beside the upsert) waits until the same end.
        #expect(gate.pause(at: ms(1_012)) == ms(8))
        #expect(gate.pause(at: ms(1_020)) == 0, "the window is over")
        #expect(gate.pause(at: ms(1_500)) == 0)
    }

    @Test("bulk work runs three windows between pauses, so edits cannot hold an import")
    func boundedUnderAStreamOfEdits() {
        let gate = EditsFirst(window: .milliseconds(20))
        gate.openWindow(at: ms(1_000))
        #expect(gate.pause(at: ms(1_000)) == ms(20))
        // Edits every 5 ms: no pause from the end of the first (1,020) until 1,080.
        var paused: UInt64 = 0
        var time = ms(1_020)
        while time < ms(1_080) {
            gate.openWindow(at: time)
            paused += gate.pause(at: time + ms(1))
            time += ms(5)
        }
        #expect(paused == 0)
        gate.openWindow(at: ms(1_080))
        #expect(gate.pause(at: ms(1_081)) == ms(19), "the next pause comes after three windows of running")
        // Over a long stream of edits, bulk work is paused at most a quarter of the time.
        var total: UInt64 = 0
        var now = ms(2_000)
        while now < ms(12_000) {
            gate.openWindow(at: now)
            let wait = gate.pause(at: now)
            total += wait
            now += max(wait, ms(1))
        }
        #expect(total <= ms(10_000) / 4 + ms(20), "\(total / 1_000_000) ms paused in 10 s")
        #expect(
            total >= ms(10_000) / 5,
            "\(total / 1_000_000) ms paused in 10 s: the gate should pause in each quiet period")
    }

    @Test("windowRemaining tells how long the edit window still runs, and grants no pause")
    func windowRemaining() {
        let gate = EditsFirst(window: .milliseconds(20))
        #expect(gate.windowRemaining(at: ms(1_000)) == 0, "no interactive save yet")
        gate.openWindow(at: ms(1_000))
        #expect(gate.windowRemaining(at: ms(1_005)) == ms(15))
        gate.openWindow(at: ms(1_002))
        #expect(gate.windowRemaining(at: ms(1_005)) == ms(17), "the commit counts the window again")
        // Asking granted no pause: bulk work asking now still gets the whole window.
        #expect(gate.pause(at: ms(1_010)) == ms(12))
        #expect(gate.windowRemaining(at: ms(1_022)) == 0)
    }

    @Test("a window of zero never pauses")
    func zeroWindow() {
        let gate = EditsFirst(window: .zero)
        gate.openWindow(at: ms(1_000))
        #expect(gate.pause(at: ms(1_000)) == 0)
    }
}
