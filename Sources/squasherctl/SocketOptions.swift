import ArgumentParser
import Foundation

/// Where squasherd's sockets are: `--socket`, else `$SQUASHERD_RUNTIME_DIRECTORY`, else
/// `./run/sockets` when it has a socket (a checkout running `scripts/run.sh`), else
/// `/run/squasherd`.
struct SocketOptions: ParsableArguments {
    @Option(name: .customLong("socket"), help: "The read socket (squasherd.sock); the write socket is squasherd-write.sock beside it.")
    var readSocket: String?

    var directory: String {
        if let readSocket { return (readSocket as NSString).deletingLastPathComponent }
        if let directory = ProcessInfo.processInfo.environment["SQUASHERD_RUNTIME_DIRECTORY"] { return directory }
        if FileManager.default.fileExists(atPath: "run/sockets/squasherd.sock") { return "run/sockets" }
        return "/run/squasherd"
    }

    var read: String { readSocket ?? directory + "/squasherd.sock" }
    var write: String { directory + "/squasherd-write.sock" }
}

/// Exit statuses scripts can rely on.
enum Exit {
    /// The job failed, or the daemon refused the request.
    static let failed = ExitCode(2)
    /// The object asked for does not exist.
    static let notFound = ExitCode(3)
    /// The daemon could not be reached.
    static let unreachable = ExitCode(4)
}
