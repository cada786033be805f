import Logging
import ServiceLifecycle

/// Abandons idle uploads now and then (``ImportInterface/abandonIdleUploads(logger:)``).
struct UploadSweeper: Service {
    let imports: ImportInterface
    let interval: Duration
    let logger: Logger

    func run() async throws {
        await repeatUntilShutdown(every: interval) {
            await imports.abandonIdleUploads(logger: logger)
            return true
        }
    }
}
