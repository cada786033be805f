import BugSquasherGraph
import BugSquasherModel
import CoreMetrics
import Foundation

/// squasherd's metrics, through swift-metrics: what squasherd's main bootstraps (a Prometheus
/// registry) receives them; without a bootstrap they cost nothing. Names follow Prometheus's
/// conventions (units in the name, `_total` on counters). What each means: docs/OPERATIONS.md,
/// "Monitoring".
struct SquasherdMetrics: Sendable {
    let recordsRead = Counter(label: "squasherd_import_records_read_total")
    let recordsImported = Counter(label: "squasherd_import_records_imported_total")
    let recordsRejected = Counter(label: "squasherd_import_records_rejected_total")
    let chunks = Counter(label: "squasherd_import_chunks_total")
    let chunkCommit = CoreMetrics.Timer(label: "squasherd_import_chunk_commit_duration_seconds")
    let edits = Counter(label: "squasherd_edits_total")
    let editConflicts = Counter(label: "squasherd_edit_conflicts_total")
    let editBatches = Counter(label: "squasherd_edit_batches_total")
    let savesCommitted = Counter(label: "squasherd_saves_committed_total")
    let historyToken = Gauge(label: "squasherd_history_token")
    let didSavesSent = Counter(label: "squasherd_did_saves_sent_total")
    let commitToSend = CoreMetrics.Timer(label: "squasherd_commit_to_send_duration_seconds")
    let subscribers = Gauge(label: "squasherd_subscribers")
    let pendingChanges = Gauge(label: "squasherd_subscriber_pending_changes")
    let coalesced = Counter(label: "squasherd_subscriber_coalesced_saves_total")
    let resynced = Counter(label: "squasherd_subscriber_resyncs_total")
    let connectionsOpen = Gauge(label: "squasherd_connections_open")
    let connectionsRefused = Counter(label: "squasherd_connections_refused_total")
    let residentMemory = Gauge(label: "process_resident_memory_bytes")
    let openDescriptors = Gauge(label: "process_open_fds")
    let jobs: [JobState: Gauge] = Dictionary(
        uniqueKeysWithValues: JobState.allCases.map {
            ($0, Gauge(label: "squasherd_import_jobs", dimensions: [("state", $0.rawValue)]))
        })
}

/// The metrics of a store kept in a file (SQLite): the file's size, its write-ahead log's, and
/// its checkpoints. Made only for such a store, as ``SharedStoreMetrics`` only for a shared one:
/// a daemon reports what its store has.
struct FileStoreMetrics: Sendable {
    let size = Gauge(label: "squasherd_store_size_bytes")
    let walSize = Gauge(label: "squasherd_store_wal_size_bytes")
    let checkpoints: [CheckpointRun.Kind: CoreMetrics.Timer] = Dictionary(
        uniqueKeysWithValues: CheckpointRun.Kind.allCases.map {
            (
                $0,
                CoreMetrics.Timer(
                    label: "squasherd_store_checkpoint_duration_seconds", dimensions: [("kind", $0.rawValue)])
            )
        })
}

/// The metrics of a shared store's server (PostgreSQL): whether it answers, its outages, how far
/// this daemon is behind the store's newest save, and the daemons attached to the store. Made
/// only for such a store: on SQLite, a `squasherd_store_reachable` of 0 would read as an outage.
struct SharedStoreMetrics: Sendable {
    let reachable = Gauge(label: "squasherd_store_reachable")
    let outages = Counter(label: "squasherd_store_outages_total")
    let behind = Gauge(label: "squasherd_history_behind_saves")
    let answering = Gauge(label: "squasherd_store_daemons", dimensions: [("state", "answering")])
    let silent = Gauge(label: "squasherd_store_daemons", dimensions: [("state", "silent")])
}

extension CoreMetrics.Timer {
    /// Records the time from `start` to now.
    func recordSince(_ start: ContinuousClock.Instant) {
        let elapsed = (ContinuousClock.now - start).components
        recordNanoseconds(elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000)
    }
}
