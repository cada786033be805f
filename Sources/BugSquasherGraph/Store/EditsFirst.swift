import Foundation
import Synchronization

/// Gives an interactive save (an edit, a client's save) the machine for a moment after it commits:
/// bulk work that calls ``yieldToInteractiveSaves()`` pauses from when the save gets the store's
/// writer until ``window`` after it committed (the store calls ``openWindow(at:)`` at both), so the
/// save's did-save reaches its subscribers without an import in its way.
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "Imports give way to edits".
public final class EditsFirst: Sendable {
    /// How long bulk work waits after an interactive save commits.
    public let window: Duration
    private let windowNanoseconds: UInt64
    /// When the last interactive save committed (``now()``; 0: none yet).
    private let lastInteractiveSave = Atomic<UInt64>(0)
    /// When the pause granted last ends: bulk work that asks before then waits until then, and
    /// is not paused again for three windows after it.
    private let pauseEnds = Atomic<UInt64>(0)

    /// Bulk work runs for this many windows after a pause before it can pause again.
    static let runningWindows: UInt64 = 3

    /// Creates a gate with `window` (zero: bulk work never waits).
    public init(window: Duration) {
        self.window = window
        let (seconds, attoseconds) = window.components
        windowNanoseconds = UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds / 1_000_000_000))
    }

    /// The monotonic clock the gate reads, in nanoseconds.
    public static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Opens the window from `time` (now, unless given), or opens it again: a store calls it
    /// when an interactive save gets the writer, so that a step of bulk work under way reaches
    /// its next yield point by the time the save commits, and again at the commit, before the
    /// save's did-save goes to its subscribers. A save that rolls back ends its pause after one
    /// window.
    public func openWindow(at time: UInt64 = EditsFirst.now()) {
        guard windowNanoseconds > 0 else { return }
        lastInteractiveSave.store(time, ordering: .relaxed)
    }

    /// When the open window ends (`nil`: none is open at `time`).
    private func windowEnd(at time: UInt64) -> UInt64? {
        guard windowNanoseconds > 0 else { return nil }
        let last = lastInteractiveSave.load(ordering: .relaxed)
        guard last > 0, time < last + windowNanoseconds else { return nil }
        return last + windowNanoseconds
    }

    /// How many nanoseconds bulk work asking at `time` should wait (0: go on). Granting a pause
    /// is recorded, so every bulk stage asking during it waits until the same moment.
    public func pause(at time: UInt64 = EditsFirst.now()) -> UInt64 {
        guard let newEnd = windowEnd(at: time) else { return 0 }
        let ends = pauseEnds.load(ordering: .relaxed)
        if time < ends { return ends - time }
        // Bulk work runs after each pause before it can pause again.
        if ends > 0, time < ends + Self.runningWindows * windowNanoseconds { return 0 }
        let (exchanged, current) = pauseEnds.compareExchange(expected: ends, desired: newEnd, ordering: .relaxed)
        // Another stage granted a pause at the same moment: wait for that one.
        let granted = exchanged ? newEnd : current
        return granted > time ? granted - time : 0
    }

    /// Nanoseconds until the open window ends (0: none is open), for work that is not bulk but
    /// can wait without harm — catching up a subscriber that fell behind — and must not block
    /// its thread. Asking grants no pause: it neither waits for nor starts one of bulk work's
    /// pauses.
    public func windowRemaining(at time: UInt64 = EditsFirst.now()) -> UInt64 {
        windowEnd(at: time).map { $0 - time } ?? 0
    }

    /// Blocks the calling thread while bulk work should give way (at most one window). Call it
    /// only on threads of bulk work, never on a cooperative thread or while holding the writer.
    public func yieldToInteractiveSaves() {
        let wait = pause()
        if wait > 0 { usleep(UInt32(min(wait / 1_000, UInt64(UInt32.max)))) }
    }
}
