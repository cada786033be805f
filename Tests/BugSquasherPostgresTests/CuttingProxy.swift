import Dispatch
import Foundation
import Glibc
import NIOCore
import NIOPosix
import Synchronization

@testable import BugSquasherPostgres

/// A proxy on a Unix socket between the store and the test server that can cut the server's
/// answer short, as a server stopped mid-answer does: after ``cutNextAnswer()``, it passes the
/// server's messages up to the first row of the next answer, then closes the store's side at
/// once, the rest unsent (after ``cutAtCopy()``, up to the server's readiness for a `COPY`'s
/// rows; after ``terminateAfterCompletion()``, up to a statement's completion, then a session
/// ended by the server). The data and the end of the stream reach the store's event loop
/// together: the loop is held while both are written. After
/// ``loseNextAnswer(thenRefuse:refusingFor:)`` it closes the connection instead of passing the
/// next answer on; after ``dropNextRequest()``, on the store's next message, which never reaches
/// the server.
final class CuttingProxy: Sendable {
    /// The directory of the proxy's socket, for a store URL's `host`.
    let directory: String
    private let upstream: String
    private let listener: Int32
    /// The type of the message after which the answer is cut; 0 when not armed.
    private let armed = Atomic<UInt8>(0)
    private let losing = Atomic<Bool>(false)
    private let refuseAfterLoss = Atomic<Bool>(false)
    private let refusalAfterLoss = Atomic<UInt64>(0)
    /// Until when (`DispatchTime` uptime, in nanoseconds) connections are closed as they come.
    private let refusingUntil = Atomic<UInt64>(0)
    private let dropping = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    /// How many answers were cut.
    let cuts = Atomic<Int>(0)

    /// A proxy to the server whose socket is `port`'s in `upstreamDirectory`.
    init(upstreamDirectory: String, port: String) throws {
        directory = NSTemporaryDirectory() + "bsproxy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        upstream = upstreamDirectory + "/.s.PGSQL." + port
        listener = try Self.listen(at: directory + "/.s.PGSQL." + port)
        let proxy = self
        Thread.detachNewThread { proxy.accept() }
    }

    /// Cuts the next answer with a row that a connection through the proxy receives; the
    /// connection must be idle (its next message from the server starts an answer).
    func cutNextAnswer() { armed.store(UInt8(ascii: "D"), ordering: .sequentiallyConsistent) }

    /// Cuts the next answer to a `COPY … FROM STDIN` once the server is ready for its rows (a
    /// `G` message): the store's writer starts on a connection that has closed. Messages before
    /// it go on as they come.
    func cutAtCopy() { armed.store(UInt8(ascii: "G"), ordering: .sequentiallyConsistent) }

    /// Ends the session right after the server completed the next statement (its `C` message),
    /// as `pg_terminate_backend` does when it comes before the server is ready for the next one:
    /// the server's `FATAL` error 57P01 goes in place of that readiness and the rest.
    func terminateAfterCompletion() { armed.store(UInt8(ascii: "C"), ordering: .sequentiallyConsistent) }

    /// The server's error message for a session it ends on an administrator's command.
    private static let terminated: [UInt8] = {
        let fields: [(UInt8, String)] = [
            (UInt8(ascii: "S"), "FATAL"), (UInt8(ascii: "V"), "FATAL"), (UInt8(ascii: "C"), "57P01"),
            (UInt8(ascii: "M"), "terminating connection due to administrator command"),
        ]
        let body: [UInt8] = fields.flatMap { field, text -> [UInt8] in [field] + Array(text.utf8) + [0] } + [0]
        let length = UInt32(body.count + 4)
        return [UInt8(ascii: "E")] + withUnsafeBytes(of: length.bigEndian) { Array($0) } + body
    }()

    /// Closes the connection that receives the next answer instead of passing it on, as the
    /// server's end lost at once after it answered; with `thenRefuse`, the proxy then takes no
    /// more connections, as a server gone silent; with `refusingFor`, it closes each connection
    /// it takes for that many seconds, as a server restarting.
    func loseNextAnswer(thenRefuse: Bool = false, refusingFor seconds: Double = 0) {
        refuseAfterLoss.store(thenRefuse, ordering: .sequentiallyConsistent)
        refusalAfterLoss.store(UInt64(seconds * 1e9), ordering: .sequentiallyConsistent)
        losing.store(true, ordering: .sequentiallyConsistent)
    }

    /// Closes the connection that sends the next message, which the server never receives.
    func dropNextRequest() { dropping.store(true, ordering: .sequentiallyConsistent) }

    /// Stops accepting connections (those open go on until they end); once, however often
    /// called.
    func close() {
        guard !closed.exchange(true, ordering: .sequentiallyConsistent) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func listen(at path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard withAddress(path, { bind(fd, $0, $1) }) == 0, Glibc.listen(fd, 16) == 0 else {
            throw POSIXError(.init(rawValue: errno) ?? .EIO)
        }
        return fd
    }

    private func connectUpstream() -> Int32? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard Self.withAddress(upstream, { connect(fd, $0, $1) }) == 0 else {
            Glibc.close(fd)
            return nil
        }
        return fd
    }

    /// Calls `body` with the address of the Unix socket at `path` and its size.
    private static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { bytes in
            path.utf8CString.withUnsafeBytes { bytes.copyMemory(from: $0) }
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    private func accept() {
        while true {
            let client = Glibc.accept(listener, nil, nil)
            guard client >= 0 else { return }
            guard DispatchTime.now().uptimeNanoseconds >= refusingUntil.load(ordering: .sequentiallyConsistent) else {
                Glibc.close(client)
                continue
            }
            guard let server = connectUpstream() else {
                Glibc.close(client)
                continue
            }
            let (proxy, pair) = (self, SocketPair(client: client, server: server))
            Thread.detachNewThread { proxy.pumpRequests(pair) }
            Thread.detachNewThread { proxy.pumpAnswers(pair) }
        }
    }

    /// A connection through the proxy: both sockets are closed once both directions ended
    /// (before that, a direction ends the other by `shutdown`, so that no descriptor is closed
    /// while a thread may still use its number).
    private final class SocketPair: Sendable {
        let client: Int32
        let server: Int32
        private let ended = Atomic<Int>(0)

        init(client: Int32, server: Int32) {
            (self.client, self.server) = (client, server)
        }

        func end() {
            guard ended.add(1, ordering: .sequentiallyConsistent).newValue == 2 else { return }
            Glibc.close(client)
            Glibc.close(server)
        }
    }

    /// Copies the store's bytes to the server until either side ends.
    private func pumpRequests(_ pair: SocketPair) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(pair.client, &buffer, buffer.count)
            guard count > 0,
                !dropping.compareExchange(expected: true, desired: false, ordering: .sequentiallyConsistent).exchanged,
                Self.writeAll(pair.server, buffer[0..<count])
            else { break }
        }
        shutdown(pair.client, Int32(SHUT_RDWR))
        shutdown(pair.server, Int32(SHUT_RDWR))
        pair.end()
    }

    /// Copies the server's bytes to the store; once armed, reads whole messages and cuts the
    /// answer after the first message of the armed type (a row, or a `COPY`'s readiness).
    private func pumpAnswers(_ pair: SocketPair) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending: [UInt8] = []
        while true {
            let count = read(pair.server, &buffer, buffer.count)
            guard count > 0 else { break }
            if losing.compareExchange(expected: true, desired: false, ordering: .sequentiallyConsistent).exchanged {
                if refuseAfterLoss.load(ordering: .sequentiallyConsistent) { close() }
                let refusal = refusalAfterLoss.load(ordering: .sequentiallyConsistent)
                if refusal > 0 {
                    refusingUntil.store(
                        DispatchTime.now().uptimeNanoseconds + refusal, ordering: .sequentiallyConsistent)
                }
                cuts.add(1, ordering: .sequentiallyConsistent)
                break
            }
            let target = armed.load(ordering: .sequentiallyConsistent)
            guard target != 0 || !pending.isEmpty else {
                guard Self.writeAll(pair.client, buffer[0..<count]) else { break }
                continue
            }
            pending += buffer[0..<count]
            let (whole, found) = Self.messages(in: pending, upTo: target)
            guard let end = found else {
                // A `COPY` may wait for the answers before it: they go on.
                if target == UInt8(ascii: "G"), whole > 0 {
                    guard Self.writeAll(pair.client, pending[0..<whole]) else { break }
                    pending.removeFirst(whole)
                }
                continue
            }
            armed.store(0, ordering: .sequentiallyConsistent)
            // The store's loop is held while the row and the end of the stream are written, so
            // that it finds both at its next look.
            let (held, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
            PostgresEventLoops.group.next().execute {
                held.signal()
                release.wait()
            }
            held.wait()
            _ = Self.writeAll(pair.client, pending[0..<end] + (target == UInt8(ascii: "C") ? Self.terminated : []))
            shutdown(pair.client, Int32(SHUT_RDWR))
            cuts.add(1, ordering: .sequentiallyConsistent)
            release.signal()
            break
        }
        shutdown(pair.client, Int32(SHUT_RDWR))
        shutdown(pair.server, Int32(SHUT_RDWR))
        pair.end()
    }

    /// In `bytes`, which hold whole messages from the first byte on (each a type byte and a
    /// length that counts itself): the end of the first message of type `type`, `found`, `nil`
    /// until it is there; and the end of the whole messages before it.
    private static func messages(in bytes: [UInt8], upTo type: UInt8) -> (whole: Int, found: Int?) {
        var index = 0
        while index + 5 <= bytes.count {
            let length = bytes[(index + 1)..<(index + 5)].reduce(0) { $0 << 8 | Int($1) }
            let end = index + 1 + length
            guard end <= bytes.count else { break }
            if bytes[index] == type { return (index, end) }
            index = end
        }
        return (index, nil)
    }

    private static func writeAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Bool {
        var rest = bytes
        while !rest.isEmpty {
            let written = rest.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written > 0 else { return false }
            rest = rest.dropFirst(written)
        }
        return true
    }
}
