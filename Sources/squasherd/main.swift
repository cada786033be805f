import ArgumentParser
import BugSquasherDaemon
import BugSquasherSystemd
import BugSquasherTransport
import Foundation
import Logging

/// squasherd: the BugSquasher daemon.
@main
struct Squasherd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "squasherd",
        abstract: "The BugSquasher daemon: owns the bug store, runs imports, broadcasts every commit over Varlink.",
        discussion: """
            Paths: a flag wins; then systemd's STATE_DIRECTORY and RUNTIME_DIRECTORY; then the \
            configuration file; then ./run/state and ./run/sockets. Under systemd: Type=notify \
            (READY=1 once the store is open and both sockets are bound, STATUS= with progress, \
            WATCHDOG=1 from a health check, STOPPING=1), socket activation with the sockets named \
            "read" and "write" (FileDescriptorName=), and native journald logging when stderr is \
            the journal. Stop with SIGTERM or SIGINT: the current import chunk finishes, the \
            store is checkpointed, exit status 0.
            """
    )

    @Option(help: "Directory of the store (bugs.sqlite) and the import spool.")
    var stateDirectory: String?

    @Option(help: "Directory of the sockets squasherd.sock (read) and squasherd-write.sock (write).")
    var runtimeDirectory: String?

    @Option(help: "Configuration file (default /etc/squasherd/squasherd.conf when it exists).")
    var config: String?

    @Option(parsing: .unconditional, help: "Records per import chunk (overrides the configuration file).")
    var chunkSize: Int?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String?

    func run() async throws {
        var configuration: DaemonConfiguration
        do {
            configuration = try .resolve(stateDirectory: stateDirectory, runtimeDirectory: runtimeDirectory, configFile: config)
        } catch let error as DaemonError {
            throw ValidationError(error.message)
        }
        if let chunkSize {
            guard chunkSize > 0 else { throw ValidationError("--chunk-size must be positive.") }
            configuration.chunkSize = chunkSize
        }
        let levelName = logLevel ?? configuration.logLevel
        guard let level = Logger.Level(rawValue: levelName) else {
            throw ValidationError("Unknown --log-level '\(levelName)'; use trace, debug, info, notice, warning, error or critical.")
        }
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
        let logger = Logger(label: "squasherd")
        let notifier = SystemdNotifier()
        var daemon = SquasherDaemon(configuration: configuration, logger: logger)
        do {
            let sockets = try SocketActivation.listeningSockets()
            if !sockets.isEmpty {
                guard let read = sockets["read"], let write = sockets["write"] else {
                    logger.critical("systemd passed sockets named \(sockets.keys.sorted()); squasherd needs two, named \"read\" and \"write\" (FileDescriptorName= in squasherd.socket).")
                    throw ExitCode(1)
                }
                daemon.readAddress = .descriptor(read)
                daemon.writeAddress = .descriptor(write)
                logger.info("using sockets passed by systemd", metadata: ["socket.read": "fd \(read)", "socket.write": "fd \(write)"])
            }
        } catch let error as SystemdError {
            logger.critical("\(error.message)")
            throw ExitCode(1)
        }
        // A terminal's hangup must not end the daemon (the default action of SIGHUP).
        signal(SIGHUP, SIG_IGN)
        let hangups = DispatchSource.makeSignalSource(signal: SIGHUP)
        hangups.setEventHandler {
            logger.notice("SIGHUP ignored: squasherd reads its configuration when it starts; restart it to apply changes (systemctl restart squasherd).")
        }
        hangups.resume()
        defer { hangups.cancel() }
        daemon.onReady = { notifier.ready(status: "Ready") }
        daemon.onStatus = { notifier.status($0) }
        daemon.onStopping = { notifier.stopping(status: "Stopping") }
        daemon.onShutdownStep = { step, budget in notifier.extendTimeout(budget, status: step) }
        if let interval = SystemdNotifier.watchdogInterval() {
            daemon.watchdogInterval = interval
            daemon.onWatchdog = { notifier.watchdog() }
            logger.info("watchdog enabled", metadata: ["watchdog.interval": "\(interval)"])
        }
        do {
            try await daemon.run()
        } catch {
            // Every reason not to run (the store, the lock, a socket in use) is logged, to the
            // journal under systemd, and reported as the unit's status.
            let message = (error as? DaemonError)?.message ?? String(describing: error)
            logger.critical("\(message)")
            notifier.status("Failed: \(message)")
            throw ExitCode(1)
        }
    }
}
