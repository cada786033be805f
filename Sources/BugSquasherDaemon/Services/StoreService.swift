import BugSquasherGraph
import BugSquasherStack
import Foundation
import Logging
import ServiceLifecycle

/// Keeps the store open while the daemon runs; checkpoints its WAL when the daemon stops.
struct StoreService: Service {
    let stack: PersistentStack
    let fileLoss: StoreFileLoss
    let logger: Logger
    let onShutdownStep: @Sendable (String, Duration) -> Void

    func run() async throws {
        try? await gracefulShutdown()
        if let store = stack.store as? any Checkpointing {
            onShutdownStep("Stopping: checkpointing the store", .seconds(30))
            do {
                try store.checkpoint()
                logger.info("store checkpointed")
            } catch {
                // Nothing is lost: the committed saves are in the WAL, which SQLite replays when
                // the store opens next.
                logger.error(
                    "checkpoint failed; the WAL stays beside the store and is replayed when it opens next",
                    metadata: ["error": "\(error)"])
            }
        }
        if fileLoss.problem != nil, let store = stack.store as? any FileBacked { rescue(store) }
    }

    /// Copies what the open store holds to a file beside its path, once nothing writes to it.
    private func rescue(_ store: any FileBacked) {
        let path = store.url.path
        let copy =
            path + SquasherDaemon.rescueSuffix
            + Date().formatted(
                .iso8601.year().month().day().time(includingFractionalSeconds: false).timeSeparator(.omitted))
        onShutdownStep("Stopping: copying the store whose file was deleted", .seconds(300))
        // A directory moved or removed with the store: the copy goes where the store was, in the
        // directory made again. A moved one still holds the store, every save included.
        let directory = store.url.deletingLastPathComponent().path
        let directoryGone = !FileManager.default.fileExists(atPath: directory)
        if directoryGone {
            try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let moved =
            directoryGone
            ? " If the directory was moved rather than removed, the store in its new place holds every save too." : ""
        do {
            try store.writeCopy(to: copy)
            fileLoss.rescued(
                "What it held, every save included, is copied to \(copy).\(moved)",
                advice: "Move that copy to \(path) and start squasherd again.")
        } catch {
            fileLoss.rescued(
                "Copying what it held to \(copy) failed too (\((error as? GraphError)?.message ?? "\(error)")); the saves since the file was lost are lost with it, unless the directory was moved rather than removed: then the store in its new place holds them.",
                advice: "Otherwise restore the store from a backup."
            )
        }
    }
}
