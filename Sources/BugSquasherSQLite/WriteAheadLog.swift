import Foundation

/// Checks a store's write-ahead log before SQLite opens it, as SQLite will read it, for damage
/// that SQLite would pass over without a word.
///
/// SQLite applies a log's frames in order, up to the last commit frame of an unbroken chain of
/// checksums, and discards the rest: a damaged header discards the whole log, and a damaged
/// frame discards every commit after it. Both are refused here (see
/// https://www.sqlite.org/fileformat.html#the_write_ahead_log). A log that merely ends partway
/// through a frame is what a crash or power loss during a write leaves, and is reported for a
/// warning only.
enum WriteAheadLog {
    /// What the check found.
    enum Finding: Equatable {
        /// SQLite will apply every commit in the log.
        case sound
        /// The header is damaged: SQLite would ignore the whole log.
        case damagedHeader(String)
        /// A frame is damaged and commits follow it: SQLite would discard them.
        case damagedFrames(String)
        /// The log ends partway through a frame.
        case endsMidFrame(String)
    }

    /// The bytes of a log's header, and of a frame's header before its page.
    static let headerSize = 32
    static let frameHeaderSize = 24

    /// Reads the log at `path` (a log that cannot be read is left for SQLite to report).
    static func check(path: String) -> Finding {
        guard let handle = FileHandle(forReadingAtPath: path) else { return .sound }
        defer { try? handle.close() }
        guard let headerData = try? handle.read(upToCount: headerSize), headerData.count == headerSize else {
            return .damagedHeader("has a header cut short")
        }
        let header = [UInt8](headerData)
        let magic = word(header, 0)
        guard magic == 0x377F_0682 || magic == 0x377F_0683 else {
            return .damagedHeader("does not start with a write-ahead log's magic number (it is damaged)")
        }
        guard word(header, 4) == 3_007_000 else {
            return .damagedHeader("has an unknown format version (it is damaged)")
        }
        let pageSize = Int(word(header, 8))
        guard pageSize >= 512 && pageSize <= 65_536 && pageSize & (pageSize - 1) == 0 else {
            return .damagedHeader("has an impossible page size (it is damaged)")
        }
        var checksum = Checksum(bigEndian: magic & 1 == 1)
        checksum.add(header[0..<24])
        guard checksum.s1 == word(header, 24), checksum.s2 == word(header, 28) else {
            return .damagedHeader("has a header whose checksum does not match (it is damaged)")
        }
        return checkFrames(handle, checksum: checksum, salts: header[16..<24], pageSize: pageSize)
    }

    /// Reads the frames after the header as SQLite applies them, carrying on `checksum` (the
    /// header's): a damaged frame followed by a commit, or a log that ends partway through a
    /// frame, is reported.
    private static func checkFrames(
        _ handle: FileHandle, checksum headerChecksum: Checksum, salts: ArraySlice<UInt8>, pageSize: Int
    ) -> Finding {
        var checksum = headerChecksum
        let frameSize = frameHeaderSize + pageSize
        var frame = 0
        /// The first frame SQLite will not apply, once found.
        var firstInvalid: Int?
        var remainder = 0
        while true {
            guard let data = try? handle.read(upToCount: frameSize * 64), !data.isEmpty else { break }
            let bytes = [UInt8](data)
            var offset = 0
            while offset + frameSize <= bytes.count {
                let frameHeader = bytes[offset..<offset + frameHeaderSize]
                let current = frameHeader.dropFirst(8).prefix(8).elementsEqual(salts)
                if let firstInvalid {
                    // Frames of this log after an invalid one hold no commit, unless the log was
                    // damaged: a transaction SQLite rolled back, or a crash cut short, never
                    // wrote its commit frame.
                    if current && word(bytes, offset + 4) != 0 {
                        return .damagedFrames(
                            "is damaged at frame \(firstInvalid + 1) (byte \(headerSize + firstInvalid * frameSize)), and frame \(frame + 1) after it commits a transaction"
                        )
                    }
                } else {
                    var next = checksum
                    next.add(frameHeader.prefix(8))
                    next.add(bytes[offset + frameHeaderSize..<offset + frameSize])
                    if current && next.s1 == word(bytes, offset + 16) && next.s2 == word(bytes, offset + 20) {
                        checksum = next
                    } else {
                        firstInvalid = frame
                    }
                }
                frame += 1
                offset += frameSize
            }
            // Reads are whole frames until the end of the file: a short one is the last.
            if data.count < frameSize * 64 {
                remainder = bytes.count - offset
                break
            }
        }
        // SQLite writes a frame's header and then its page: a process killed between the two
        // leaves a header alone. Any other remainder is a file cut short by something else.
        if remainder != 0 && remainder != frameHeaderSize {
            return .endsMidFrame("ends partway through frame \(frame + 1) (\(remainder) of its \(frameSize) bytes)")
        }
        return .sound
    }

    /// The big-endian 32-bit word at `offset`.
    private static func word(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// SQLite's log checksum: Fibonacci-weighted sums of 32-bit words, in the byte order the
    /// magic number's low bit names, carried from the header through every frame.
    struct Checksum {
        let bigEndian: Bool
        var s1: UInt32 = 0
        var s2: UInt32 = 0

        init(bigEndian: Bool) { self.bigEndian = bigEndian }

        mutating func add(_ bytes: ArraySlice<UInt8>) {
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset + 8 <= raw.count {
                    var x0 = raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
                    var x1 = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    (x0, x1) =
                        bigEndian
                        ? (UInt32(bigEndian: x0), UInt32(bigEndian: x1))
                        : (UInt32(littleEndian: x0), UInt32(littleEndian: x1))
                    s1 = s1 &+ x0 &+ s2
                    s2 = s2 &+ x1 &+ s1
                    offset += 8
                }
            }
        }
    }
}
