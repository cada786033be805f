import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink

extension VarlinkServerWording {
    /// What squasherd's servers say of their limits: `io.bugsquasher.MessageTooLarge` for a
    /// message past `max_message_bytes`, and warnings whose advice names its settings.
    static let squasherd = VarlinkServerWording(
        messageTooLarge: { VarlinkError.messageTooLarge(limit: $0) },
        messageTooLargeAdvice:
            "Raise max_message_bytes if clients send calls this large (a Register of very many IDs, say); otherwise a client is not speaking Varlink.",
        incomingBudgetAdvice:
            "Clients may be sending large messages without finishing them; raise max_incoming_bytes if such messages are expected.",
        outgoingBudgetAdvice:
            "Clients may be asking for large replies (pages of rows) without reading them; raise max_outgoing_bytes if many clients read large pages at once.",
        connectionLimitAdvice:
            "A client may be opening connections without closing them; raise max_connections (and the descriptor limit, LimitNOFILE=) if this load is expected.",
        descriptorLimitAdvice: "Raise LimitNOFILE=, or lower max_connections to keep more in reserve."
    )
}

extension TransportError {
    /// This error of one of squasherd's own sockets as its operator is told it: the advice names
    /// squasherd's options (`--runtime-directory`), and a socket another process listens on may be
    /// another squasherd's. The code and the facts stay; other codes keep the transport's words.
    var wordedForSquasherdOperator: TransportError {
        var worded = self
        switch code {
        case .pathTooLong:
            worded.advice = "Give a shorter --runtime-directory (or runtime_directory in the configuration file)."
        case .pathOccupied:
            worded.advice = "Move it away, or give another --runtime-directory."
        case .addressInUse:
            if let path { worded.statement = "Another process is listening on \(path) (another squasherd?)." }
            worded.advice = "Stop it, or give this daemon another --runtime-directory."
        case .cannotCreateDirectory:
            worded.advice = "Create it, or give another --runtime-directory."
        default:
            break
        }
        return worded
    }
}
