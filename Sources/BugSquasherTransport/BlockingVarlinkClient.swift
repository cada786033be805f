public import BugSquasherVarlink
import Foundation
import Synchronization

/// A Varlink client on a blocking Unix socket, for synchronous callers (an incremental store's
/// methods are synchronous) and command-line tools. Calls are serialized by a mutex; each reads
/// its replies before the next call is sent.
///
/// ```swift
/// let client = try BlockingVarlinkClient(path: "/run/squasherd/squasherd.sock")
/// let info: Info = try client.call("io.bugsquasher.Store.Info", Empty())
/// ```
public final class BlockingVarlinkClient: Sendable {
    /// The socket path.
    public let path: String
    private let fd: Mutex<CInt>
    private let buffer = Mutex<[UInt8]>([])

    /// Connects.
    ///
    /// - Throws: ``TransportError`` saying whether the socket is missing, refused or forbidden.
    public init(path: String) throws {
        self.path = path
        fd = Mutex(try Self.connect(path))
    }

    deinit { fd.withLock { if $0 >= 0 { _ = close($0) } } }

    static func connect(_ path: String) throws -> CInt {
        let fd = socket(AF_UNIX, CInt(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TransportError("Could not create a socket: \(String(cString: strerror(errno))).") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw TransportError("The socket path \(path) is too long (\(bytes.count) bytes; Unix sockets allow 107).")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let reason = errno
            close(fd)
            switch reason {
            case ENOENT, ECONNREFUSED: throw TransportError("squasherd is not listening on \(path) (\(String(cString: strerror(reason)))). Start it, or pass the right socket path.")
            case EACCES, EPERM: throw TransportError("Permission denied on \(path): this user may not use this socket (see docs/PROTOCOL.md, Access).")
            default: throw TransportError("Could not connect to \(path): \(String(cString: strerror(reason))).")
            }
        }
        return fd
    }

    /// Calls a method and decodes its single reply.
    public func call<P: Encodable, R: Decodable>(_ method: String, _ parameters: P, as type: R.Type = R.self) throws -> R {
        let message = try VarlinkCall.encode(method: method, parameters: parameters)
        let reply = try fd.withLock { fd -> Data in
            if fd < 0 { fd = try Self.connect(path) }
            do {
                try send(fd, message)
                return try receive(fd)
            } catch let error as TransportError {
                // The connection is broken: the next call opens a new one (this call is not
                // retried, since it may have been executed).
                disconnect(&fd)
                throw error
            }
        }
        return try VarlinkReply(message: reply).parameters(R.self)
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
            if fd < 0 { fd = try Self.connect(path) }
            do {
                var unanswered = 0
                var exhausted = false
                while true {
                    while !exhausted, unanswered < window {
                        guard let parameters = try next() else {
                            exhausted = true
                            break
                        }
                        try send(fd, try VarlinkCall.encode(method: method, parameters: parameters))
                        unanswered += 1
                    }
                    guard unanswered > 0 else { return }
                    let reply = try VarlinkReply(message: try receive(fd))
                    unanswered -= 1
                    if let error = reply.error { throw error }
                    try body(try reply.parameters(R.self))
                }
            } catch {
                // Calls may still be unanswered: their replies must not reach the next call.
                disconnect(&fd)
                throw error
            }
        }
    }

    /// Calls a streaming method and hands each reply to `body` until the last one, or until
    /// `body` returns `false` (the connection is then unusable: close it).
    public func stream<P: Encodable>(_ method: String, _ parameters: P, _ body: (VarlinkReply) throws -> Bool) throws {
        try fd.withLock { fd in
            try send(fd, try VarlinkCall.encode(method: method, parameters: parameters, more: true))
            while true {
                let reply = try VarlinkReply(message: try receive(fd))
                if let error = reply.error { throw error }
                guard try body(reply), reply.continues else { return }
            }
        }
    }

    /// Calls `method` with `upgrade: true` and, once it answered, hands the connection to `body`
    /// to speak the method's own protocol (an upload's chunks, say). The connection no longer
    /// speaks Varlink afterwards: it is closed, and the next call opens a new one.
    ///
    /// - Throws: the method's error reply (the connection is not upgraded then), a
    ///   ``TransportError``, or what `body` throws.
    public func upgrade<P: Encodable, R>(_ method: String, _ parameters: P, body: (UpgradedConnection) throws -> R) throws -> R {
        try fd.withLock { fd in
            if fd < 0 { fd = try Self.connect(path) }
            defer { disconnect(&fd) }
            try send(fd, try VarlinkCall.encode(method: method, parameters: parameters, upgrade: true))
            let reply = try VarlinkReply(message: try receive(fd))
            if let error = reply.error { throw error }
            return try body(UpgradedConnection(client: self, fd: fd))
        }
    }

    /// A connection after an upgrade: raw bytes out, and NUL-terminated messages in.
    public struct UpgradedConnection {
        fileprivate let client: BlockingVarlinkClient
        fileprivate let fd: CInt

        /// Sends bytes as they are. When the connection broke because the daemon answered and
        /// closed it (an error, typically), that answer is thrown rather than the broken pipe.
        public func send(_ bytes: UnsafeRawBufferPointer) throws {
            do {
                try client.sendAll(fd, bytes)
            } catch let failure as TransportError {
                if let reply = try? VarlinkReply(message: client.receive(fd)), let error = reply.error { throw error }
                throw failure
            }
        }

        /// Receives the next NUL-terminated message as a reply.
        public func receiveReply() throws -> VarlinkReply {
            try VarlinkReply(message: try client.receive(fd))
        }
    }

    /// Closes the connection and drops what was read from it; the next call connects again.
    private func disconnect(_ fd: inout CInt) {
        close(fd)
        fd = -1
        buffer.withLock { $0.removeAll() }
    }

    private func send(_ fd: CInt, _ message: Data) throws {
        var bytes = [UInt8](message)
        bytes.append(0)
        try bytes.withUnsafeBytes { try sendAll(fd, $0) }
    }

    fileprivate func sendAll(_ fd: CInt, _ bytes: UnsafeRawBufferPointer) throws {
        var sent = 0
        while sent < bytes.count {
            let n = Glibc.send(fd, bytes.baseAddress! + sent, bytes.count - sent, CInt(MSG_NOSIGNAL))
            if n < 0 {
                if errno == EINTR { continue }
                throw TransportError("The connection to \(path) broke while sending: \(String(cString: strerror(errno))).")
            }
            sent += n
        }
    }

    fileprivate func receive(_ fd: CInt) throws -> Data {
        try buffer.withLock { buffer in
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                if let end = buffer.firstIndex(of: 0) {
                    let message = Data(buffer[..<end])
                    buffer.removeSubrange(...end)
                    return message
                }
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    throw TransportError(n == 0 ? "squasherd closed the connection on \(path)." : "Reading from \(path) failed: \(String(cString: strerror(errno))).")
                }
                buffer.append(contentsOf: chunk[..<n])
            }
        }
    }
}
