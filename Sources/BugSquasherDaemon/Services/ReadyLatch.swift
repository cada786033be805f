import Synchronization

/// Calls its action once `count` parties have arrived.
final class ReadyLatch: Sendable {
    private let remaining: Mutex<Int>
    private let action: @Sendable () -> Void

    init(count: Int, action: @escaping @Sendable () -> Void) {
        remaining = Mutex(count)
        self.action = action
    }

    func arrive() {
        if remaining.withLock({
            $0 -= 1
            return $0 == 0
        }) {
            action()
        }
    }

    /// Whether every party arrived and the action ran.
    var isReady: Bool { remaining.withLock { $0 <= 0 } }
}
