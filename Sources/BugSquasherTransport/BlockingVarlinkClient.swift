public import BugSquasherVarlink
import Foundation
import Synchronization

/// A Varlink client on a blocking Unix socket, for synchronous callers and command-line tools.
/// Calls are serialized by a mutex; each reads its replies before the next call is sent. With a
/// `timeout`, connecting, each send and the wait for a call's first reply give up with a
/// ``TransportError``.
/// Why it is built this way: docs/DESIGN-NOTES.md, "A blocking call gives up after its timeout".
public final class BlockingVarlinkClient: Sendable {
    /// The socket path.
    public let path: String
    /// How long connecting, a send or the wait for a reply may take; `nil` waits as long as it
    /// takes.
    public let timeout: Duration?
    private let fd: Mutex<CInt>
    private let buffer = Mutex<[UInt8]>([])

    /// The longest reply a client reads (64 MiB), so that a peer sending without end cannot
    /// make it hold gigabytes: far more than a reply of a server that pages its large answers.
    public static let maximumReplySize = 64 * 1024 * 1024

    /// Connects.
    ///
    /// - Parameter timeout: how long connecting, a send or the wait for a reply may take before
    ///   it fails; `nil` (the default) waits as long as it takes.
    /// - Throws: ``TransportError`` saying whether the socket is missing, refused, forbidden or
    ///   did not accept the connection in time.
    public init(path: String, timeout: Duration? = nil) throws {
        self.path = path
        self.timeout = timeout
        fd = Mutex(try Self.connect(path, timeout: timeout))
    }

    deinit { fd.withLock { if $0 >= 0 { _ = close($0) } } }

    /// A blocking Unix stream socket connected to `path`, with `timeout` on its sends and
    /// receives. Close-on-exec, so that a process the caller spawns does not keep the
    /// connection open after the client closed it.
    static func connect(_ path: String, timeout: Duration? = nil) throws -> CInt {
        let fd = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            let reason = errno
            throw TransportError(
                .connectFailed, "Could not create a socket: \(String(cString: strerror(reason))).", path: path,
                systemError: reason)
        }
        // SO_SNDTIMEO bounds connect(2) on a Unix socket too (a listener whose backlog is full).
        if let timeout {
            setTimeout(fd, SO_SNDTIMEO, timeout)
            setTimeout(fd, SO_RCVTIMEO, timeout)
        }
        let result: CInt
        do {
            result = try withUnixAddress(path) { Glibc.connect(fd, $0, $1) }
        } catch {
            close(fd)
            throw error
        }
        guard result == 0 else {
            let reason = errno
            close(fd)
            let described = String(cString: strerror(reason))
            switch reason {
            case ECONNREFUSED where !Self.isSocket(path):
                throw TransportError(
                    .notASocket, "\(path) is not a socket.", advice: "Pass the path of the server's socket.",
                    path: path,
                    systemError: reason)
            case ENOENT, ECONNREFUSED:
                throw TransportError(
                    reason == ENOENT ? .notFound : .connectionRefused,
                    "Nothing is listening on \(path) (\(described)).",
                    advice: "Start the server, or pass the right socket path.", path: path, systemError: reason)
            case EACCES, EPERM:
                throw TransportError(
                    .permissionDenied, "Permission denied on \(path): this user may not use this socket.", path: path,
                    systemError: reason)
            case EAGAIN, EINPROGRESS:
                throw TransportError(
                    .connectTimedOut,
                    "\(path) did not accept the connection within \(TransportError.seconds(timeout)): the server is overloaded or stuck (its backlog is full).",
                    path: path, timeout: timeout, systemError: reason)
            default:
                throw TransportError(
                    .connectFailed, "Could not connect to \(path): \(described).", path: path, systemError: reason)
            }
        }
        return fd
    }

    /// Whether something listens at `path`: `false` only when a connection is refused or the
    /// socket is gone, so that a server whose backlog is full still counts as there.
    static func isListening(_ path: String) -> Bool {
        let fd = socket(
            AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return true }
        defer { close(fd) }
        guard let result = try? withUnixAddress(path, { Glibc.connect(fd, $0, $1) }) else { return true }
        return result == 0 || (errno != ECONNREFUSED && errno != ENOENT)
    }

    /// Whether `path` names a socket (not a regular file given by mistake, say).
    private static func isSocket(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFSOCK
    }

    /// Sets a socket's SO_SNDTIMEO or SO_RCVTIMEO; a zero duration waits as long as it takes.
    private static func setTimeout(_ fd: CInt, _ option: CInt, _ timeout: Duration) {
        let (seconds, attoseconds) = timeout.components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        if seconds == 0 && value.tv_usec == 0 && attoseconds > 0 { value.tv_usec = 1 }
        _ = setsockopt(fd, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Reads a reply; a message that is not a Varlink reply becomes a ``TransportError``
    /// (``TransportError/Code/malformedReply``, without advice) naming the socket.
    private func decodeReply(_ message: Data, of method: String) throws -> VarlinkReply {
        do {
            return try VarlinkReply(message: message)
        } catch {
            throw TransportError(
                .malformedReply,
                "The answer from \(path) to \(method) is not a Varlink reply (\(message.prefix(80).count) bytes: \(String(decoding: message.prefix(80), as: UTF8.self).debugDescription)).",
                path: path)
        }
    }

    /// A reply's parameters. An error reply is thrown as the ``VarlinkError`` it is; parameters
    /// that are not what `method` answers become a ``TransportError``
    /// (``TransportError/Code/unexpectedReply``, without advice) naming the socket.
    private func parameters<R: Decodable>(of reply: VarlinkReply, method: String, as type: R.Type) throws -> R {
        if let error = reply.error { throw error }
        do {
            return try reply.parameters(R.self)
        } catch {
            let parameter =
                switch error {
                case let error as VarlinkError: error.parameters["parameter"]?.stringValue ?? "parameters"
                case let error as DecodingError: VarlinkCall.parameterName(error)
                default: "parameters"
                }
            throw TransportError(
                .unexpectedReply,
                "The reply from \(path) to \(method) has parameters this program cannot read ('\(parameter)' is missing or of another type).",
                path: path)
        }
    }

    /// Calls a method and decodes its single reply.
    public func call<P: Encodable, R: Decodable>(_ method: String, _ parameters: P, as type: R.Type = R.self) throws
        -> R
    {
        let message = try VarlinkCall.encode(method: method, parameters: parameters)
        let reply = try fd.withLock { fd -> Data in
            if fd < 0 { fd = try Self.connect(path, timeout: timeout) }
            do {
                try sendOrReadRefusal(fd, message, method: method)
                return try receive(fd)
            } catch {
                // The connection is broken: the next call opens a new one (this call is not
                // retried, since it may have been executed).
                disconnect(&fd)
                throw error
            }
        }
        return try self.parameters(of: try decodeReply(reply, of: method), method: method, as: R.self)
    }

    /// Calls `method` once for each parameters `next` returns (until `nil`) without waiting for
    /// each reply before sending the next call: up to `window` calls are unanswered at a time,
    /// and a connection answers its calls in order. An upload keeps the socket and the daemon
    /// busy this way instead of waiting a round trip per piece.
    ///
    /// Each reply goes to `body`, in order. The first error reply is thrown; the calls sent after
    /// it may have been executed, and the connection is closed (the next call opens a new one).
    public func pipeline<P: Encodable, R: Decodable>(
        _ method: String, as type: R.Type = R.self, window: Int, next: () throws -> P?, body: (R) throws -> Void
    ) throws {
        precondition(window >= 1, "a pipeline needs a window of at least one call")
        try fd.withLock { fd in
            if fd < 0 { fd = try Self.connect(path, timeout: timeout) }
            do {
                var unanswered = 0
                var exhausted = false
                while true {
                    while !exhausted, unanswered < window {
                        guard let parameters = try next() else {
                            exhausted = true
                            break
                        }
                        try sendOrReadRefusal(
                            fd, try VarlinkCall.encode(method: method, parameters: parameters), method: method)
                        unanswered += 1
                    }
                    guard unanswered > 0 else { return }
                    let reply = try decodeReply(try receive(fd), of: method)
                    unanswered -= 1
                    try body(try self.parameters(of: reply, method: method, as: R.self))
                }
            } catch {
                // Calls may still be unanswered: their replies must not reach the next call.
                disconnect(&fd)
                throw error
            }
        }
    }

    /// Calls a streaming method and hands each reply to `body` until the last one, or until
    /// `body` returns `false` (the connection is then unusable: close it). The ``timeout`` bounds
    /// the wait for the first reply; the next ones are waited for as long as it takes.
    public func stream<P: Encodable>(_ method: String, _ parameters: P, _ body: (VarlinkReply) throws -> Bool) throws {
        try fd.withLock { fd in
            if fd < 0 { fd = try Self.connect(path, timeout: timeout) }
            var first = true
            defer { if let timeout, !first, fd >= 0 { Self.setTimeout(fd, SO_RCVTIMEO, timeout) } }
            do {
                try send(fd, try VarlinkCall.encode(method: method, parameters: parameters, more: true))
                while true {
                    let reply = try decodeReply(try receive(fd), of: method)
                    if first, timeout != nil { Self.setTimeout(fd, SO_RCVTIMEO, .zero) }
                    first = false
                    if let error = reply.error { throw error }
                    guard try body(reply), reply.continues else { return }
                }
            } catch let error as TransportError {
                // A reply may still come (late, or the rest of one): not to the next call.
                disconnect(&fd)
                throw error
            }
        }
    }

    /// Calls `method` with `upgrade: true` and, once it answered, hands the connection to `body`
    /// to speak the method's own protocol (an upload's chunks, say). The connection no longer
    /// speaks Varlink afterwards: it is closed, and the next call opens a new one.
    ///
    /// - Throws: the method's error reply (the connection is not upgraded then), a
    ///   ``TransportError``, or what `body` throws.
    public func upgrade<P: Encodable, R>(_ method: String, _ parameters: P, body: (UpgradedConnection) throws -> R)
        throws -> R
    {
        try fd.withLock { fd in
            if fd < 0 { fd = try Self.connect(path, timeout: timeout) }
            defer { disconnect(&fd) }
            try send(fd, try VarlinkCall.encode(method: method, parameters: parameters, upgrade: true))
            let reply = try decodeReply(try receive(fd), of: method)
            if let error = reply.error { throw error }
            return try body(UpgradedConnection(client: self, fd: fd, reply: reply))
        }
    }

    /// A connection after an upgrade: raw bytes out, and NUL-terminated messages in.
    public struct UpgradedConnection {
        fileprivate let client: BlockingVarlinkClient
        fileprivate let fd: CInt
        /// The method's reply to the call, before the upgrade.
        public let reply: VarlinkReply

        /// Sends bytes as they are. When the connection broke because the server answered and
        /// closed it (an error, typically), that answer is thrown rather than the broken pipe.
        public func send(_ bytes: UnsafeRawBufferPointer) throws {
            do {
                try client.sendAll(fd, bytes)
            } catch let failure as TransportError {
                if let reply = try? VarlinkReply(message: client.receive(fd)), let error = reply.error { throw error }
                throw failure
            }
        }

        /// Receives bytes the server sends as they are (a download after the reply) into
        /// `destination`; returns how many, 0 once the server closed the connection.
        public func receiveBytes(into destination: UnsafeMutableRawBufferPointer) throws -> Int {
            try client.receiveRaw(fd, into: destination)
        }

        /// Receives the next NUL-terminated message as a reply.
        public func receiveReply() throws -> VarlinkReply {
            try VarlinkReply(message: try client.receive(fd))
        }

        /// Whether `input` can be read — waiting for it when `wait` is true — while watching the
        /// connection: a reply the server sends meanwhile ends the transfer early (the server
        /// gave up on it, or is stopping), and is thrown at once, as is a connection it closed
        /// without one (``TransportError/Code/answeredEarly``). A client waiting on a slow or
        /// stalled producer thus learns of it now, not when its input next moves.
        public func inputReady(_ input: CInt, wait: Bool) throws -> Bool {
            var watched = [
                pollfd(fd: input, events: Int16(POLLIN), revents: 0), pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
            ]
            while true {
                let ready = poll(&watched, 2, wait ? -1 : 0)
                if ready < 0 && errno == EINTR { continue }
                guard ready >= 0 else {
                    let reason = errno
                    throw TransportError(
                        .transferFailed,
                        "Waiting for the input and \(client.path) failed: \(String(cString: strerror(reason))).",
                        path: client.path, systemError: reason)
                }
                if watched[1].revents != 0 {
                    let reply = try receiveReply()
                    throw reply.error
                        ?? TransportError(
                            .answeredEarly, "The server answered on \(client.path) before everything was sent.",
                            advice: "Send it again.", path: client.path)
                }
                return watched[0].revents != 0
            }
        }
    }

    /// Closes the connection and drops what was read from it; the next call connects again.
    private func disconnect(_ fd: inout CInt) {
        close(fd)
        fd = -1
        buffer.withLock { $0.removeAll() }
    }

    /// Sends a call; when the server closes the connection meanwhile, throws what it answered
    /// before closing, if anything (such as its error for a call past its message size limit:
    /// the answer arrives while the call is still being sent), rather than a bare "closed".
    private func sendOrReadRefusal(_ fd: CInt, _ message: Data, method: String) throws {
        do {
            try send(fd, message)
        } catch let error as TransportError where error.code == .closedByPeer || error.code == .peerGone {
            // The connection is closed: reading returns what came before the close, then ends.
            if let reply = try? receive(fd), let refusal = try? decodeReply(reply, of: method).error {
                throw refusal
            }
            throw error
        }
    }

    private func send(_ fd: CInt, _ message: Data) throws {
        var bytes = [UInt8](message)
        bytes.append(0)
        try bytes.withUnsafeBytes { try sendAll(fd, $0) }
    }

    fileprivate func sendAll(_ fd: CInt, _ bytes: UnsafeRawBufferPointer) throws {
        try Self.sendAll(fd, bytes, path: path, timeout: timeout)
    }

    /// Sends all of `bytes` on a blocking socket connected to `path`, or throws what went wrong.
    static func sendAll(_ fd: CInt, _ bytes: UnsafeRawBufferPointer, path: String, timeout: Duration?) throws {
        var sent = 0
        while sent < bytes.count {
            let n = Glibc.send(fd, bytes.baseAddress! + sent, bytes.count - sent, CInt(MSG_NOSIGNAL))
            if n < 0 {
                if errno == EINTR { continue }
                let reason = errno
                if reason == EAGAIN || reason == EWOULDBLOCK {
                    throw TransportError(
                        .sendTimedOut,
                        "\(path) took nothing of what was sent for \(TransportError.seconds(timeout)): the server is overloaded or stuck, or another program is listening there.",
                        path: path, timeout: timeout, systemError: reason)
                }
                // The server closed the connection (a refused one is closed at once).
                if reason == EPIPE || reason == ECONNRESET { throw TransportError.closedBeforeAnswering(path) }
                throw TransportError(
                    .transferFailed,
                    "The connection to \(path) broke while sending: \(String(cString: strerror(reason))).", path: path,
                    systemError: reason)
            }
            sent += n
        }
    }

    /// Bytes as they come, those read past the last message first; 0 at the end of the connection.
    fileprivate func receiveRaw(_ fd: CInt, into destination: UnsafeMutableRawBufferPointer) throws -> Int {
        try buffer.withLock { buffer in
            if !buffer.isEmpty {
                let count = min(buffer.count, destination.count)
                buffer.withUnsafeBytes { destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                buffer.removeFirst(count)
                return count
            }
            while true {
                let n = recv(fd, destination.baseAddress, destination.count, 0)
                if n >= 0 { return n }
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { throw TransportError.noAnswer(path, within: timeout) }
                let reason = errno
                throw TransportError(
                    .transferFailed, "Reading from \(path) failed: \(String(cString: strerror(reason))).", path: path,
                    systemError: reason)
            }
        }
    }

    fileprivate func receive(_ fd: CInt) throws -> Data {
        try buffer.withLock { buffer in
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            // Only new bytes are searched for the terminator: a reply of megabytes arrives in
            // many reads, and searching it from its start after each one is quadratic.
            var searched = 0
            while true {
                if let end = buffer[searched...].firstIndex(of: 0) {
                    let message = Data(buffer[..<end])
                    buffer.removeSubrange(...end)
                    return message
                }
                searched = buffer.count
                guard searched <= Self.maximumReplySize else {
                    throw TransportError(
                        .replyTooLarge,
                        "The answer from \(path) grew past \(Self.maximumReplySize / 1024 / 1024) MiB without ending, so it was not read.",
                        advice: "Ask for less in one call; otherwise another program is listening there.", path: path)
                }
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n < 0 && errno == EINTR { continue }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    throw TransportError.noAnswer(path, within: timeout)
                }
                guard n > 0 else {
                    // End of file, or a reset: the server closed the connection (a refused one
                    // is closed at once, which resets it when the call was not read).
                    let reason = errno
                    throw n == 0 || reason == ECONNRESET
                        ? TransportError.closedBeforeAnswering(path)
                        : TransportError(
                            .transferFailed, "Reading from \(path) failed: \(String(cString: strerror(reason))).",
                            path: path, systemError: reason)
                }
                buffer.append(contentsOf: chunk[..<n])
            }
        }
    }
}
