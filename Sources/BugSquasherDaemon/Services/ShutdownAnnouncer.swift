import ServiceLifecycle

/// Calls its action as soon as graceful shutdown begins.
struct ShutdownAnnouncer: Service {
    let action: @Sendable () -> Void

    func run() async throws {
        try? await gracefulShutdown()
        action()
    }
}
