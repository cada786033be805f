import NIOCore
import Synchronization

/// Holds the writes that a fan-out makes to many connections, and hands them to each
/// connection's event loop in one task per loop when the fan-out ends, so that each event loop
/// is woken once per fan-out rather than once per message.
/// Why it is built this way: docs/DESIGN-NOTES.md, "A fan-out wakes each event loop once".
public enum ChannelWriteBatch {
    /// The collector of the fan-out running on this thread or task, if any.
    @TaskLocal static var current: Collector?

    /// Runs `body` and returns what it returns; the writes that
    /// ``ChannelReplier/sendNow(continuing:)`` makes on this thread meanwhile are handed to
    /// their event loops, in the order they were made, when `body` returns (or throws).
    public static func collecting<Result>(_ body: () throws -> Result) rethrows -> Result {
        let collector = Collector()
        defer { collector.submit() }
        return try $current.withValue(collector, operation: body)
    }

    /// The writes of one fan-out, by event loop. A task started inside ``collecting(_:)``
    /// inherits the collector and may outlive the fan-out: its writes after the end are not
    /// held (``add(_:to:)`` says so), and the lock keeps its writes during the fan-out safe.
    final class Collector: Sendable {
        /// The held writes by event loop; `nil` once they were handed over.
        private let writes = Mutex<[(loop: any EventLoop, messages: [(any Channel, ByteBuffer)])]?>([])

        /// Holds `message` for `channel` until the fan-out ends; `false` when it has ended, and
        /// the caller hands the message over itself.
        func add(_ message: ByteBuffer, to channel: any Channel) -> Bool {
            writes.withLock { writes in
                guard writes != nil else { return false }
                // A daemon has a loop per core: a scan of two or four beats hashing.
                if let index = writes?.firstIndex(where: { $0.loop === channel.eventLoop }) {
                    writes?[index].messages.append((channel, message))
                } else {
                    writes?.append((channel.eventLoop, [(channel, message)]))
                }
                return true
            }
        }

        /// Hands every loop its messages in one task; later writes are not held.
        func submit() {
            let held = writes.withLock { writes in
                defer { writes = nil }
                return writes ?? []
            }
            for (loop, messages) in held {
                loop.execute {
                    for (channel, message) in messages { channel.writeAndFlush(message, promise: nil) }
                }
            }
        }
    }
}
