import ArgumentParser
import BugSquasherDaemon
import BugSquasherGraph
import BugSquasherMetrics
import BugSquasherProtocol
import BugSquasherSystemd
import BugSquasherTransport
import Foundation
import Logging
import UnixSignals

/// squasherd: the BugSquasher daemon.
@main
struct Squasherd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "squasherd",
        abstract: "The BugSquasher daemon: owns the bug store, runs imports, broadcasts every commit over Varlink.",
        discussion: """
            The store is SQLite (bugs.sqlite in the state directory) unless the configuration \
            file's store line names a PostgreSQL database (store = postgresql://…), which several \
            daemons on several hosts can share (docs/OPERATIONS.md, Running on PostgreSQL). \
            Paths: a flag wins; then systemd's STATE_DIRECTORY and RUNTIME_DIRECTORY; then the \
            configuration file; then ./run/state and ./run/sockets. Under systemd: Type=notify \
            (READY=1 once the store is open and both sockets are bound, STATUS= with progress, \
            WATCHDOG=1 from a health check, STOPPING=1), socket activation with the sockets named \
            "read" and "write" (FileDescriptorName=), and native journald logging when stderr is \
            the journal. Stop with SIGTERM or SIGINT: the current import chunk finishes, the \
            store is checkpointed, exit status 0.
            """,
        version: BugSquasherVersion.current
    )

    @Option(
        help:
            "Directory of the SQLite store (bugs.sqlite), the import spool and the daemon's ID (on PostgreSQL, the spool and the ID)."
    )
    var stateDirectory: String?

    @Option(help: "Directory of the sockets squasherd.sock (read) and squasherd-write.sock (write).")
    var runtimeDirectory: String?

    @Option(help: "Configuration file (default /etc/squasherd/squasherd.conf when it exists).")
    var config: String?

    @Option(parsing: .unconditional, help: "Records per import chunk (overrides the configuration file).")
    var chunkSize: Int?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String?

    @Option(
        help: ArgumentHelp(
            "Put a backup (squasherctl backup FILE) in place of the store, with squasherd stopped, and exit.",
            discussion:
                "The backup is checked first; the store it replaces is kept beside it. Subscribers that resume afterwards are told to refetch what they hold (docs/OPERATIONS.md, Backup and restore).",
            valueName: "file"))
    var restore: String?

    func run() async throws {
        // A closed standard stream gets a stand-in before any descriptor is opened: the log
        // must not go into a socket or the lock file that took descriptor 2 (`squasherd 2>&-`).
        StandardStreams.reopenClosed()
        // Before anything else: a SIGTERM from here on stops the daemon cleanly once it runs.
        let startupSignals = await StartupSignals()
        let configuration = try resolveConfiguration()
        let levelName = logLevel ?? configuration.logLevel
        guard let level = Logger.Level(rawValue: levelName) else {
            throw ValidationError(
                "Unknown --log-level '\(levelName)'; use trace, debug, info, notice, warning, error or critical.")
        }
        Self.bootstrapLogging(level: level)
        let logger = Logger(label: "squasherd")
        if let restore {
            do {
                print(try await SquasherDaemon(configuration: configuration, logger: logger).restore(from: restore))
                return
            } catch let error as DaemonError {
                logger.critical("\(error.message)")
                throw ExitCode(1)
            }
        }
        let notifier = SystemdNotifier()
        var daemon = SquasherDaemon(configuration: configuration, logger: logger)
        daemon.startupSignals = startupSignals
        // Every metric made from here on lands in the daemon's registry.
        daemon.metricsExporter = MetricsExporter.bootstrap()
        daemon.metricsAddress = configuration.metricsListen.map { .bind(host: $0.host, port: $0.port) }
        try Self.adoptSockets(of: &daemon, configuration: configuration, logger: logger)
        // A terminal's hangup must not end the daemon (the default action of SIGHUP), nor a
        // SIGUSR1 or SIGUSR2 meant for a daemon that reopens its logs on one (logrotate habits).
        let ignored = await UnixSignalsSequence(trapping: .sighup, .sigusr1, .sigusr2)
        let notices = Task {
            for await signal in ignored {
                logger.notice(
                    signal == .sighup
                        ? "SIGHUP ignored: squasherd reads its configuration when it starts; restart it to apply changes (systemctl restart squasherd)."
                        : "\(signal) ignored: squasherd has no log file to reopen (it logs to the journal or stderr); stop it with SIGTERM."
                )
            }
        }
        defer { notices.cancel() }
        Self.reportToSystemd(&daemon, notifier: notifier, logger: logger)
        do {
            try await daemon.run()
        } catch {
            // Every reason not to run (the store, the lock, a socket in use) is logged, to the
            // journal under systemd, and reported as the unit's status.
            // A refusal says so itself; anything else failed on the way up (a full disk, say).
            let message =
                (error as? DaemonError)?.message
                ?? "squasherd could not start: \((error as? GraphError)?.message ?? String(describing: error))"
            logger.critical("\(message)")
            notifier.status("Failed: \(message)")
            throw ExitCode(1)
        }
    }

    /// The configuration from the flags, the environment and the configuration file, with
    /// `--chunk-size` applied; one that cannot be read refuses the start.
    private func resolveConfiguration() throws -> DaemonConfiguration {
        var configuration: DaemonConfiguration
        do {
            configuration = try .resolve(
                stateDirectory: stateDirectory, runtimeDirectory: runtimeDirectory, configFile: config)
        } catch let error as DaemonError {
            try Self.refuseToStart(error.message)
        }
        if let chunkSize {
            let sizes = ImportChunkSize.allowed
            guard sizes.contains(chunkSize) else {
                throw ValidationError("--chunk-size must be between \(sizes.lowerBound) and \(sizes.upperBound).")
            }
            configuration.chunkSize = chunkSize
        }
        return configuration
    }
}

extension Squasherd {
    /// Serves the sockets systemd passed (socket activation), checking that they are the read
    /// and write sockets and that their permissions separate readers from writers; without
    /// them, warns about the permissions of the sockets the daemon binds itself.
    static func adoptSockets(of daemon: inout SquasherDaemon, configuration: DaemonConfiguration, logger: Logger) throws
    {
        do {
            let sockets = try SocketActivation.listeningSockets()
            if !sockets.isEmpty {
                // The metrics socket (squasherd-metrics.socket) comes with them when enabled.
                if let metrics = sockets.first(where: { $0.name == "metrics" }) {
                    daemon.metricsAddress = .descriptor(metrics.descriptor)
                }
                let names = sockets.map(\.name).filter { $0 != "metrics" }
                guard names.sorted() == ["read", "write"],
                    let read = sockets.first(where: { $0.name == "read" })?.descriptor,
                    let write = sockets.first(where: { $0.name == "write" })?.descriptor
                else {
                    logger.critical(
                        "systemd passed \(sockets.count) socket(s) named \(names); squasherd needs two, one named \"read\" and one named \"write\" (FileDescriptorName= in squasherd.socket)."
                    )
                    throw ExitCode(1)
                }
                let access = SocketAccess.passed(
                    read: SocketActivation.path(of: read), write: SocketActivation.path(of: write))
                if let refusal = access.refusal {
                    logger.critical("\(refusal)")
                    throw ExitCode(1)
                }
                for warning in access.warnings { logger.warning("\(warning)") }
                daemon.readAddress = .descriptor(read)
                daemon.writeAddress = .descriptor(write)
                logger.info(
                    "using sockets passed by systemd",
                    metadata: ["socket.read": "fd \(read)", "socket.write": "fd \(write)"])
            } else {
                for warning in SocketAccess.bound(
                    readMode: configuration.readSocketMode, writeMode: configuration.writeSocketMode
                ).warnings {
                    logger.warning("\(warning)")
                }
            }
        } catch let error as SystemdError {
            logger.critical("\(error.message)")
            throw ExitCode(1)
        }
    }

    /// Tells systemd when the daemon is ready, its status and its shutdown steps, and pings its
    /// watchdog when the unit asks for one.
    static func reportToSystemd(_ daemon: inout SquasherDaemon, notifier: SystemdNotifier, logger: Logger) {
        daemon.onReady = {
            if let failure = notifier.ready(status: "Ready") { logger.warning("\(failure)") }
        }
        daemon.onStatus = { notifier.status($0) }
        daemon.onStopping = { notifier.stopping(status: "Stopping") }
        daemon.onShutdownStep = { step, budget in notifier.extendTimeout(budget, status: step) }
        daemon.onWaitingForStore = { status, budget in notifier.extendTimeout(budget, status: status) }
        switch SystemdNotifier.watchdog() {
        case .off:
            break
        case .invalid(let value):
            logger.warning(
                "WATCHDOG_USEC='\(value)' (or WATCHDOG_PID) cannot be read: WATCHDOG_USEC must be a number of microseconds above zero. The watchdog is off; check WatchdogSec= in the unit."
            )
        case .interval(let asked):
            let interval = max(asked, SystemdNotifier.minimumWatchdogInterval)
            if interval > asked {
                logger.warning(
                    "WATCHDOG_USEC asks for a ping within \(asked); squasherd pings every \(interval / 2) at the most, so systemd may stop it as hung. Set WatchdogSec= to a few seconds or more."
                )
            }
            daemon.watchdogInterval = interval
            daemon.onWatchdog = { notifier.watchdog() }
            logger.info("watchdog enabled", metadata: ["watchdog.interval": "\(interval)"])
        }
    }
}

extension Squasherd {
    /// Sends log records to the journal when stderr is the journal (under systemd), to stderr
    /// otherwise.
    static func bootstrapLogging(level: Logger.Level) {
        let journal = JournalLogHandler.shouldUse()
        LoggingSystem.bootstrap { label in
            if journal {
                var handler = JournalLogHandler(label: label, identifier: "squasherd")
                handler.logLevel = level
                return handler
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }

    /// Refuses to start before the configuration is known (a configuration file that cannot be
    /// used): one critical log line, the unit's status, exit status 1 — as for every other
    /// reason not to start (docs/OPERATIONS.md), not the usage text of a command-line mistake.
    static func refuseToStart(_ message: String) throws -> Never {
        bootstrapLogging(level: .info)
        Logger(label: "squasherd").critical("\(message)")
        SystemdNotifier().status("Failed: \(message)")
        throw ExitCode(1)
    }
}
