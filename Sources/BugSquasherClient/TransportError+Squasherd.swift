import BugSquasherGraph
public import BugSquasherTransport

extension TransportError {
    /// This error as squasherd's clients tell it: the statement names squasherd where the
    /// transport says "the server", and the advice is in squasherd's terms (its log, its
    /// `max_connections`, its sockets, squasherctl's `--limit`). The code and the facts stay the same.
    /// Why it is built this way: docs/DESIGN-NOTES.md, "The transport names no program".
    public var wordedForSquasherd: TransportError {
        var worded = self
        let path = self.path ?? "squasherd's socket"
        let within = Self.seconds(timeout)
        switch code {
        case .notASocket:
            worded.statement = "\(path) is not a socket."
            worded.advice =
                "Pass the path of squasherd's socket (squasherd.sock or squasherd-write.sock in its runtime directory)."
        case .notFound, .connectionRefused:
            let reason = systemErrorDescription.map { " (\($0))" } ?? ""
            worded.statement = "squasherd is not listening on \(path)\(reason)."
            worded.advice = "Start it, or pass the right socket path."
        case .permissionDenied:
            worded.advice = "See docs/PROTOCOL.md, Access."
        case .connectTimedOut:
            worded.statement =
                "\(path) did not accept the connection within \(within): squasherd is overloaded or stuck (its backlog is full)."
        case .connectFailed:
            worded.advice = "Is squasherd running?"
        case .noAnswer:
            worded.statement =
                "No answer from \(path) within \(within): squasherd is overloaded or stuck, or another program is listening there."
        case .sendTimedOut:
            worded.statement =
                "\(path) took nothing of what was sent for \(within): squasherd is overloaded or stuck, or another program is listening there."
        case .closedByPeer:
            worded.statement =
                "squasherd closed the connection on \(path) before answering: it may be at its connection limit (max_connections) or out of file descriptors, or stopping."
            worded.advice = "Its log says which; retry later."
        case .peerGone:
            worded.statement =
                "squasherd went away while answering on \(path): nothing listens there now (it stopped, crashed or was killed; its log says which, for instance journalctl -u squasherd)."
            worded.advice = "Start it again, then retry."
        case .closedMidMessage:
            worded.statement = "squasherd at \(path) closed the connection in the middle of a message."
        case .malformedReply:
            if worded.advice.isEmpty { worded.advice = "Is squasherd listening on this path, or another program?" }
        case .unexpectedReply:
            if worded.advice.isEmpty {
                worded.advice = "Is squasherd listening on this path, and of the same version as this program?"
            }
        case .replyTooLarge:
            worded.advice =
                "squasherd answers that much only to a fetch of thousands of rows with long values: ask for fewer (--limit); otherwise another program is listening there."
        case .answeredEarly:
            worded.statement = "squasherd answered the upload on \(path) before it was sent whole."
            worded.advice = "Submit the file again."
        default:
            break
        }
        return worded
    }

    /// The failed connection to squasherd behind `error` (itself, or the cause of a
    /// `GraphError` a ``RemoteStore`` threw), worded for squasherd's clients; `nil` when no
    /// connection failed.
    public static func squasherdConnectionFailure(in error: any Error) -> TransportError? {
        ((error as? GraphError)?.cause as? TransportError ?? error as? TransportError)?.wordedForSquasherd
    }

    /// `error` worded for squasherd's clients (``wordedForSquasherd``) when it is a
    /// ``TransportError``; any other error as it is.
    public static func wordForSquasherd(_ error: any Error) -> any Error {
        guard let error = error as? TransportError else { return error }
        return error.wordedForSquasherd
    }
}
