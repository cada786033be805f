public import BugSquasherVarlink

/// The errors squasherd answers outside its interfaces: a message it did not read, a call whose
/// handler failed unexpectedly. The generic Varlink server and service take them from squasherd
/// (`VarlinkServerWording`, `VarlinkService.internalError`); clients match their names.
extension VarlinkError {
    /// The name of ``messageTooLarge(limit:)``.
    public static let messageTooLargeName = "io.bugsquasher.MessageTooLarge"
    /// The name of ``internalError(_:)``.
    public static let internalErrorName = "io.bugsquasher.InternalError"

    /// A message longer than squasherd's `limit` bytes (its `max_message_bytes`): squasherd
    /// answers it with this error, whatever the message was, and closes the connection. (Not an
    /// error of one interface: the message was not read, so no method is known.)
    public static func messageTooLarge(limit: Int) -> Self {
        var error = Self(
            messageTooLargeName,
            statement:
                "squasherd refused a message longer than its limit of \(limit) bytes (max_message_bytes) and closed the connection.",
            advice:
                "Send less in one call (fewer IDs or keys, smaller values), or raise max_message_bytes in squasherd's configuration."
        )
        error.parameters["limit"] = .int(Int64(limit))
        return error
    }

    /// Whether this is an interface's `StoreUnavailable`: squasherd could not reach its store
    /// (a PostgreSQL server that is down, a disk that is full) and changed nothing; a failure to
    /// retry later, not a call it refused.
    public var isStoreUnavailable: Bool { name.hasSuffix(".StoreUnavailable") }

    /// A call squasherd could not carry out for a reason that is a bug or a failure of its
    /// machine, not of the call: `error` is what its handler threw, described.
    public static func internalError(_ error: any Error) -> Self {
        .init(internalErrorName, ["message": .string("\(error)")])
    }
}
