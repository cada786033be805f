public import BugSquasherErrors
import Foundation

/// A transport failure: what kind it is (``Code``), the facts a caller needs to say it in its
/// own terms (the socket's path, the time allowed, the system's error number), and a statement
/// and advice (``ExplainedError``) that name no program: a program that knows its peer words
/// the error for its users by ``code``.
/// Why it is built this way: docs/DESIGN-NOTES.md, "The transport names no program".
public struct TransportError: ExplainedError, Sendable {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: String, Hashable, Sendable {
            case notFound, notASocket, connectionRefused, permissionDenied, connectTimedOut, connectFailed
            case noAnswer, sendTimedOut, closedByPeer, peerGone, closedMidMessage, transferFailed
            case malformedReply, unexpectedReply, replyTooLarge, answeredEarly
            case pathTooLong, pathOccupied, addressInUse, cannotCreateDirectory, listenFailed
        }
        private let wrapped: Wrapped
        private init(_ wrapped: Wrapped) { self.wrapped = wrapped }

        // Connecting.

        /// No file at the socket path (`ENOENT`): nothing listens there.
        public static let notFound = Code(.notFound)
        /// The path names a file that is not a socket.
        public static let notASocket = Code(.notASocket)
        /// A socket file at the path, but no process listens on it (`ECONNREFUSED`).
        public static let connectionRefused = Code(.connectionRefused)
        /// The socket's permissions do not let this user connect (`EACCES`, `EPERM`): a server
        /// is there, but trying again will not help.
        public static let permissionDenied = Code(.permissionDenied)
        /// The server did not accept the connection within the time allowed (its backlog is full).
        public static let connectTimedOut = Code(.connectTimedOut)
        /// Connecting failed for another reason (see ``TransportError/systemError``).
        public static let connectFailed = Code(.connectFailed)

        // Once connected.

        /// No reply within the time allowed.
        public static let noAnswer = Code(.noAnswer)
        /// The server took nothing of what was sent within the time allowed.
        public static let sendTimedOut = Code(.sendTimedOut)
        /// The server closed the connection before answering, and still listens on its path: it
        /// refused this connection (at a limit of its own), or is stopping.
        public static let closedByPeer = Code(.closedByPeer)
        /// The server closed the connection before answering, and nothing listens on its path any
        /// more: it stopped, crashed or was killed.
        public static let peerGone = Code(.peerGone)
        /// The server closed the connection in the middle of a message.
        public static let closedMidMessage = Code(.closedMidMessage)
        /// Sending, receiving or waiting on the connection failed for another reason (see
        /// ``TransportError/systemError``).
        public static let transferFailed = Code(.transferFailed)
        /// What came back is not a Varlink reply: another program may be listening on the path.
        public static let malformedReply = Code(.malformedReply)
        /// A Varlink reply, but not what the method answers (parameters missing or of another
        /// type): another program or another version of the server may be listening.
        public static let unexpectedReply = Code(.unexpectedReply)
        /// A reply grew past the longest a client reads without ending.
        public static let replyTooLarge = Code(.replyTooLarge)
        /// The server answered an upgraded connection before everything was sent on it.
        public static let answeredEarly = Code(.answeredEarly)

        // Listening (and any use of a path).

        /// The path is longer than a Unix socket address holds.
        public static let pathTooLong = Code(.pathTooLong)
        /// A file that is not a socket (a directory, say) is where the socket would be bound; it
        /// is not replaced.
        public static let pathOccupied = Code(.pathOccupied)
        /// Another process listens on the path.
        public static let addressInUse = Code(.addressInUse)
        /// The directory of the socket cannot be created.
        public static let cannotCreateDirectory = Code(.cannotCreateDirectory)
        /// Creating, binding, listening on or setting up the listening socket failed (see
        /// ``TransportError/systemError``).
        public static let listenFailed = Code(.listenFailed)

        public var description: String { wrapped.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What happened, without advice, naming no program.
    public var statement: String
    /// What to do about it, naming no program; empty when there is nothing to say.
    public var advice: String
    /// The socket path concerned (for ``Code/cannotCreateDirectory``, the directory); `nil` for
    /// a socket that was passed as a descriptor.
    public var path: String?
    /// The time allowed, for ``Code/connectTimedOut``, ``Code/noAnswer`` and
    /// ``Code/sendTimedOut``; `nil` otherwise, or when the caller set none.
    public var timeout: Duration?
    /// The system's error number (`errno`), when a system call failed.
    public var systemError: CInt?

    /// Creates an error.
    public init(
        _ code: Code, _ statement: String, advice: String = "", path: String? = nil, timeout: Duration? = nil,
        systemError: CInt? = nil
    ) {
        self.code = code
        self.statement = statement
        self.advice = advice
        self.path = path
        self.timeout = timeout
        self.systemError = systemError
    }

    /// The statement followed by the advice.
    public var message: String { Self.joined(statement, advice) }

    /// What the system says of ``systemError`` (`No such file or directory`), if there is one.
    public var systemErrorDescription: String? { systemError.map { String(cString: strerror($0)) } }

    /// A time allowed as messages say it: `60 s`, `0.5 s`, or `the time allowed` for `nil`.
    public static func seconds(_ timeout: Duration?) -> String {
        guard let timeout else { return "the time allowed" }
        let (seconds, attoseconds) = timeout.components
        return attoseconds == 0 ? "\(seconds) s" : "\(Double(seconds) + Double(attoseconds) / 1e18) s"
    }

    /// `path` is longer than a Unix socket address holds (``VarlinkServer/maximumSocketPathBytes``).
    static func pathTooLong(_ path: String) -> TransportError {
        TransportError(
            .pathTooLong,
            "The socket path \(path) is \(path.utf8.count) bytes long; a Unix socket path holds at most \(VarlinkServer.maximumSocketPathBytes).",
            advice: "Use a shorter path.", path: path)
    }

    /// Nothing came from `path` within `timeout` (`nil`: the time allowed).
    public static func noAnswer(_ path: String, within timeout: Duration?) -> TransportError {
        TransportError(
            .noAnswer,
            "No answer from \(path) within \(seconds(timeout)): the server is overloaded or stuck, or another program is listening there.",
            path: path, timeout: timeout)
    }

    /// The server closed the connection at `path` before answering a call: ``Code/peerGone`` when
    /// nothing listens at `path` any more, ``Code/closedByPeer`` when something still does.
    public static func closedBeforeAnswering(_ path: String) -> TransportError {
        // Asked a few times over 150 ms: a process that is being killed closes its connections
        // and its listening sockets one by one, in no set order.
        let listening = (0..<4).allSatisfy { attempt in
            if attempt > 0 { usleep(50_000) }
            return BlockingVarlinkClient.isListening(path)
        }
        guard listening else {
            return TransportError(
                .peerGone, "The server went away while answering on \(path): nothing listens there now.",
                advice: "Start it again, then retry.", path: path)
        }
        return TransportError(
            .closedByPeer,
            "The server closed the connection on \(path) before answering: it may be at one of its limits (connections, file descriptors), or stopping.",
            advice: "Retry later.", path: path)
    }
}
