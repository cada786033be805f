import BugSquasherTransport
import Foundation

/// A plain Unix stream socket, for sending squasherd arbitrary bytes (hostile-client tests).
public final class RawSocket {
    /// The socket's descriptor.
    public let fd: Int32

    /// Connects to `path`; throws with the errno text when the connection is refused.
    public init(path: String, receiveTimeout seconds: Int = 10) throws {
        // `self.fd` is set only once connected: a class whose stored properties are all set
        // runs its deinit when its init throws, which would close the descriptor a second
        // time — by then perhaps another thread's.
        let fd = unixSocket(Int32(SOCK_STREAM.rawValue))
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        guard (try? withUnixAddress(path, { connect(fd, $0, $1) })) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw HarnessError("connect(\(path)): \(reason)")
        }
        self.fd = fd
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// Sends all of `bytes`; returns how many the peer took before it closed (or a timeout).
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes {
                Foundation.send(fd, $0.baseAddress! + sent, min(bytes.count - sent, 1 << 20), Int32(MSG_NOSIGNAL))
            }
            if n <= 0 { break }
            sent += n
        }
        return sent
    }

    /// Receives until a NUL-terminated message arrived, the peer closed, or the timeout passed;
    /// returns the message without its terminator (empty when none came).
    public func receiveMessage() -> String {
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !reply.contains(0) {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            reply += buffer[..<n]
        }
        return String(decoding: reply.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// Whether bytes wait to be read, without reading them.
    public var hasPendingInput: Bool {
        var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&probe, 1, 0) == 1 && probe.revents & Int16(POLLIN) != 0
    }

    /// Bytes received after the last message ``nextMessage(readSize:)`` returned.
    private var unread: [UInt8] = []

    /// The next NUL-terminated message of a stream of them, without its terminator; `nil` when
    /// the peer closed or the timeout passed first. Reads at most `readSize` bytes at a time,
    /// so that little waits on this side: a slow reader's backlog stays with the sender.
    public func nextMessage(readSize: Int = 1024) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: readSize)
        while true {
            if let end = unread.firstIndex(of: 0) {
                defer { unread.removeSubrange(...end) }
                return Array(unread[..<end])
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return nil }
            unread += buffer[..<n]
        }
    }

    /// Reads whatever arrives until the peer closes or nothing comes for the receive timeout.
    public func receiveAll(limit: Int = 64 << 20) -> [UInt8] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.count < limit {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            data += buffer[..<n]
        }
        return data
    }

    /// Shuts down this side's sending direction (`shutdown(SHUT_WR)`), as `socat` and `nc -N` do
    /// once their input has ended; receiving still works.
    public func finishSending() {
        shutdown(fd, Int32(SHUT_WR))
    }

    /// Whether the peer has closed the connection: the next read returns end of file, and
    /// returns it at once.
    public var peerClosed: Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_DONTWAIT)) == 0
    }

    /// Connects, sends `bytes`, and returns the first reply (empty when the daemon closed).
    public static func exchange(_ path: String, _ bytes: [UInt8]) throws -> String {
        let socket = try RawSocket(path: path)
        socket.send(bytes)
        return socket.receiveMessage()
    }
}

/// A Unix socket of `type` that no child process inherits (see ``ChildPipe`` for why a test
/// process's descriptors must not leak into the children of tests running beside it).
public func unixSocket(_ type: Int32) -> Int32 {
    socket(AF_UNIX, type | Int32(SOCK_CLOEXEC.rawValue), 0)
}

/// Whether a path is a listening Unix socket of this type.
public func connectable(_ path: String, type: Int32) -> Bool {
    let fd = unixSocket(type)
    defer { close(fd) }
    return (try? withUnixAddress(path) { connect(fd, $0, $1) }) == 0
}

/// A Varlink call as bytes: the JSON text and its NUL terminator.
public func varlinkCall(_ json: String) -> [UInt8] { Array(json.utf8) + [0] }
