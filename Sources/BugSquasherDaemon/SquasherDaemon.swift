import BugSquasherGraph
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherSQLite
import BugSquasherStack
public import BugSquasherTransport
import BugSquasherVarlink
import Foundation
public import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// squasherd: the store, the import runner, the notification hub and the two Varlink sockets,
/// run as swift-service-lifecycle services in one `ServiceGroup`.
///
/// Services start together and stop in reverse order on SIGTERM/SIGINT: the sockets stop
/// accepting, the import runner finishes its current chunk, and the store checkpoints its WAL.
///
/// ```swift
/// let daemon = SquasherDaemon(configuration: try .resolve(stateDirectory: nil, runtimeDirectory: nil, configFile: nil),
///                             logger: Logger(label: "squasherd"))
/// try await daemon.run()
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
    private let logger: Logger

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
        // A socket path that cannot be bound is refused before the store is created.
        for path in [readAddress.path, writeAddress.path].compactMap(\.self) { try VarlinkServer.checkSocketPath(path) }
        for directory in [configuration.stateDirectory, configuration.spoolDirectory, configuration.runtimeDirectory] {
            do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), !isDirectory.boolValue {
                    throw DaemonError("Cannot use \(directory) as a directory: a file is there. Move it away, or point --state-directory/--runtime-directory elsewhere.")
                }
                if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: directory) {
                    // The system's "file exists" would send the operator looking for a file.
                    throw DaemonError("Cannot use \(directory) as a directory: it is a symbolic link to \(target), which leads to no directory (a missing place, or a loop of links). Mend the link, or point --state-directory/--runtime-directory elsewhere.")
                }
                let reason = error.localizedDescription.trimmingCharacters(in: CharacterSet(charactersIn: ". "))
                throw DaemonError("Cannot create \(directory): \(reason). Create it, or point --state-directory/--runtime-directory elsewhere.")
            }
        }
        guard FileManager.default.isWritableFile(atPath: configuration.stateDirectory) else {
            if SQLiteStore.isOnReadOnlyFileSystem(configuration.stateDirectory) {
                throw DaemonError("The state directory \(configuration.stateDirectory) is on a file system mounted read-only; remount it read-write, or choose another --state-directory.")
            }
            if let problem = SQLiteStore.markProblem(of: [configuration.stateDirectory]) {
                throw DaemonError("The state directory cannot be written: \(problem).")
            }
            throw DaemonError("The state directory \(configuration.stateDirectory) is not writable by this user; fix its permissions or choose another one.")
        }
        // One daemon per store, held until this function returns.
        let lock = try await StateDirectoryLock(directory: configuration.stateDirectory)
        defer { withExtendedLifetime(lock) {} }
        try Self.refuseEmptiedStore(at: configuration.storePath)
        try Self.refuseStoreReplacedByRescue(at: configuration.storePath)
        // The store file too, before it is opened when it exists (or right after it is created).
        var storeLock = FileManager.default.fileExists(atPath: configuration.storePath) ? try StoreFileLock(path: configuration.storePath) : nil
        // Imports give way to edits for a moment after each commits (decoding and upserting
        // between records, and the store's chunk saves).
        let editsFirst = EditsFirst(window: configuration.importYield)
        let stack: PersistentStack
        do {
            let store = try SQLiteStore(url: URL(filePath: configuration.storePath), logger: logger, editsFirst: editsFirst)
            stack = try PersistentStack(model: BugModel.model, store: store, logger: logger)
        } catch let error as GraphError {
            throw DaemonError("Refusing to start: the store \(configuration.storePath) cannot be used. \(error.message)")
        }
        if storeLock == nil { storeLock = try StoreFileLock(path: configuration.storePath) }
        defer { withExtendedLifetime(storeLock) {} }
        if let store = stack.store as? any SelfChecking {
            let findings: [String]
            do { findings = try store.quickCheck() } catch let error as GraphError {
                throw DaemonError("Refusing to start: the store \(configuration.storePath) cannot be read. \(error.message)")
            }
            guard findings == ["ok"] else {
                throw DaemonError("Refusing to start: the store \(configuration.storePath) is damaged (\(findings.prefix(3).joined(separator: "; "))). Restore it from a backup, or move it away to start with an empty store and re-import.")
            }
        }
        // The store must be the one last saved to here, with every save committed (see
        // SaveWatermark); a store without saves (created now, or again) starts the record over.
        let watermark = try SaveWatermark(directory: configuration.stateDirectory)
        let storeIdentifier = stack.mainCoordinator.storeIdentifier
        let newestToken = try stack.store.currentHistoryToken()
        if let content = watermark.unreadableContent() {
            logger.warning("\(watermark.path) holds no record of the last save (it begins \(content.debugDescription)), so this start could not check that the store kept every save and is the one squasherd saved to here; the record is written anew from the store. If the store's files were not replaced or restored, nothing is lost.", metadata: ["store.path": "\(configuration.storePath)"])
        }
        if newestToken.rawValue > 0 {
            try watermark.check(storeIdentifier: storeIdentifier, token: newestToken.rawValue, storePath: configuration.storePath)
        } else if let (previous, token) = watermark.recorded(), previous != storeIdentifier {
            logger.notice("a new store: the one squasherd last saved to here is gone", metadata: ["store.path": "\(configuration.storePath)", "store.previous": "\(previous)", "store.previous.token": "\(token)"])
        }
        watermark.record(storeIdentifier: storeIdentifier, token: newestToken)
        try await failInterruptedUploads(stack)
        try await removeSpoolsOfEndedJobs(stack)

        let hub = NotificationHub { offers in ChannelWriteBatch.collecting(offers) }
        let status = StatusReporter(hub: hub, onStatus: onStatus)
        // Saves to the store, off the cooperative pool (see ThreadExecutor).
        let writers = ThreadExecutor.writers()
        let runner = ImportRunner(stack: stack, configuration: configuration, writers: writers, editsFirst: editsFirst, logger: logger) { progress in status.update(progress) }
        // Every commit reaches the hub from the store's writer, in token order.
        if let store = stack.store as? any CommitObservable {
            store.observeCommits { didSave in
                // Subscribers first: the record is a write to a file that no one waits for.
                hub.publish(didSave)
                watermark.record(storeIdentifier: didSave.storeIdentifier, token: didSave.token)
            }
        } else {
            stack.observeDidSaves { didSave in hub.publish(didSave) }
        }
        let coding = WireCoding(model: stack.model)
        let registrationLimits = RegistrationLimits(perSubscription: configuration.maximumRegistrationsPerSubscriber, total: configuration.maximumRegistrations)
        // Clients' store reads, off the cooperative pool (see ThreadExecutor).
        let readers = ThreadExecutor.readers()
        let changes = ChangesInterface(stack: stack, hub: hub, coding: coding, pendingLimit: configuration.subscriberPendingLimit, registrationLimits: registrationLimits, readers: readers, editsFirst: editsFirst)
        let store = StoreInterface(stack: stack, coding: coding, readers: readers)
        let jobs = JobsInterface(stack: stack, hub: hub, activeJob: { status.activeJob }, book: runner.book)
        let imports = ImportInterface(stack: stack, runner: runner, configuration: configuration, uploads: UploadRegistry())
        let service = VarlinkService(
            vendor: "BugSquasher", product: "squasherd", version: BugSquasherVersion.current, url: "https://github.com/bugsquasher/bugsquasher",
            interfaces: [changes, store, jobs, imports]
        )
        let ready = ReadyLatch(count: 2) {
            logger.info("ready", metadata: ["store.path": "\(configuration.storePath)", "socket.read": "\(readAddress)", "socket.write": "\(writeAddress)"])
            onReady()
            status.publish()
        }
        // Limits both sockets share: connections, bytes of messages still arriving, and bytes of
        // large replies not yet read (whose memory goes back to the system once they are written).
        let connectionLimit = Self.connectionLimit(configuration, logger: logger)
        let incomingBudget = IncomingMessageBudget(limit: max(configuration.maximumIncomingBytes, configuration.maximumMessageSize))
        let outgoingBudget = OutgoingReplyBudget(limit: configuration.maximumOutgoingBytes) { returnFreedMemory() }
        // The write socket has a thread of its own, its event loop, on which its connections
        // are served, and so are its edits and deletes: an edit is read, saved and answered on
        // one thread, without hops to a write thread and back; neither edits waiting for the
        // writer nor an upload's spooling block the cooperative pool or the read socket's loops.
        let writeSocketThread = EventLoopExecutor()
        let servers = [
            VarlinkServer(
                name: "read", address: readAddress, mayWrite: false, service: service, maximumMessageSize: configuration.maximumMessageSize,
                connectionLimit: connectionLimit, incomingBudget: incomingBudget, outgoingBudget: outgoingBudget, logger: logger
            ),
            VarlinkServer(
                name: "write", address: writeAddress, mayWrite: true, service: service, maximumMessageSize: configuration.maximumMessageSize,
                connectionLimit: connectionLimit, incomingBudget: incomingBudget, outgoingBudget: outgoingBudget, group: writeSocketThread.loop, executor: writeSocketThread, logger: logger
            ),
        ]
        let fileLoss = StoreFileLoss()
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: StoreService(stack: stack, fileLoss: fileLoss, logger: logger, onShutdownStep: onShutdownStep)),
            .init(service: runner),
        ]
        if let store = stack.store as? any FileBacked {
            // Returns when the store file is gone: the daemon then stops (see StoreFileGuard).
            services.append(.init(service: StoreFileGuard(store: store, loss: fileLoss, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup))
        }
        let socketGuard = SocketFileGuard(paths: [readAddress.path, writeAddress.path].compactMap { $0 }, ready: ready, logger: logger)
        services += servers.map { .init(service: ServerService(server: $0, ready: ready, socketGuard: socketGuard)) }
        if !socketGuard.paths.isEmpty {
            // Returns when a socket file is gone: the daemon then stops (see SocketFileGuard).
            services.append(.init(service: socketGuard, successTerminationBehavior: .gracefullyShutdownGroup))
        }
        services.append(.init(service: ClosedConnectionsTrimmer(limit: connectionLimit)))
        services.append(.init(service: UploadSweeper(imports: imports, interval: min(configuration.uploadIdleTimeout / 2, .seconds(30)), logger: logger)))
        if let watchdogInterval {
            services.append(.init(service: WatchdogService(stack: stack, interval: watchdogInterval, ready: ready, logger: logger, onHealthy: onWatchdog)))
        }
        if let startupSignals {
            // Stops the group when it starts, if a signal came while squasherd started.
            services.append(.init(service: StartupStopService(signals: startupSignals, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup))
        }
        // Last in the list, first to hear of the shutdown: reports it before anything stops.
        let onShutdownStep = self.onShutdownStep
        let onStopping = self.onStopping
        services.append(.init(service: ShutdownAnnouncer {
            imports.stopUploads()
            onStopping()
            onShutdownStep("Stopping: finishing the current import chunk", .seconds(30))
        }))
        let group = ServiceGroup(configuration: .init(
            services: services,
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        ))
        do {
            try await group.run()
        } catch {
            try? await writeSocketThread.shutdown()
            throw error
        }
        try? await writeSocketThread.shutdown()
        if let loss = fileLoss.problem {
            throw DaemonError("Stopped because \(loss.problem) while squasherd ran. \(loss.rescue)")
        }
        if let problem = socketGuard.problem {
            throw DaemonError("Stopped because \(problem) while squasherd ran. Start it again: it binds its sockets anew.")
        }
        logger.info("stopped")
    }

    /// The suffix of the copy squasherd writes of a store whose file was deleted while it ran.
    static let rescueSuffix = ".rescued-"

    /// A copy squasherd rescued when the store file or its write-ahead log was deleted while it
    /// ran, beside a store that is missing or older than the copy: starting would serve an empty
    /// store, or one without the saves the copy holds (and systemd restarts squasherd at once).
    private static func refuseStoreReplacedByRescue(at path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let prefix = (path as NSString).lastPathComponent + rescueSuffix
        guard let rescued = (try? FileManager.default.contentsOfDirectory(atPath: directory))?.filter({ $0.hasPrefix(prefix) }).max() else { return }
        func modified(_ file: String) -> Date? { (try? FileManager.default.attributesOfItem(atPath: file))?[.modificationDate] as? Date }
        guard FileManager.default.fileExists(atPath: path) else {
            throw DaemonError("Refusing to start: the store \(path) is missing, and \(directory)/\(rescued) is the copy squasherd wrote when the store file was deleted while it ran. Move that copy to \(path) to go on with it; or, to start over with an empty store, move it out of \(directory).")
        }
        if let copy = modified(directory + "/" + rescued), let store = modified(path), copy > store {
            throw DaemonError("Refusing to start: \(directory)/\(rescued) is the copy squasherd wrote when the store or its write-ahead log was deleted while it ran, and it is newer than the store \(path), which may lack the saves since. Move the copy to \(path) to go on with it (keep the old file elsewhere until you are sure); or, to go on with the store as it is, move the copy out of \(directory).")
        }
    }

    /// squasherd creates its store file when it is missing, and SQLite writes the file's header
    /// as it does; SQLite would read an existing file of 0 bytes as a new, empty store. Such a
    /// file is a store truncated to nothing (a failed copy, `> bugs.sqlite`), so it is refused
    /// rather than quietly replaced by an empty store.
    private static func refuseEmptiedStore(at configuredPath: String) throws {
        // Through a symlink, the file it points to, with its -wal beside it, as SQLite sees it.
        let path = SQLiteStore.resolvedPath(configuredPath)
        // Before the store lock opens the file, which would block on a FIFO (SQLiteStore checks
        // again for its other users).
        if let problem = SQLiteStore.notFilesProblem(path) { throw DaemonError("Refusing to start: \(problem)") }
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int, size == 0,
              // A log with commits rebuilds the store; an empty one left beside it does not.
              !SQLiteStore.logMayHoldCommits(path),
              // squasherd was stopped while it created the store: it creates it again.
              !FileManager.default.fileExists(atPath: SQLiteStore.creationMarkerPath(for: path)) else { return }
        throw DaemonError("Refusing to start: the store \(path) is an empty file (0 bytes). squasherd creates the store itself when the file is missing, so an empty one is a store that was truncated or replaced; starting on it would serve an empty store in its place. Restore the file from a backup; or, to start over with an empty store, delete it.")
    }

    /// Raises the file descriptor limit as far as allowed and sizes the connection limit to it
    /// (or to `max_connections`, when it fits).
    private static func connectionLimit(_ configuration: DaemonConfiguration, logger: Logger) -> ConnectionLimit {
        let descriptors = FileDescriptorLimit.raiseToHardLimit()
        let fitting = ConnectionLimit.fitting(descriptorLimit: descriptors.after).maximum
        if fitting < 64 {
            logger.warning("The file descriptor limit is \(descriptors.after), so squasherd serves at most \(fitting) connections at once. Raise it (LimitNOFILE= in the unit, ulimit -n in a shell) to at least 1024.")
        }
        var maximum = fitting
        if let wanted = configuration.maximumConnections {
            if wanted <= fitting {
                maximum = wanted
            } else {
                logger.warning("max_connections = \(wanted) does not fit the file descriptor limit of \(descriptors.after); serving at most \(fitting) connections. Raise LimitNOFILE= (or ulimit -n) to allow more.")
            }
        }
        logger.info("connection limit", metadata: [
            "connections.max": "\(maximum)", "descriptors.limit": "\(descriptors.after)", "descriptors.limit.before": "\(descriptors.before)",
        ])
        return ConnectionLimit(maximum: maximum)
    }

    /// A job that ended (finished, failed, aborted) or that the store does not know never reads
    /// its spool file again; one may be left by a failure the daemon could not clean up after
    /// (a disk that went read-only), or by an older version.
    private func removeSpoolsOfEndedJobs(_ stack: PersistentStack) async throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: configuration.spoolDirectory)) ?? []
        let spooled = names.filter { $0.hasSuffix(Spooler.fileExtension) }.map { String($0.dropLast(Spooler.fileExtension.count)) }
        guard !spooled.isEmpty else { return }
        let pending = try await stack.temporaryContext(name: "startup").perform { context in
            Set(try context.fetch(FetchRequest<ImportJob>(predicate: Key("state") == .string(JobState.queued.rawValue) || Key("state") == .string(JobState.running.rawValue))).map(\.jobID))
        }
        for job in spooled where !pending.contains(job) {
            let path = Spooler.path(job: job, in: configuration.spoolDirectory)
            do {
                try FileManager.default.removeItem(atPath: path)
                logger.notice("removed the spool file of a job that ended", metadata: ["job.id": "\(job)", "path": "\(path)"])
            } catch {
                logger.warning("cannot remove the spool file of a job that ended", metadata: ["job.id": "\(job)", "path": "\(path)", "error": "\(error)"])
            }
        }
    }

    /// Uploads cut off by a previous exit cannot resume (their bytes came from a client).
    private func failInterruptedUploads(_ stack: PersistentStack) async throws {
        let importer = stack.importerContext(name: "startup")
        try await importer.perform { context in
            for job in try context.fetch(FetchRequest<ImportJob>(predicate: Key("state") == .string(JobState.uploading.rawValue))) {
                job.state = .failed
                job.error = "The upload was interrupted when the daemon stopped; submit the file again."
                job.finished = Date()
            }
        }
        try await importer.save()
    }
}

/// Keeps the store open while the daemon runs; checkpoints its WAL when the daemon stops.
private struct StoreService: Service {
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
                logger.error("checkpoint failed; the WAL stays beside the store and is replayed when it opens next", metadata: ["error": "\(error)"])
            }
        }
        if fileLoss.problem != nil, let store = stack.store as? any FileBacked { rescue(store) }
    }

    /// Copies what the open store holds to a file beside its path, once nothing writes to it.
    private func rescue(_ store: any FileBacked) {
        let path = store.url.path
        let copy = path + SquasherDaemon.rescueSuffix + Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: false).timeSeparator(.omitted))
        onShutdownStep("Stopping: copying the store whose file was deleted", .seconds(300))
        // A directory moved or removed with the store: the copy goes where the store was, in the
        // directory made again. A moved one still holds the store, every save included.
        let directory = store.url.deletingLastPathComponent().path
        let directoryGone = !FileManager.default.fileExists(atPath: directory)
        if directoryGone { try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        let moved = directoryGone ? " If the directory was moved rather than removed, the store in its new place holds every save too." : ""
        do {
            try store.writeCopy(to: copy)
            fileLoss.rescued("What it held, every save included, is copied to \(copy). Move that copy to \(path) and start squasherd again.\(moved)")
        } catch {
            fileLoss.rescued("Copying what it held to \(copy) failed too (\((error as? GraphError)?.message ?? "\(error)")); the saves since the file was lost are lost with it, unless the directory was moved rather than removed: then the store in its new place holds them. Otherwise restore the store from a backup.")
        }
    }
}

/// Why the store file was lost while the daemon ran, and what became of its content.
final class StoreFileLoss: Sendable {
    private let state = Mutex<(problem: String, rescue: String)?>(nil)

    /// What happened and what was rescued; `nil` while the store file is in place.
    var problem: (problem: String, rescue: String)? { state.withLock { $0 } }

    func lost(_ problem: String) {
        state.withLock { $0 = $0 ?? (problem, "Nothing was copied.") }
    }

    func rescued(_ outcome: String) {
        state.withLock { if let problem = $0?.problem { $0 = (problem, outcome) } }
    }
}

/// Checks every second that the store's path still names the file the daemon has open. One
/// deleted or replaced while squasherd runs (`rm bugs.sqlite*`, a restore moved over it) takes
/// every later save with it when the daemon closes it; so squasherd stops taking saves, copies
/// what the open file holds beside it, and exits with status 1 — under systemd, to be restarted
/// on a store that an operator moved into place, rather than acknowledge saves that vanish.
private struct StoreFileGuard: Service {
    let store: any FileBacked
    let loss: StoreFileLoss
    let logger: Logger

    func run() async throws {
        await repeatUntilShutdown(every: .seconds(1)) {
            guard var problem = store.fileProblem() else { return true }
            // An `rm -r` of the state directory removes its files one by one: once it is
            // through, what went is the directory, not the log it happened to remove first.
            try? await Task.sleep(for: .milliseconds(250))
            problem = store.fileProblem() ?? problem
            logger.critical("\(problem) while squasherd ran: saves would be lost with it. Stopping, and copying what the open store holds beside it.")
            loss.lost(problem)
            return false
        }
    }
}

/// Gives the memory of many connections that closed back to the system, checking every two
/// seconds: glibc keeps what they held (about 10 kB each) in its arenas, so that 10,000 clients
/// connected at once (or one client that opened 10,000 connections and held them) would leave
/// squasherd's resident size about 100 MB above where it idles, for good, once they closed.
private struct ClosedConnectionsTrimmer: Service {
    let limit: ConnectionLimit

    func run() async throws {
        await repeatUntilShutdown(every: .seconds(2)) {
            if limit.manyClosedSinceLastAsked() { returnFreedMemory() }
            return true
        }
    }
}

/// Runs `body` every `interval` until graceful shutdown begins or `body` returns `false`.
private func repeatUntilShutdown(every interval: Duration, _ body: @escaping @Sendable () async -> Bool) async {
    do {
        try await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                guard await body() else { return }
            }
        }
    } catch {}
}

/// Calls its action as soon as graceful shutdown begins.
private struct ShutdownAnnouncer: Service {
    let action: @Sendable () -> Void

    func run() async throws {
        try? await gracefulShutdown()
        action()
    }
}

/// Pings the watchdog at half its interval, but only after proving health: the store answers a
/// read and every event loop runs a task. If either hangs, the pings stop and the service
/// manager restarts the daemon.
private struct WatchdogService: Service {
    let stack: PersistentStack
    let interval: Duration
    let ready: ReadyLatch
    let logger: Logger
    let onHealthy: @Sendable () -> Void

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    do {
                        // Pings start once the daemon is ready (READY=1 comes first).
                        if ready.isReady {
                            _ = try stack.store.currentHistoryToken()
                            try await EventLoopProbe.check()
                            onHealthy()
                        }
                    } catch is CancellationError {
                        return
                    } catch {
                        logger.error("health check failed; not pinging the watchdog", metadata: ["error": "\(error)"])
                    }
                    try await Task.sleep(for: ready.isReady ? interval / 2 : .milliseconds(20))
                }
            }
        } catch is CancellationError {}
    }
}

/// Checks every second that the socket files squasherd bound still name its sockets. One
/// removed while squasherd runs (`rm -r` of the runtime directory, a cleanup of `/run`) leaves a
/// daemon no client can reach, that looks alive to its service manager; so squasherd stops as
/// for SIGTERM and exits with status 1 — under systemd (`Restart=on-failure`) to start again
/// and bind them anew.
private final class SocketFileGuard: Service {
    let paths: [String]
    private let ready: ReadyLatch
    private let logger: Logger
    /// The file each path named once its server bound it.
    private let bound = Mutex<[String: [UInt64]]>([:])
    private let found = Mutex<String?>(nil)

    init(paths: [String], ready: ReadyLatch, logger: Logger) {
        self.paths = paths
        self.ready = ready
        self.logger = logger
    }

    /// What happened to a socket file, once something did.
    var problem: String? { found.withLock { $0 } }

    /// Records the file `path` names now, just after its server bound it: a file put in its place
    /// before the first check is then noticed too.
    func bound(_ path: String) {
        let identity = VarlinkServer.identity(path)
        bound.withLock { $0[path] = identity }
    }

    func run() async throws {
        await repeatUntilShutdown(every: .seconds(1)) { [self] in
            // The servers bind the files before the daemon is ready.
            guard ready.isReady else { return true }
            for path in paths {
                let now = VarlinkServer.identity(path)
                // Recorded as its server bound it (none: it was gone at once).
                if let first = bound.withLock({ $0[path] }), now == first { continue }
                let problem = "the socket \(path) was \(now == nil ? "removed" : "replaced by another file")"
                logger.critical("\(problem) while squasherd ran: no client can reach squasherd through it any more. Stopping, so that squasherd starts again and binds it anew (under systemd, Restart=on-failure does).")
                found.withLock { $0 = problem }
                return false
            }
            return true
        }
    }
}

/// Abandons idle uploads now and then (``ImportInterface/abandonIdleUploads(logger:)``).
private struct UploadSweeper: Service {
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

/// Runs one socket server until graceful shutdown.
private struct ServerService: Service {
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
        } catch is CancellationError {}
    }
}

/// Calls its action once `count` parties have arrived.
final class ReadyLatch: Sendable {
    private let remaining: Mutex<Int>
    private let action: @Sendable () -> Void

    init(count: Int, action: @escaping @Sendable () -> Void) {
        remaining = Mutex(count)
        self.action = action
    }

    func arrive() {
        if remaining.withLock({ $0 -= 1; return $0 == 0 }) { action() }
    }

    /// Whether every party arrived and the action ran.
    var isReady: Bool { remaining.withLock { $0 <= 0 } }
}

/// The daemon's one-line status: idle, or the running job's progress and the subscribers.
final class StatusReporter: Sendable {
    private let hub: NotificationHub
    private let onStatus: @Sendable (String) -> Void
    private let progress = Mutex<ImportProgress?>(nil)

    init(hub: NotificationHub, onStatus: @escaping @Sendable (String) -> Void) {
        self.hub = hub
        self.onStatus = onStatus
    }

    var activeJob: String? { progress.withLock { $0?.job } }

    func update(_ progress: ImportProgress?) {
        self.progress.withLock { $0 = progress }
        publish()
    }

    func publish() {
        let line: String
        if let progress = progress.withLock({ $0 }) {
            let percent = progress.bytesTotal > 0 ? Double(progress.bytesDone) * 100 / Double(progress.bytesTotal) : 0
            line = String(format: "Importing job %@: %lld records read (%lld rejected), %.0f%%, %.0f records/s; %d subscribers", progress.job, progress.read, progress.rejected, percent, progress.rate, hub.count)
        } else {
            line = "Idle; \(hub.count) subscribers"
        }
        onStatus(line)
    }
}
