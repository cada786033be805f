import ArgumentParser
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation

/// `squasherctl forget`: takes a daemon of a shared store that is gone for good off the list,
/// and aborts its unfinished jobs.
struct ForgetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "On PostgreSQL: forget a daemon gone for good, aborting its jobs (needs the write socket).",
        discussion:
            "For a daemon whose host is lost: squasherctl status and the metrics stop listing it, and its uploading, queued and running jobs, whose input was spooled on its host, are aborted (the records they committed stay). A daemon that answered in the last 10 s is refused: stop it first. Forget only a daemon that is gone: one that was only cut off is listed again when it comes back, and may finish a job it was still running; one restarted leaves its aborted jobs alone."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The daemon's ID (squasherctl status lists the daemons attached).")
    var daemon: String

    func validate() throws {
        if daemon.trimmingCharacters(in: .whitespaces).isEmpty {
            throw ValidationError("The daemon ID is empty; squasherctl status lists the daemons attached.")
        }
    }

    func run() throws {
        try withClient(sockets.write) { client in
            let reply = try client.call(
                "io.bugsquasher.Import.Forget", ForgetParameters(daemon: daemon), as: ForgetReply.self)
            let host = reply.host.map { " on \($0)" } ?? ""
            let jobs =
                reply.abortedJobs.isEmpty
                ? "it had no unfinished job" : "aborted its jobs: \(reply.abortedJobs.joined(separator: ", "))"
            print("forgot daemon \(reply.daemon)\(host); \(jobs)")
        }
    }
}
