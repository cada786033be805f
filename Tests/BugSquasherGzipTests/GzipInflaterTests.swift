import BugSquasherGzip
import CompressNIO
import NIOCore
import Testing

/// ISA-L's inflater as the spooler drives it: fed in pieces, into a small window.
@Suite("Gzip inflater")
struct GzipInflaterTests {
    /// `text` gzipped by zlib (through CompressNIO), as `gzip` writes it.
    func gzipped(_ text: String) throws -> [UInt8] {
        var plain = ByteBuffer(string: text)
        return Array(try plain.compress(with: .gzip()).readableBytesView)
    }

    /// Inflates `data` fed `piece` bytes at a time into a `window`-byte output; returns what it
    /// inflated to, whether the member ended, and the input bytes it did not take.
    func inflate(_ data: [UInt8], piece: Int, window: Int) throws -> (
        output: [UInt8], ended: Bool, left: Int
    ) {
        let inflater = GzipInflater()
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: window)
        var offset = 0
        var ended = false
        while !ended {
            let end = min(data.count, offset + piece)
            var step: GzipInflater.Step
            repeat {
                step = try data[offset..<end].withUnsafeBytes { input in
                    try buffer.withUnsafeMutableBytes { try inflater.inflate(input, into: $0) }
                }
                offset += step.consumed
                output += buffer.prefix(step.produced)
                ended = step.memberEnded
            } while !ended && (offset < end || step.produced == window)
            if offset == data.count, !ended { break }
        }
        return (output, ended, data.count - offset)
    }

    @Test("a member fed a byte at a time into a small window inflates whole, and ends")
    func byteAtATime() throws {
        let text = String(repeating: "The app crashes when the keyboard opens during rotation. ", count: 2_000)
        let data = try gzipped(text)
        for (piece, window) in [(1, 100), (7, 4_096), (data.count, 1 << 20)] {
            let result = try inflate(data, piece: piece, window: window)
            #expect(result.output == Array(text.utf8), "piece \(piece), window \(window)")
            #expect(result.ended && result.left == 0)
        }
    }

    @Test("the bytes after a member's trailer are left to the caller")
    func stopsAtTheMembersEnd() throws {
        let data = try gzipped("first member\n") + (try gzipped("second member\n"))
        let result = try inflate(data, piece: data.count, window: 1 << 16)
        #expect(result.output == Array("first member\n".utf8))
        #expect(result.ended)
        #expect(result.left == (try gzipped("second member\n")).count)
    }

    @Test("a member cut short never ends; a wrong CRC or size, or deflate garbage, is an error")
    func corruption() throws {
        let data = try gzipped(String(repeating: "line of a bug report\n", count: 500))
        let cut = try inflate(Array(data.dropLast(5)), piece: 64, window: 4_096)
        #expect(!cut.ended)
        var wrongCRC = data
        wrongCRC[data.count - 8] ^= 0xFF
        #expect(throws: GzipError.self) { try inflate(wrongCRC, piece: 64, window: 4_096) }
        var wrongSize = data
        wrongSize[data.count - 4] ^= 0x01
        #expect(throws: GzipError.self) { try inflate(wrongSize, piece: 64, window: 4_096) }
        var garbage = data
        for index in 12..<40 { garbage[index] = 0xFF }
        #expect(throws: GzipError.self) { try inflate(garbage, piece: 64, window: 4_096) }
    }
}
