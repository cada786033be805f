import BugSquasherTransport
import ServiceLifecycle

/// Runs one socket server until graceful shutdown; a socket it cannot serve fails it with what
/// to do in squasherd's terms (``TransportError/wordedForSquasherdOperator``).
struct ServerService: Service {
    let server: VarlinkServer
    let ready: ReadyLatch
    let socketGuard: SocketFileGuard

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                try await server.run(onBound: {
                    if let path = server.address.path { socketGuard.bound(path) }
                    ready.arrive()
                })
            }
        } catch is CancellationError {
        } catch let error as TransportError {
            throw error.wordedForSquasherdOperator
        }
    }
}
