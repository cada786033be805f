import BugSquasherVarlink

/// The server side of one Varlink connection, as a value: what each message read means, given
/// where the connection is (serving calls one at a time, running a streaming call, upgraded to
/// the method's own protocol, or closed). ``VarlinkServer`` reads, feeds the inputs, and carries
/// the actions out; this type does no I/O, so its transitions are tested without a socket.
///
/// Varlink's rules it keeps: calls are answered in order, one at a time; a call with `more`
/// streams replies until its last one, and no other call may come meanwhile; after a call with
/// `upgrade`, the bytes that follow belong to the method's own protocol; a message that is not
/// a call, or grows past the size limit, is answered with an error and ends the connection.
struct VarlinkConnectionStateMachine: Sendable {
    /// Where the connection is.
    enum State: Sendable, Equatable {
        /// Reading calls, answering each before the next.
        case serving
        /// Streaming call `number` runs until its last reply is sent.
        case streaming(number: Int)
        /// The Varlink protocol has ended; raw bytes go to the method's handler.
        case upgraded
        /// Nothing more is read.
        case closed
    }

    /// What was read.
    enum Input: Sendable, Equatable {
        /// A call; `streams`: the service streams its replies (`more`); `upgrade`: the call
        /// asked for the connection to leave Varlink after its reply.
        case call(streams: Bool, upgrade: Bool)
        /// A message that is not a call.
        case malformed
        /// A message past the size limit, without its terminator.
        case tooLarge
        /// Bytes after an upgrade.
        case raw
    }

    /// Why the connection closes without a reply.
    enum CloseReason: Sendable, Equatable {
        /// A call came while a streaming call runs, which Varlink does not allow.
        case callDuringStreamingCall
        /// Bytes came after an upgrade that no handler took over.
        case rawWithoutHandler
        /// The upgraded protocol ended (its handler sent its last reply).
        case upgradeEnded
        /// The connection was closed already.
        case alreadyClosed
    }

    /// What to do.
    enum Action: Sendable, Equatable {
        /// Serve the call and reply; then report ``callHandled(handlerInstalled:)``.
        case handle
        /// Serve the call in a task of its own, as streaming call `number`, and read on; its
        /// last reply ends it (``streamEnded(_:)``).
        case startStreaming(number: Int)
        /// Hand the bytes to the upgrade's handler; when it is done, ``upgradeEnded()``.
        case passToUpgradeHandler
        /// Reply with the error for a malformed message, then close.
        case replyMalformedThenClose
        /// Warn, reply with the server's error for a message too large (when it has one), then
        /// close.
        case replyTooLargeThenClose
        /// Close without a reply.
        case close(CloseReason)
        /// Go on reading.
        case read
    }

    private(set) var state = State.serving
    /// The number of the last streaming call begun.
    private var streamingCalls = 0
    /// Whether the call being handled asked for an upgrade.
    private var upgradeAsked = false

    /// A message was read.
    mutating func received(_ input: Input) -> Action {
        switch (state, input) {
        case (.closed, _):
            return .close(.alreadyClosed)
        case (_, .malformed):
            state = .closed
            return .replyMalformedThenClose
        case (_, .tooLarge):
            state = .closed
            return .replyTooLargeThenClose
        case (.streaming, .call):
            state = .closed
            return .close(.callDuringStreamingCall)
        case (.serving, .call(streams: true, _)):
            streamingCalls += 1
            state = .streaming(number: streamingCalls)
            return .startStreaming(number: streamingCalls)
        case (.serving, .call(streams: false, let upgrade)):
            upgradeAsked = upgrade
            return .handle
        case (.upgraded, .raw):
            return .passToUpgradeHandler
        case (.upgraded, .call):
            // The framing hands over raw bytes once upgraded; a call here is not Varlink's.
            state = .closed
            return .close(.rawWithoutHandler)
        case (.serving, .raw), (.streaming, .raw):
            state = .closed
            return .close(.rawWithoutHandler)
        }
    }

    /// The call being handled was answered; `handlerInstalled`: it installed a handler for the
    /// bytes after an upgrade.
    mutating func callHandled(handlerInstalled: Bool) -> Action {
        guard state == .serving else { return .read }
        defer { upgradeAsked = false }
        guard upgradeAsked else { return .read }
        guard handlerInstalled else {
            state = .closed
            return .close(.rawWithoutHandler)
        }
        state = .upgraded
        return .read
    }

    /// Streaming call `number` sent its last reply (or ended); the client may call again.
    mutating func streamEnded(_ number: Int) {
        if state == .streaming(number: number) { state = .serving }
    }

    /// The upgrade's handler sent its last reply, or failed: the connection ends.
    mutating func upgradeEnded() -> Action {
        state = .closed
        return .close(.upgradeEnded)
    }

    /// Whether a streaming call runs.
    var isStreaming: Bool {
        if case .streaming = state { true } else { false }
    }
}
