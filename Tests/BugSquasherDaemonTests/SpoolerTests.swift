@testable import BugSquasherDaemon
import CompressNIO
import Foundation
import NIOCore
import Testing

@Suite("Upload spooler")
struct SpoolerTests {
    @Test("a gzip upload that arrives one byte at a time is recognized and inflated; a one-byte upload is read as it is")
    func gzipOneByteAtATime() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-spool-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let records = (1...20).map { #"{"key":"SP-\#($0)","title":"spooled \#($0)","status":"Open"}"# }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var plain = ByteBuffer(string: records.joined(separator: "\n") + "\n")
        let compressed = Array(try plain.compress(with: .gzip()).readableBytesView)
        #expect(compressed.starts(with: [0x1F, 0x8B]))

        let spooler = try Spooler(jobID: "gz", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        for byte in compressed { try await spooler.append([byte]) }
        let (format, _) = try await spooler.finish()
        #expect(format == .bugsquasherNDJSON)
        let spooled = try String(contentsOfFile: await spooler.path, encoding: .utf8)
        #expect(spooled.split(separator: "\n").count == records.count, "\(spooled.prefix(200))")

        // The one byte held back is still read: an unfinished JSON array, not an empty upload.
        let single = try Spooler(jobID: "one", directory: directory, format: nil, maximumRecordBytes: 1 << 20)
        try await single.append(Array("[".utf8))
        let error = await #expect(throws: DaemonError.self) { _ = try await single.finish() }
        #expect(error?.message.contains("empty") == false, "\(String(describing: error))")
    }
}
