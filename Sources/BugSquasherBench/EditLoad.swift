import Foundation
import Glibc
import Synchronization

/// Concurrent edits as fast as squasherd answers them, for the benchmark's section h: one
/// thread per bug, each on its own connection to a write socket (spread over the sockets given),
/// sending `io.bugsquasher.Import.Update` of the bug's status and waiting for each reply before
/// the next. A native client with blocking sockets, as pgbench is on the other side of the
/// comparison, so that the figure measures the daemons and the server rather than the client.
struct EditLoad {
    /// The daemons' write sockets.
    let sockets: [String]
    /// The bugs edited, one writer each, by object ID URI.
    let ids: [String]
    /// How long the writers run.
    let seconds: Double

    /// What went wrong for one writer.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs the writers; returns the edits answered and the seconds they took.
    func run() throws -> (edits: Int, seconds: Double) {
        let counts = Mutex([Int](repeating: 0, count: ids.count))
        let failures = Mutex<[String]>([])
        let stop = Atomic<Bool>(false)
        let ready = DispatchGroup()
        let start = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for (index, id) in ids.enumerated() {
            ready.enter()
            done.enter()
            let path = sockets[index % sockets.count]
            Thread.detachNewThread {
                defer { done.leave() }
                let fd: Int32
                do { fd = try Self.connect(path) } catch {
                    failures.withLock { $0.append("writer \(index): \(error)") }
                    ready.leave()
                    return
                }
                defer { close(fd) }
                ready.leave()
                start.wait()
                var edits = 0
                var buffer = [UInt8](repeating: 0, count: 1 << 16)
                do {
                    while !stop.load(ordering: .relaxed) {
                        let call =
                            #"{"method":"io.bugsquasher.Import.Update","parameters":{"id":"\#(id)","values":{"status":"w\#(edits)"}}}"#
                        try Self.send(Array(call.utf8) + [0], on: fd)
                        let reply = try Self.receive(on: fd, into: &buffer)
                        if reply.contains("\"error\"") { throw Failure(description: "error reply: \(reply)") }
                        edits += 1
                    }
                } catch {
                    failures.withLock { $0.append("writer \(index): \(error)") }
                }
                counts.withLock { $0[index] = edits }
            }
        }
        ready.wait()
        let started = ContinuousClock.now
        for _ in ids { start.signal() }
        Thread.sleep(forTimeInterval: seconds)
        stop.store(true, ordering: .relaxed)
        done.wait()
        let elapsed = (ContinuousClock.now - started) / .seconds(1)
        if let first = failures.withLock({ $0.first }) { throw Failure(description: first) }
        return (counts.withLock { $0.reduce(0, +) }, elapsed)
    }

    private static func connect(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw Failure(description: "socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "connect \(path): \(message)")
        }
        return fd
    }

    private static func send(_ bytes: [UInt8], on fd: Int32) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, 0) }
            guard n > 0 else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    /// The next reply, up to its NUL (one reply at a time: nothing follows it).
    private static func receive(on fd: Int32, into buffer: inout [UInt8]) throws -> String {
        var length = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + length, $0.count - length, 0) }
            guard n > 0 else {
                throw Failure(
                    description: n == 0 ? "squasherd closed the connection" : String(cString: strerror(errno)))
            }
            length += n
            if buffer[length - 1] == 0 { return String(decoding: buffer[..<(length - 1)], as: UTF8.self) }
            guard length < buffer.count else { throw Failure(description: "a reply longer than \(buffer.count) bytes") }
        }
    }
}
