import BugSquasherGraph
public import BugSquasherMetrics
import BugSquasherStack
public import BugSquasherTransport
import Foundation
public import Logging

/// squasherd: the store, the import runner, the notification hub and the two Varlink sockets, run
/// as swift-service-lifecycle services in one `ServiceGroup`. They start together and stop in
/// reverse order on SIGTERM/SIGINT: the sockets stop accepting, the import runner finishes its
/// current chunk, and the store checkpoints its WAL.
///
/// ```swift
/// let configuration = try DaemonConfiguration.resolve(stateDirectory: nil, runtimeDirectory: nil, configFile: nil)
/// try await SquasherDaemon(configuration: configuration, logger: Logger(label: "squasherd")).run()
/// ```
public struct SquasherDaemon: Sendable {
    /// The configuration.
    public let configuration: DaemonConfiguration
    /// Where the sockets listen; by default the configuration's paths, bound by the daemon.
    public var readAddress: VarlinkListenAddress
    /// Where the write socket listens.
    public var writeAddress: VarlinkListenAddress
    /// Called once the store is open and both sockets are bound.
    public var onReady: @Sendable () -> Void = {}
    /// Called with a one-line status whenever it changes (idle, importing job J: n of N …).
    public var onStatus: @Sendable (String) -> Void = { _ in }
    /// Called while the start waits for a PostgreSQL server it cannot reach yet (`store_wait`),
    /// before each pause, with a status and how much longer the start may take from now
    /// (squasherd extends systemd's start timeout by it).
    public var onWaitingForStore: @Sendable (_ status: String, _ budget: Duration) -> Void = { _, _ in }
    /// Called when graceful shutdown begins.
    public var onStopping: @Sendable () -> Void = {}
    /// Called before each shutdown step that may take a while (finishing the current chunk,
    /// checkpointing), with how long it may take.
    public var onShutdownStep: @Sendable (_ step: String, _ budget: Duration) -> Void = { _, _ in }
    /// SIGTERM and SIGINT caught since the process began (see ``StartupSignals``): one caught
    /// before the service group listens stops the daemon as soon as it runs.
    public var startupSignals: StartupSignals?
    /// When set, ``onWatchdog`` is called at half this interval, each time the store answered
    /// and the event loops turned; a wedged daemon stops calling it.
    public var watchdogInterval: Duration?
    /// The watchdog keep-alive.
    public var onWatchdog: @Sendable () -> Void = {}
    let logger: Logger
    /// The metrics registry squasherd's main bootstrapped, for `Jobs.Metrics` and the endpoint.
    public var metricsExporter: MetricsExporter?
    /// Where the metrics endpoint listens (`metrics_listen`, or the socket systemd passed named
    /// `metrics`); `nil` serves no endpoint (`squasherctl metrics` still reads them).
    public var metricsAddress: MetricsEndpoint.Address?

    /// Creates a daemon.
    public init(configuration: DaemonConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        readAddress = .path(configuration.readSocketPath, permissions: configuration.readSocketMode)
        writeAddress = .path(configuration.writeSocketPath, permissions: configuration.writeSocketMode)
    }

    /// Opens the store and serves until SIGTERM or SIGINT.
    ///
    /// - Throws: ``DaemonError`` when the state directory or the store cannot be used, saying why.
    public func run() async throws {
        try prepareDirectories()
        // One daemon per store, held until this function returns.
        let lock = try await StateDirectoryLock(directory: configuration.stateDirectory)
        defer { withExtendedLifetime(lock) {} }
        let opened: OpenedStore
        do {
            opened = try await openStore()
        } catch is StopBeforeStart {
            logger.notice("stopped while waiting for the store, before serving")
            return
        }
        defer { withExtendedLifetime(opened.lock) {} }
        try await serve(wire(opened))
        // Off the list of a shared store's daemons: a clean stop is not an outage.
        (opened.stack.store as? any StoreMembership)?.detach()
    }
}

/// SIGTERM or SIGINT came while the start waited for the store: the daemon stops without
/// having served, which is no failure.
struct StopBeforeStart: Error {}
