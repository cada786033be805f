import ArgumentParser
import BugSquasherClient
import BugSquasherTransport
import Foundation

/// Where squasherd's sockets are: `--socket`, else `$SQUASHERD_RUNTIME_DIRECTORY`, else
/// `./run/sockets` when it has a socket (a checkout running `scripts/run.sh`), else
/// `/run/squasherd`; and how long to wait for it (`--timeout`).
struct SocketOptions: ParsableArguments {
    @Option(
        name: .customLong("socket"),
        help: "The read socket (squasherd.sock); the write socket is squasherd-write.sock beside it.")
    var readSocket: String?

    @Option(
        parsing: .unconditional,
        help:
            "Seconds to wait for squasherd to accept, take or answer a call before giving up with exit status 4; 0 waits as long as it takes. (Waiting for a job, or for the saves of a feed once it has begun, is not bounded by it.)"
    )
    var timeout: Double = 60

    func validate() throws {
        guard timeout.isFinite, (0...1_000_000).contains(timeout) else {
            throw ValidationError("--timeout takes seconds, from 0 (wait as long as it takes) to 1000000.")
        }
        // A path no socket address holds is a usage error, found before anything is sent.
        for socket in [read.path, write.path] where socket.utf8.count > VarlinkServer.maximumSocketPathBytes {
            throw ValidationError(
                "The socket path \(socket) is too long (\(socket.utf8.count) bytes; Unix sockets allow \(VarlinkServer.maximumSocketPathBytes)). Use a shorter --socket or SQUASHERD_RUNTIME_DIRECTORY."
            )
        }
    }

    var directory: String {
        if let readSocket { return (readSocket as NSString).deletingLastPathComponent }
        // Set but empty (`SQUASHERD_RUNTIME_DIRECTORY=`) is unset, not the root directory.
        if let directory = ProcessInfo.processInfo.environment["SQUASHERD_RUNTIME_DIRECTORY"], !directory.isEmpty {
            return directory
        }
        if FileManager.default.fileExists(atPath: "run/sockets/squasherd.sock") { return "run/sockets" }
        return "/run/squasherd"
    }

    /// The read socket.
    var read: Endpoint { Endpoint(path: readSocket ?? directory + "/squasherd.sock", timeout: waitLimit) }
    /// The write socket.
    var write: Endpoint { Endpoint(path: directory + "/squasherd-write.sock", timeout: waitLimit) }

    private var waitLimit: Duration? { timeout > 0 ? .milliseconds(Int64((timeout * 1000).rounded(.up))) : nil }
}

/// A socket of squasherd and how long to wait for it.
struct Endpoint {
    /// The socket's path.
    var path: String
    /// How long connecting, a send or the wait for a reply may take; `nil` waits.
    var timeout: Duration?

    /// A client on this socket; what keeps it from connecting is worded for squasherd's users
    /// (``TransportError/wordedForSquasherd``).
    func connect() throws -> BlockingVarlinkClient {
        do {
            return try BlockingVarlinkClient(path: path, timeout: timeout)
        } catch let error as TransportError {
            throw error.wordedForSquasherd
        }
    }
}

/// Exit statuses scripts can rely on.
enum Exit {
    /// The job failed, or the daemon refused the request.
    static let failed = ExitCode(2)
    /// The object asked for does not exist.
    static let notFound = ExitCode(3)
    /// The daemon could not be reached.
    static let unreachable = ExitCode(4)
    /// `status` answered, and the daemon is degraded (its `problems` say why).
    static let degraded = ExitCode(5)
    /// `update --if-version`: the bug is at another version (an edit came first); nothing was
    /// changed.
    static let changed = ExitCode(6)
    /// Standard output could not be written (`EX_IOERR`).
    static let outputFailed = ExitCode(74)
    /// squasherd could not carry out the command now, for a reason on its side (a full disk, its
    /// store locked by another program, as many uploads in progress as it takes, a stop); nothing
    /// was changed, and the same command may succeed later (`EX_TEMPFAIL`).
    static let unavailable = ExitCode(75)
}
