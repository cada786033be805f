import ArgumentParser
import BugSquasherClient
import BugSquasherGraph
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation

/// squasherctl: the command line of BugSquasher (started by `main.swift`).
struct Squasherctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "squasherctl",
        abstract: "Import, query and watch a BugSquasher store through squasherd.",
        discussion: """
            Exit status: 0 success, 2 the job failed or rejected every record, or squasherd refused the request (or its \
            socket refused this user), 3 not found, 4 squasherd unreachable (not listening, no answer within --timeout, or an \
            answer that is not squasherd's), 5 `status` answered and the daemon is degraded, 6 `update --if-version` found the bug at another version, 64 usage error (no command, among others), 74 the output could not be written (a full disk), \
            75 squasherd could not carry out the command now (its disk full, its store locked by another program, its database \
            unreachable, 64 uploads in progress, a bug edited all the while it was being deleted, or it is stopping): nothing was changed, unless the message says that the \
            database's answer was lost and the change may have been saved; retry later.
            """,
        version: BugSquasherVersion.current,
        subcommands: [
            ImportCommand.self, AbortCommand.self, ForgetCommand.self, JobsCommand.self, StatusCommand.self,
            MetricsCommand.self,
            BackupCommand.self,
            GetCommand.self,
            ListCommand.self, UpdateCommand.self, DeleteCommand.self, WatchCommand.self, SubscribeCommand.self,
        ]
    )

    /// `squasherctl` without a command: the help, on standard error, and a usage error's status,
    /// so that a script whose command went missing does not pass.
    func run() async throws {
        printError(Self.helpMessage())
        throw ExitCode.validationFailure
    }
}

extension Squasherctl {
    /// Parses the command line and runs the command: what `AsyncParsableCommand.main()` does,
    /// callable from `main.swift` (whose top-level code would pick the synchronous `main()`).
    static func start() async {
        do {
            var command = try await asyncParseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            try flushOutput()
        } catch {
            exit(withError: error)
        }
    }

    /// Writes out what is still buffered for standard output and fails when any of the output
    /// could not be written (a full disk): a script must not take truncated
    /// output for the whole of it.
    static func flushOutput() throws {
        // Every output stream (`stdout` itself is not reachable under Swift 6's strict
        // concurrency checking). After a failed write glibc keeps the bytes it could not write,
        // so this last flush fails too (checked with 100,000 lines to /dev/full).
        guard fflush(nil) != 0 else { return }
        throw outputFailed(errno: errno)
    }

    /// Writes `bytes` to standard output now, after what is still buffered for it, and fails as
    /// ``flushOutput()`` does when they cannot all be written. For JSON lines written one at a
    /// time (a feed's events): no `String` is made of them, and no buffer holds them.
    static func writeOutput(_ bytes: [UInt8]) throws {
        try flushOutput()
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { write(1, $0.baseAddress! + written, $0.count - written) }
            if result > 0 {
                written += result
            } else if result < 0 && errno == EINTR {
                continue
            } else {
                throw outputFailed(errno: result < 0 ? errno : EIO)
            }
        }
    }

    /// Says that the output could not all be written, and why; the error that ends the command.
    private static func outputFailed(errno: CInt) -> ExitCode {
        let message =
            StandardStreams.outputWasClosed
            ? "squasherctl: could not write its output: standard output is closed. Run the command with its output open (a terminal, a file or a pipe)."
            : "squasherctl: could not write all of its output to standard output (\(String(cString: strerror(errno)))); what was written is incomplete. Make room where the output goes (a full disk?) and run the command again."
        FileHandle.standardError.write(Data((message + "\n").utf8))
        return Exit.outputFailed
    }
}

/// Runs a client call, mapping transport and Varlink failures to messages and exit codes.
func withClient<T>(_ endpoint: Endpoint, _ body: (BlockingVarlinkClient) throws -> T) throws -> T {
    let client: BlockingVarlinkClient
    do { client = try endpoint.connect() } catch {
        printError("squasherctl: \(error)")
        // Refused to this user, not unreachable: trying again will not help.
        throw (error as? TransportError)?.code == .permissionDenied ? Exit.failed : Exit.unreachable
    }
    do { return try body(client) } catch let error as VarlinkError {
        throw refused(error)
    } catch let error as TransportError {
        printError("squasherctl: \(error.wordedForSquasherd)")
        throw Exit.unreachable
    }
}

/// Prints what a refused call says to a person and returns the exit status to end with:
/// ``Exit/unreachable`` when the peer does not know squasherd's methods (it is not squasherd),
/// ``Exit/notFound`` for an unknown job, ``Exit/unavailable`` for a call squasherd could not carry
/// out now (its store cannot be read or written, its spool cannot write, or it takes no more
/// uploads), ``Exit/failed`` otherwise.
func refused(_ error: VarlinkError) -> ExitCode {
    printError("squasherctl: \(refusal(error))")
    return exitStatus(of: error)
}

/// The exit status for a call squasherd refused with `error`, as ``refused(_:)`` gives it.
func exitStatus(of error: VarlinkError) -> ExitCode {
    if ["org.varlink.service.MethodNotFound", "org.varlink.service.InterfaceNotFound"].contains(error.name) {
        return Exit.unreachable
    }
    if error.isStoreUnavailable || error.name == "io.bugsquasher.Import.Busy" {
        return Exit.unavailable
    }
    if error.name == "io.bugsquasher.Import.Conflict", error.parameters["version"] != nil { return Exit.changed }
    return error.name.hasSuffix(".JobNotFound") || error.name.hasSuffix(".ObjectNotFound") ? Exit.notFound : Exit.failed
}

/// The exit status for `error`, a failure of the object graph over squasherd (a subscriber's
/// fetch): as ``refused(_:)`` gives it for a call squasherd refused (``Exit/unavailable`` when it
/// could not reach its store), ``Exit/unreachable`` when the connection failed, ``Exit/failed``
/// otherwise.
func exitStatus(of error: GraphError) -> ExitCode {
    switch error.cause {
    case let refusal as VarlinkError: exitStatus(of: refusal)
    case is TransportError: Exit.unreachable
    default: Exit.failed
    }
}

/// What `error`, a failure of the object graph over squasherd, says to a person: the failed
/// connection's own words (a timeout, a refusal, what to do) when the connection failed, the
/// error's statement and advice otherwise.
func wording(of error: GraphError) -> String {
    TransportError.squasherdConnectionFailure(in: error)?.message ?? error.message
}

/// What a refused call says to a person: the daemon's message, or an explanation of the error.
func refusal(_ error: VarlinkError) -> String {
    if error.name == "io.bugsquasher.Changes.TokenAhead" {
        let token = error.parameters["token"]?.intValue.map(String.init) ?? "?"
        let since = error.parameters["since"]?.intValue.map(String.init) ?? "?"
        return
            "the store's newest token is \(token), before --since \(since): it never issued that token (restored from a backup, or another store?). Leave --since out, or pass a token it issued."
    }
    if error.name == "io.bugsquasher.Changes.HistoryExpired" {
        let horizon = error.parameters["horizon"]?.intValue.map(String.init) ?? "?"
        return
            "the saves up to token \(horizon) were pruned from the history (history_retention_days, history_retention_saves), so what changed after the token asked for cannot be told. Refetch what you hold and go on from the current token."
    }
    if error.name == "org.varlink.service.InvalidParameter" {
        return "squasherd refused the value of '\(error.parameters["parameter"]?.stringValue ?? "?")' as invalid."
    }
    if error.name == "org.varlink.service.MethodNotFound" || error.name == "org.varlink.service.InterfaceNotFound" {
        let what =
            error.parameters["method"]?.stringValue ?? error.parameters["interface"]?.stringValue ?? "the method called"
        return
            "the peer answered that it does not know \(what) (\(error.name)): it is not squasherd, or a squasherd older than this squasherctl."
    }
    if error.name.hasSuffix(".JobNotFound") {
        return "no job \(error.parameters["job"]?.stringValue ?? "?") (squasherctl jobs lists the recent ones)."
    }
    return error.statementAndAdvice ?? error.description
}

/// Writes a line to standard error.
func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}
