import BugSquasherTesting
import BugSquasherTransport
import Foundation
import Testing

/// A listening Unix socket that is not squasherd: it either never accepts (the kernel completes
/// the connection anyway, and nothing ever answers), or answers every call with fixed bytes.
private final class ImpostorPeer: Sendable {
    let path: String
    private let listener: CInt

    init(path: String, answer: [UInt8]?) throws {
        self.path = path
        let fd = unixSocket(CInt(SOCK_STREAM.rawValue))
        listener = fd
        guard try withUnixAddress(path, { bind(fd, $0, $1) }) == 0, listen(fd, 16) == 0 else {
            throw HarnessError("could not listen on \(path): \(String(cString: strerror(errno)))")
        }
        guard let answer else { return }
        let listener = self.listener
        Thread.detachNewThread {
            // Ends when the listener is shut down (accept fails).
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
                // A thread per connection: the next client is answered while this one is held.
                Thread.detachNewThread {
                    var byte: UInt8 = 1
                    while byte != 0, recv(connection, &byte, 1, 0) == 1 {}
                    _ = answer.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) }
                    // Kept open: the client must not rely on the peer closing.
                    Thread.sleep(forTimeInterval: 30)
                    close(connection)
                }
            }
        }
    }

    deinit {
        shutdown(listener, CInt(SHUT_RDWR))
        close(listener)
        unlink(path)
    }
}

@Suite("squasherctl against a socket that is not squasherd")
struct ImpostorPeerTests {
    private func ctl(_ arguments: [String]) async throws -> (status: Int32, errors: String) {
        let process = try ChildProcess(
            name: "squasherctl \(arguments[0])", executable: Products.squasherctl, arguments: arguments)
        let status = try await process.waitForExit(timeout: .seconds(60))
        return (status, process.errorOutput)
    }

    /// A peer that never answers is given up on after --timeout; garbage, or a reply of another shape, is
    /// named as not squasherd's; no raw decoding error is shown.
    @Test("squasherctl exits 4 on a peer that is not squasherd, naming the problem")
    func impostors() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "impostor-\(UUID().uuidString.prefix(8))"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }

        let silent = try ImpostorPeer(path: directory + "/silent.sock", answer: nil)
        for command in [["status"], ["list"], ["get", "X-1"], ["jobs"], ["watch"], ["subscribe", "X-1"]] {
            let (status, errors) = try await ctl(command + ["--socket", silent.path, "--timeout", "0.5"])
            #expect(status == 4, "\(command): \(errors)")
            #expect(errors.contains("No answer from \(silent.path) within 0.5 s"), "\(command): \(errors)")
        }

        let garbage = try ImpostorPeer(
            path: directory + "/garbage.sock", answer: Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8) + [0])
        let (garbageStatus, garbageErrors) = try await ctl(["status", "--socket", garbage.path, "--timeout", "5"])
        #expect(garbageStatus == 4, "\(garbageErrors)")
        #expect(
            garbageErrors.contains("is not a Varlink reply") && garbageErrors.contains("HTTP/1.1 400"),
            "\(garbageErrors)")
        // The feed's first answer too: not called a connection closed at the connection limit.
        let (watchStatus, watchErrors) = try await ctl(["watch", "--socket", garbage.path, "--timeout", "5"])
        #expect(watchStatus == 4, "\(watchErrors)")
        #expect(
            watchErrors.contains("is not a Varlink reply") && !watchErrors.contains("connection limit"),
            "\(watchErrors)")

        let other = try ImpostorPeer(
            path: directory + "/other.sock", answer: Array(#"{"parameters":{"subscribers":"many"}}"#.utf8) + [0])
        let (otherStatus, otherErrors) = try await ctl(["status", "--socket", other.path, "--timeout", "5"])
        #expect(otherStatus == 4, "\(otherErrors)")
        #expect(otherErrors.contains("has parameters this program cannot read ('"), "\(otherErrors)")
        #expect(!otherErrors.contains("DecodingError"), "\(otherErrors)")

        // A peer that answers every call with empty parameters: no bug, no rows and a count of
        // 0 were printed for it, with exit status 3 or 0.
        let empty = try ImpostorPeer(path: directory + "/empty.sock", answer: Array(#"{"parameters":{}}"#.utf8) + [0])
        for command in [["get", "X-1"], ["list"], ["list", "--count"], ["update", "X-1", "status=Open"]] {
            let (status, errors) = try await ctl(command + ["--socket", empty.path, "--timeout", "5"])
            #expect(status == 4, "\(command): \(errors)")
            #expect(
                errors.contains("which squasherd always sends: another program may be listening there"),
                "\(command): \(errors)")
        }

        let unknowing = try ImpostorPeer(
            path: directory + "/unknowing.sock",
            answer: Array(
                #"{"error":"org.varlink.service.MethodNotFound","parameters":{"method":"io.bugsquasher.Store.Fetch"}}"#
                    .utf8) + [0])
        let (unknowingStatus, unknowingErrors) = try await ctl(["list", "--socket", unknowing.path, "--timeout", "5"])
        #expect(unknowingStatus == 4, "\(unknowingErrors)")
        #expect(
            unknowingErrors.contains("does not know io.bugsquasher.Store.Fetch")
                && unknowingErrors.contains("it is not squasherd"), "\(unknowingErrors)")

        // A reply that does not end: read up to 64 MiB, not for as long as the peer sends.
        let endless = try ImpostorPeer(
            path: directory + "/endless.sock", answer: [UInt8](repeating: UInt8(ascii: "x"), count: 80 << 20))
        let (endlessStatus, endlessErrors) = try await ctl(["status", "--socket", endless.path, "--timeout", "20"])
        #expect(endlessStatus == 4, "\(endlessErrors)")
        #expect(endlessErrors.contains("grew past 64 MiB without ending"), "\(endlessErrors)")

        for bad in ["-1", "1e300", "nan"] {
            let (badStatus, badErrors) = try await ctl(["status", "--socket", silent.path, "--timeout", bad])
            #expect(badStatus == 64 && badErrors.contains("--timeout"), "\(bad): \(badErrors)")
        }
    }
}
