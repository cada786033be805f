import ArgumentParser
import BugSquasherDaemon
import Logging

/// squasherd: the BugSquasher daemon.
@main
struct Squasherd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "squasherd",
        abstract: "The BugSquasher daemon: owns the bug store, runs imports, broadcasts every commit over Varlink.",
        discussion: """
            Paths: a flag wins; then systemd's STATE_DIRECTORY and RUNTIME_DIRECTORY; then the \
            configuration file; then ./run/state and ./run/sockets. Stop with SIGTERM or SIGINT: \
            the current import chunk finishes, the store is checkpointed, exit status 0.
            """
    )

    @Option(help: "Directory of the store (bugs.sqlite) and the import spool.")
    var stateDirectory: String?

    @Option(help: "Directory of the sockets squasherd.sock (read) and squasherd-write.sock (write).")
    var runtimeDirectory: String?

    @Option(help: "Configuration file (default /etc/squasherd/squasherd.conf when it exists).")
    var config: String?

    @Option(help: "Records per import chunk (overrides the configuration file).")
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
            throw ValidationError("Unknown log level '\(levelName)'; use trace, debug, info, notice, warning, error or critical.")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "squasherd")
        do {
            try await SquasherDaemon(configuration: configuration, logger: logger).run()
        } catch let error as DaemonError {
            logger.critical("\(error.message)")
            throw ExitCode(1)
        }
    }
}
