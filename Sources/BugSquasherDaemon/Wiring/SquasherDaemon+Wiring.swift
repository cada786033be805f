import BugSquasherGraph
import BugSquasherMetrics
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherTransport
import BugSquasherVarlink
import CoreMetrics
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals

/// The parts of a running daemon, wired to its open store: the services of its service group,
/// and what the end of the group is read from.
struct Wiring {
    /// The services, in the order the group starts them.
    var services: [ServiceGroupConfiguration.ServiceConfiguration]
    /// The write socket's thread, shut down once the group ends.
    let writeSocketThread: EventLoopExecutor
    /// Why the store file was lost, if it was.
    let fileLoss: StoreFileLoss
    /// Why a socket file was lost, if one was.
    let socketGuard: SocketFileGuard
    /// The store, when it can tell that its server no longer holds it.
    let identity: (any IdentityChecking)?
}

/// The Varlink service, and what the services beside it need of the interfaces behind it.
private struct Interfaces {
    let service: VarlinkService
    let runner: ImportRunner
    let imports: ImportInterface
    let status: StatusReporter
    let hub: NotificationHub
    let metrics: SquasherdMetrics
    /// What `Jobs.Metrics` answers, set once the collector is built.
    let metricsText: MetricsText
}

extension SquasherDaemon {
    /// Builds the daemon's parts on the open store.
    func wire(_ opened: OpenedStore) -> Wiring {
        let interfaces = makeInterfaces(opened)
        let (logger, configuration, readAddress, writeAddress, onReady) = (
            self.logger, self.configuration, self.readAddress, self.writeAddress, self.onReady
        )
        let ready = ReadyLatch(count: 2) {
            logger.info(
                "ready",
                metadata: [
                    "store": "\(configuration.storeDescription)", "socket.read": "\(readAddress)",
                    "socket.write": "\(writeAddress)",
                ])
            onReady()
            interfaces.status.publish()
        }
        let connectionLimit = Self.connectionLimit(configuration, logger: logger)
        let collect = Self.metricsCollector(
            opened.stack, hub: interfaces.hub, metrics: interfaces.metrics, connectionLimit: connectionLimit,
            daemon: opened.identity.id)
        interfaces.metricsText.set { [metricsExporter] in metricsExporter?.text(collect: collect) }
        // The write socket has a thread of its own, its event loop, on which its connections
        // are served, and so are its edits and deletes: an edit is read, saved and answered on
        // one thread, without hops to a write thread and back; neither edits waiting for the
        // writer nor an upload's spooling block the cooperative pool or the read socket's loops.
        let writeSocketThread = EventLoopExecutor()
        let servers = makeServers(
            interfaces.service, connectionLimit: connectionLimit, writeSocketThread: writeSocketThread)
        let socketGuard = SocketFileGuard(
            paths: [readAddress.path, writeAddress.path].compactMap { $0 }, ready: ready, logger: logger)
        var wiring = Wiring(
            services: [], writeSocketThread: writeSocketThread, fileLoss: StoreFileLoss(), socketGuard: socketGuard,
            identity: opened.stack.store as? any IdentityChecking)
        wiring.services = makeServices(
            opened.stack, interfaces: interfaces, servers: servers, ready: ready, connectionLimit: connectionLimit,
            wiring: wiring)
        if let metricsExporter, let metricsAddress {
            wiring.services.append(
                .init(
                    service: MetricsEndpoint(
                        address: metricsAddress, exporter: metricsExporter, logger: logger, collect: collect)))
        }
        return wiring
    }

    /// Runs the service group until SIGTERM or SIGINT, or until a guard stops it.
    func serve(_ wiring: Wiring) async throws {
        let group = ServiceGroup(
            configuration: .init(
                services: wiring.services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            try? await wiring.writeSocketThread.shutdown()
            throw error
        }
        try? await wiring.writeSocketThread.shutdown()
        if let loss = wiring.fileLoss.problem {
            throw DaemonError(
                "Stopped because \(loss.problem) while squasherd ran. \(loss.rescue)", advice: loss.advice)
        }
        if let problem = wiring.identity?.identityProblem() {
            throw DaemonError(
                "Stopped because \(problem) while squasherd ran.",
                advice:
                    "Start it again: it opens the store the database holds now (or makes a new one), and its clients, told of the new store's identifier, start over on it."
            )
        }
        if let problem = wiring.socketGuard.problem {
            throw DaemonError(
                "Stopped because \(problem) while squasherd ran.", advice: "Start it again: it binds its sockets anew.")
        }
        logger.info("stopped")
    }

    /// The notification hub, the import runner and the four Varlink interfaces, in one service.
    private func makeInterfaces(_ opened: OpenedStore) -> Interfaces {
        let (stack, editsFirst, watermark) = (opened.stack, opened.editsFirst, opened.watermark)
        let hub = NotificationHub { offers in ChannelWriteBatch.collecting(offers) }
        let status = StatusReporter(hub: hub, onStatus: onStatus)
        // Saves to the store, off the cooperative pool (see ThreadExecutor).
        let writers = ThreadExecutor.writers()
        // What went wrong lately, noted by the interfaces and the runner, judged by Status.
        let health = HealthRecord()
        let metrics = SquasherdMetrics()
        let runner = ImportRunner(
            stack: stack, configuration: configuration, identity: opened.identity, writers: writers,
            editsFirst: editsFirst, health: health, metrics: metrics, logger: logger
        ) { activity in status.update(activity) }
        // Every commit reaches the hub from the store's writer, in token order.
        if let store = stack.store as? any CommitObservable {
            store.observeCommits { didSave in
                // Subscribers first: the record is a write to a file that no one waits for.
                let committed = ContinuousClock.now
                hub.publish(didSave)
                metrics.commitToSend.recordSince(committed)
                metrics.savesCommitted.increment()
                metrics.didSavesSent.increment(by: hub.count)
                watermark?.record(storeIdentifier: didSave.storeIdentifier, token: didSave.token)
            }
        } else {
            stack.observeDidSaves { didSave in hub.publish(didSave) }
        }
        (stack.store as? any SharedStore)?.observeHistoryGaps { _ in hub.lostHistory() }
        (stack.store as? any SharedStore)?.screenInsertsOfOthers { hub.insertInterest(of: $0) }
        (stack.store as? any Checkpointing)?.observeCheckpoints { [file = FileStoreMetrics()] run in
            file.checkpoints[run.kind]?.recordNanoseconds(
                run.duration.components.seconds * 1_000_000_000 + run.duration.components.attoseconds / 1_000_000_000)
        }
        let coding = WireCoding(model: stack.model)
        let registrationLimits = RegistrationLimits(
            perSubscription: configuration.maximumRegistrationsPerSubscriber, total: configuration.maximumRegistrations)
        // Clients' store reads, off the cooperative pool (see ThreadExecutor).
        let readers = ThreadExecutor.readers()
        let changes = ChangesInterface(
            stack: stack, hub: hub, coding: coding, pendingLimit: configuration.subscriberPendingLimit,
            registrationLimits: registrationLimits, readers: readers, editsFirst: editsFirst, health: health,
            metrics: metrics)
        let store = StoreInterface(stack: stack, coding: coding, readers: readers)
        let jobs = JobsInterface(
            stack: stack, hub: hub, activeJob: { status.activeJob }, waitingJob: { status.waitingJob },
            book: runner.book,
            storeDescription: "\(stack.store.storeType) \(configuration.storeDescription)", health: health,
            executor: ThreadExecutor.daemonCalls())
        let imports = ImportInterface(
            stack: stack, runner: runner, configuration: configuration, uploads: UploadRegistry(), health: health,
            metrics: metrics,
            edits: (stack.store as? any BatchEditable).map { EditQueue(store: $0, batches: metrics.editBatches) })
        let service = VarlinkService(
            vendor: "BugSquasher", product: "squasherd", version: BugSquasherVersion.current,
            url: "https://github.com/bugsquasher/bugsquasher",
            interfaces: [changes, store, jobs, imports],
            internalError: { VarlinkError.internalError($0) }
        )
        return Interfaces(
            service: service, runner: runner, imports: imports, status: status, hub: hub, metrics: metrics,
            metricsText: jobs.metricsText)
    }

    /// The read and the write socket's servers. They share limits: connections, bytes of
    /// messages still arriving, and bytes of large replies not yet read (whose memory goes back
    /// to the system once they are written).
    private func makeServers(
        _ service: VarlinkService, connectionLimit: ConnectionLimit, writeSocketThread: EventLoopExecutor
    ) -> [VarlinkServer] {
        let incomingBudget = IncomingMessageBudget(
            limit: max(configuration.maximumIncomingBytes, configuration.maximumMessageSize))
        let outgoingBudget = OutgoingReplyBudget(limit: configuration.maximumOutgoingBytes) { returnFreedMemory() }
        return [
            VarlinkServer(
                name: "read", address: readAddress, mayWrite: false, service: service,
                maximumMessageSize: configuration.maximumMessageSize,
                connectionLimit: connectionLimit, incomingBudget: incomingBudget, outgoingBudget: outgoingBudget,
                wording: .squasherd, logger: logger
            ),
            VarlinkServer(
                name: "write", address: writeAddress, mayWrite: true, service: service,
                maximumMessageSize: configuration.maximumMessageSize,
                connectionLimit: connectionLimit, incomingBudget: incomingBudget, outgoingBudget: outgoingBudget,
                wording: .squasherd, group: writeSocketThread.loop, executor: writeSocketThread, logger: logger
            ),
        ]
    }

    /// The services of the group, in the order it starts them (and so the reverse of the
    /// order it stops them).
    private func makeServices(
        _ stack: PersistentStack, interfaces: Interfaces, servers: [VarlinkServer], ready: ReadyLatch,
        connectionLimit: ConnectionLimit, wiring: Wiring
    ) -> [ServiceGroupConfiguration.ServiceConfiguration] {
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(
                service: StoreService(
                    stack: stack, fileLoss: wiring.fileLoss, logger: logger, onShutdownStep: onShutdownStep)),
            .init(service: interfaces.runner),
        ]
        if let store = stack.store as? any FileBacked {
            // Returns when the store file is gone: the daemon then stops (see StoreFileGuard).
            services.append(
                .init(
                    service: StoreFileGuard(store: store, loss: wiring.fileLoss, logger: logger),
                    successTerminationBehavior: .gracefullyShutdownGroup))
        }
        if let identity = wiring.identity {
            // Returns when the database no longer holds the store: the daemon then stops.
            services.append(
                .init(
                    service: StoreIdentityGuard(store: identity), successTerminationBehavior: .gracefullyShutdownGroup))
        }
        let socketGuard = wiring.socketGuard
        services += servers.map { .init(service: ServerService(server: $0, ready: ready, socketGuard: socketGuard)) }
        if !socketGuard.paths.isEmpty {
            // Returns when a socket file is gone: the daemon then stops (see SocketFileGuard).
            services.append(.init(service: socketGuard, successTerminationBehavior: .gracefullyShutdownGroup))
        }
        services.append(.init(service: ClosedConnectionsTrimmer(limit: connectionLimit)))
        services.append(
            .init(
                service: UploadSweeper(
                    imports: interfaces.imports, interval: min(configuration.uploadIdleTimeout / 2, .seconds(30)),
                    logger: logger)))
        if let store = stack.store as? any HistoryPruning {
            services.append(
                .init(
                    service: HistoryPruner(
                        store: store, days: configuration.historyRetentionDays,
                        saves: configuration.historyRetentionSaves, interval: .seconds(300), logger: logger)))
        }
        if let watchdogInterval {
            services.append(
                .init(
                    service: WatchdogService(
                        stack: stack, interval: watchdogInterval, ready: ready, logger: logger, onHealthy: onWatchdog)))
        }
        if let startupSignals {
            // Stops the group when it starts, if a signal came while squasherd started.
            services.append(
                .init(
                    service: StartupStopService(signals: startupSignals, logger: logger),
                    successTerminationBehavior: .gracefullyShutdownGroup))
        }
        // Last in the list, first to hear of the shutdown: reports it before anything stops.
        let (onShutdownStep, onStopping, imports) = (onShutdownStep, onStopping, interfaces.imports)
        services.append(
            .init(
                service: ShutdownAnnouncer {
                    imports.stopUploads()
                    onStopping()
                    onShutdownStep("Stopping: finishing the current import chunk", .seconds(30))
                }))
        return services
    }

    /// Raises the file descriptor limit as far as allowed and sizes the connection limit to it
    /// (or to `max_connections`, when it fits).
    private static func connectionLimit(_ configuration: DaemonConfiguration, logger: Logger) -> ConnectionLimit {
        let descriptors = FileDescriptorLimit.raiseToHardLimit()
        let fitting = ConnectionLimit.fitting(descriptorLimit: descriptors.after).maximum
        if fitting < 64 {
            logger.warning(
                "The file descriptor limit is \(descriptors.after), so squasherd serves at most \(fitting) connections at once. Raise it (LimitNOFILE= in the unit, ulimit -n in a shell) to at least 1024."
            )
        }
        var maximum = fitting
        if let wanted = configuration.maximumConnections {
            if wanted <= fitting {
                maximum = wanted
            } else {
                logger.warning(
                    "max_connections = \(wanted) does not fit the file descriptor limit of \(descriptors.after); serving at most \(fitting) connections. Raise LimitNOFILE= (or ulimit -n) to allow more."
                )
            }
        }
        logger.info(
            "connection limit",
            metadata: [
                "connections.max": "\(maximum)", "descriptors.limit": "\(descriptors.after)",
                "descriptors.limit.before": "\(descriptors.before)",
            ])
        return ConnectionLimit(maximum: maximum)
    }
}
