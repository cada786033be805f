import NIOCore
import PostgresNIO
import Synchronization

/// The connections this process has begun to close and that have not closed yet, for a `COPY`
/// in flight on one of them to stop writing: postgres-nio stops the process (a precondition)
/// when its `COPY` writer is called on a connection that is closing. Why:
/// docs/DESIGN-NOTES.md, "A COPY writes only on an open connection".
enum ClosingConnections {
    private static let closing = Mutex<Set<ObjectIdentifier>>([])

    /// Closes `connection`, marked as closing before the close begins on its event loop: a
    /// `COPY`'s writer, which looks on that loop before each call (``isClosing(_:)``), never
    /// finds the connection closing unmarked, and a statement about to use it opens a new one
    /// instead. The connection is kept, and the mark names it, until it has closed.
    @discardableResult
    static func close(_ connection: PostgresConnection) -> EventLoopFuture<Void> {
        let key = ObjectIdentifier(connection)
        _ = closing.withLock { $0.insert(key) }
        return connection.eventLoop.flatSubmit { connection.close() }.always { _ in
            withExtendedLifetime(connection) { _ = closing.withLock { $0.remove(key) } }
        }
    }

    /// Whether `connection` has closed, or this process has asked to close it with
    /// ``close(_:)``. A connection the server ended has closed by the time postgres-nio leaves
    /// the statement under way.
    static func isClosing(_ connection: PostgresConnection) -> Bool {
        connection.isClosed || closing.withLock { $0.contains(ObjectIdentifier(connection)) }
    }

    /// Throws ``ConnectionClosedUnderStatement`` when `connection` is closing (``isClosing(_:)``).
    static func requireOpen(_ connection: PostgresConnection) throws {
        if isClosing(connection) { throw ConnectionClosedUnderStatement() }
    }
}
