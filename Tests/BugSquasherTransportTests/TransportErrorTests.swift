import Foundation
import Testing

@testable import BugSquasherTransport

/// The transport's errors: a code and the facts for the caller to word, and generic words of
/// their own that name no program.
@Suite("Transport errors")
struct TransportErrorTests {
    /// Runs `body` and returns the ``TransportError`` it threw.
    private func transportError(_ body: () throws -> Void) -> TransportError? {
        do {
            try body()
            return nil
        } catch {
            return error as? TransportError
        }
    }

    /// A missing socket, a file that is not one, and a path too long each have their code, path
    /// and system error.
    @Test("connecting fails with a code and the facts, in words that name no program")
    func connectFailures() throws {
        let directory = NSTemporaryDirectory() + "transport-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }

        let missing = transportError { _ = try BlockingVarlinkClient(path: directory + "/none.sock") }
        #expect(missing?.code == .notFound)
        #expect(missing?.path == directory + "/none.sock")
        #expect(missing?.systemError == ENOENT)
        #expect(missing?.statement == "Nothing is listening on \(directory)/none.sock (No such file or directory).")

        let file = directory + "/file"
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let notSocket = transportError { _ = try BlockingVarlinkClient(path: file) }
        #expect(notSocket?.code == .notASocket)
        #expect(notSocket?.statement == "\(file) is not a socket.")

        let long = "/tmp/" + String(repeating: "s", count: 200) + ".sock"
        let tooLong = transportError { _ = try BlockingVarlinkClient(path: long) }
        #expect(tooLong?.code == .pathTooLong)
        #expect(tooLong?.statement.contains("a Unix socket path holds at most 107") == true)

        for error in [missing, notSocket, tooLong].compactMap(\.self) {
            let words = error.message.replacingOccurrences(of: error.path ?? "", with: "")
            #expect(!words.lowercased().contains("squasher"), "\(error)")
            #expect("\(error)" == error.message)
        }
    }

    /// Where a server would bind: a directory is not replaced.
    @Test("a socket path a directory takes is refused with its code")
    func occupiedPath() throws {
        let directory = NSTemporaryDirectory() + "transport-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory + "/x.sock", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let occupied = transportError { try VarlinkServer.checkSocketPath(directory + "/x.sock") }
        #expect(occupied?.code == .pathOccupied)
        #expect(occupied?.statement.hasPrefix("\(directory)/x.sock is a directory") == true)
    }

    @Test("a time allowed is said in seconds")
    func seconds() {
        #expect(TransportError.seconds(.seconds(60)) == "60 s")
        #expect(TransportError.seconds(.milliseconds(500)) == "0.5 s")
        #expect(TransportError.seconds(nil) == "the time allowed")
        let silent = TransportError.noAnswer("/run/x.sock", within: .milliseconds(500))
        #expect(silent.code == .noAnswer && silent.timeout == .milliseconds(500))
        #expect(silent.statement.hasPrefix("No answer from /run/x.sock within 0.5 s"))
    }
}
