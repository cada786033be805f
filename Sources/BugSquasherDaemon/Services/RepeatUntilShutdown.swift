import ServiceLifecycle

/// Runs `body` every `interval` until graceful shutdown begins or `body` returns `false`.
func repeatUntilShutdown(every interval: Duration, _ body: @escaping @Sendable () async -> Bool) async {
    do {
        try await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                guard await body() else { return }
            }
        }
    } catch {}
}
