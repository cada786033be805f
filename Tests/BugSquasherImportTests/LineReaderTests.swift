import BugSquasherImport
import Foundation
import Testing

@Suite struct LineReaderTests {
    /// Writes `text` to a new temporary file and returns its path.
    private func temporaryFile(_ bytes: [UInt8]) throws -> String {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("linereader-\(UUID().uuidString).txt").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func streamsMoreThanOneChunkAndCountsEmptyLines() throws {
        // About 300 KiB: every 50th line empty, every 7th line ending in CRLF, the last line
        // without terminator.
        var text = ""
        var expected: [(Int, String)] = []
        let lineCount = 6_000
        for number in 1...lineCount {
            if number % 50 == 0 {
                text += number % 100 == 0 ? "\r\n" : "\n"
                continue
            }
            let line = "line \(number) " + String(repeating: "x", count: number % 80)
            expected.append((number, line))
            text += line
            if number < lineCount { text += number % 7 == 0 ? "\r\n" : "\n" }
        }
        let bytes = Array(text.utf8)
        #expect(bytes.count > 4 * LineReader.chunkSize)
        let path = try temporaryFile(bytes)
        defer { try? FileManager.default.removeItem(atPath: path) }

        let reader = try LineReader(path: path)
        let lines = reader.map { ($0.lineNumber, String(decoding: $0.bytes, as: UTF8.self)) }
        #expect(reader.error == nil)
        #expect(lines.count == expected.count)
        #expect(lines.map(\.0) == expected.map(\.0))
        #expect(lines.map(\.1) == expected.map(\.1))
    }

    @Test func readsLinesLongerThanAChunk() throws {
        let long = [UInt8](repeating: UInt8(ascii: "a"), count: 3 * LineReader.chunkSize + 17)
        let path = try temporaryFile(Array("first\n".utf8) + long + Array("\n\nlast\n".utf8))
        defer { try? FileManager.default.removeItem(atPath: path) }

        let lines = try Array(LineReader(path: path))
        #expect(lines.map(\.lineNumber) == [1, 2, 4])
        #expect(lines.map(\.bytes.count) == [5, long.count, 4])
        #expect(lines.last.map { String(decoding: $0.bytes, as: UTF8.self) } == "last")
    }

    @Test func readsEmptyAndBlankFiles() throws {
        for content in ["", "\n", "\n\r\n\n"] {
            let path = try temporaryFile(Array(content.utf8))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let lines = try Array(LineReader(path: path))
            #expect(lines.isEmpty, "\(content.debugDescription)")
        }
    }

    @Test func refusesAMissingFile() {
        let error = #expect(throws: ImportError.self) {
            _ = try LineReader(path: "/nonexistent/\(UUID().uuidString).ndjson")
        }
        #expect(error?.code == .io)
    }
}
