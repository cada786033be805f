public import BugSquasherVarlink

/// What a ``VarlinkServer`` says of the limits it keeps, in the terms of the program that runs
/// it: the error reply to a message past its size limit, and the advice of the warnings it logs.
/// The defaults name no program and no setting.
/// Why it is built this way: docs/DESIGN-NOTES.md, "The transport names no program".
public struct VarlinkServerWording: Sendable {
    /// The error reply to a message longer than `limit` bytes, sent before the connection is
    /// closed; `nil` closes it without one.
    public var messageTooLarge: (@Sendable (_ limit: Int) -> VarlinkError)?
    /// What to do when a connection was closed for a message past the size limit.
    public var messageTooLargeAdvice: String
    /// What to do when a connection was closed because its incomplete message would have taken
    /// the bytes held for incomplete messages past their budget (``IncomingMessageBudget``).
    public var incomingBudgetAdvice: String
    /// What to do when a connection was closed instead of being sent a reply that would have
    /// taken the bytes of replies not yet read past their budget (``OutgoingReplyBudget``).
    public var outgoingBudgetAdvice: String
    /// What to do when a connection was refused at the ``ConnectionLimit``.
    public var connectionLimitAdvice: String
    /// What to do when the process is out of file descriptors and cannot accept connections.
    public var descriptorLimitAdvice: String

    /// Generic wording; each part can be replaced.
    public init(
        messageTooLarge: (@Sendable (_ limit: Int) -> VarlinkError)? = nil,
        messageTooLargeAdvice: String =
            "Raise the server's message size limit if clients send calls this large; otherwise a client is not speaking Varlink.",
        incomingBudgetAdvice: String =
            "Clients may be sending large messages without finishing them; raise the budget for incomplete messages if such messages are expected.",
        outgoingBudgetAdvice: String =
            "Clients may be asking for large replies without reading them; raise the budget for unread replies if many clients read large replies at once.",
        connectionLimitAdvice: String =
            "A client may be opening connections without closing them; raise the connection limit (and the descriptor limit) if this load is expected.",
        descriptorLimitAdvice: String =
            "Raise the process's descriptor limit, or lower its connection limit to keep more in reserve."
    ) {
        self.messageTooLarge = messageTooLarge
        self.messageTooLargeAdvice = messageTooLargeAdvice
        self.incomingBudgetAdvice = incomingBudgetAdvice
        self.outgoingBudgetAdvice = outgoingBudgetAdvice
        self.connectionLimitAdvice = connectionLimitAdvice
        self.descriptorLimitAdvice = descriptorLimitAdvice
    }
}
