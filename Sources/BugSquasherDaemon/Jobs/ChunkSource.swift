import BugSquasherGraph
import BugSquasherImport
import Foundation
import Synchronization

/// Decodes the chunks after the one being imported, up to `depth` of them, on the import
/// threads, without blocking a thread while one waits for another: each chunk's lines are read
/// once the chunk before has read its own, their digests computed at once, and the chunk is
/// classified and decoded once the chunk before is decoded (see ``ChunkSource``).
///
/// Why: docs/DESIGN-NOTES.md, "Chunks are decoded ahead".
struct ChunkReadAhead {
    private var pending: [Task<ImportRunner.Chunk, any Error>] = []
    private var lastRead: Task<ChunkSource.Lines, any Error>?
    private let source: ChunkSource
    private let executor: any TaskExecutor

    /// Starts decoding the next `depth` chunks of `source` on `executor`.
    init(source: ChunkSource, depth: Int, executor: any TaskExecutor) {
        self.source = source
        self.executor = executor
        for _ in 0..<max(1, depth) { decodeOneMore() }
    }

    /// The next chunk (without entries at the end of the input), once decoded; decoding of the
    /// one after the last pending chunk starts.
    mutating func next() async throws -> ImportRunner.Chunk {
        let first = pending.removeFirst()
        decodeOneMore()
        return try await first.value
    }

    /// Stops decoding: the pending chunks that have not started are not decoded.
    func cancel() {
        lastRead?.cancel()
        for task in pending { task.cancel() }
    }

    private mutating func decodeOneMore() {
        let (readBefore, decodedBefore, source) = (lastRead, pending.last, source)
        // The chunk before reads its lines first; its failure ends the chunks after it too.
        let read = Task(executorPreference: executor) {
            _ = try await readBefore?.value
            try Task.checkCancellation()
            return try source.readLines()
        }
        lastRead = read
        pending.append(
            Task(executorPreference: executor) {
                var lines = try await read.value
                // Beside the decoding of the chunk before.
                source.digest(&lines)
                _ = try await decodedBefore?.value
                try Task.checkCancellation()
                return try source.decode(lines)
            })
    }
}

/// The spooled input of one job, read and decoded a chunk at a time, in three steps that
/// ``ChunkReadAhead`` overlaps across chunks: ``readLines()`` (one chunk after another),
/// ``digest(_:)`` (any time), ``decode(_:)`` (one chunk after another, in the order read: each
/// chunk's digests exclude the keys of the chunks decoded before it). The reader and those keys
/// live behind mutexes, so that chunks are read and decoded ahead while the current one commits.
final class ChunkSource: Sendable {
    /// A chunk whose lines are read, not yet decoded.
    struct Lines: Sendable {
        var chunk = ImportRunner.Chunk()
        /// The lines holding records, with the position of their entry.
        var lines: [(entry: Int, line: OffsetLineReader.Line)] = []
        /// Each line's key and digest, once ``ChunkSource/digest(_:)`` ran (jobs of formats
        /// with digests only).
        var sources: [(key: String, digest: Int64)?]?
    }

    private let reader: Mutex<OffsetLineReader>
    /// The keys the `uncommitted` chunks decoded last write, newest first.
    private let recent = Mutex<[Set<String>]>([])
    private let format: ImportFormat
    private let size: Int
    private let maximumRecordBytes: Int
    private let editsFirst: EditsFirst?
    private let unchanged: UnchangedRecords?
    private let uncommitted: Int

    /// A source reading `reader`. `uncommitted` is how many chunks read before the one being
    /// read may not have committed yet: the keys they write are never taken as unchanged or
    /// absent (see ``UnchangedRecords``).
    init(
        reader: consuming sending OffsetLineReader, format: ImportFormat, size: Int, maximumRecordBytes: Int,
        editsFirst: EditsFirst? = nil, unchanged: UnchangedRecords? = nil, uncommitted: Int = 2
    ) {
        self.reader = Mutex(reader)
        self.format = format
        self.size = size
        self.maximumRecordBytes = maximumRecordBytes
        self.editsFirst = editsFirst
        self.unchanged = unchanged
        self.uncommitted = uncommitted
    }

    /// The next chunk, read, digested and decoded; without entries at the end of the input.
    func next() throws -> ImportRunner.Chunk {
        var lines = try readLines()
        digest(&lines)
        return try decode(lines)
    }

    /// The input bytes past which a chunk ends before it has `size` records. An object graph
    /// of records takes about ten times their bytes, two chunks have one at once (upserting and
    /// saving), and ``ImportRunner/readAhead`` more are decoded: a thousand records of a
    /// megabyte each (many comments) would take tens of gigabytes, where this bounds an import
    /// at a few hundred megabytes. Typical records (1 KB) never reach it.
    static let maximumChunkBytes = 8 << 20

    /// Reads the next chunk's lines: up to `size` records (non-empty lines), or records of up to
    /// about ``maximumChunkBytes``; an oversized line becomes a reject. Before each line it gives
    /// way to interactive saves (see ``EditsFirst``).
    func readLines() throws -> Lines {
        try reader.withLock { reader in
            try Self.readLines(
                reader, size: size, maximumRecordBytes: maximumRecordBytes, editsFirst: editsFirst)
        }
    }

    /// Computes the key and digest of each line (see ``UnchangedRecords``), for formats that
    /// have them.
    func digest(_ lines: inout Lines) {
        lines.sources = unchanged?.sources(of: lines.lines.lazy.map(\.line), format: format)
    }

    /// Decodes each line of a chunk read by ``readLines()``; undecodable ones become rejects with
    /// their line and reason. Lines that are the very bytes their bug was last imported from are
    /// not decoded but marked unchanged (see ``UnchangedRecords``), unless a key of theirs is
    /// one that the `uncommitted` chunks decoded before write, which may not have committed yet.
    /// Chunks must be decoded in the order they were read.
    func decode(_ lines: Lines) throws -> ImportRunner.Chunk {
        try recent.withLock { recent in
            try Self.decode(
                lines, format: format, unchanged: unchanged, editsFirst: editsFirst, uncommitted: uncommitted,
                recent: &recent)
        }
    }

    private static func readLines(
        _ reader: OffsetLineReader, size: Int, maximumRecordBytes: Int, editsFirst: EditsFirst?
    ) throws -> Lines {
        var read = Lines()
        var chunk = ImportRunner.Chunk()
        var bytes = 0
        var lines: [(entry: Int, line: OffsetLineReader.Line)] = []
        lines.reserveCapacity(size)
        while chunk.entries.count < size, bytes < maximumChunkBytes, let line = try reader.next() {
            editsFirst?.yieldToInteractiveSaves()
            bytes += line.bytes.count
            if line.isOversized {
                chunk.entries.append(
                    ImportRunner.Entry(
                        line: line.number, spoolLine: line.number, endOffset: line.endOffset,
                        reject: Spooler.tooLong(maximumRecordBytes)))
                continue
            }
            if line.bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) {
                // Blank lines are not records, but the offset moves past them.
                if !chunk.entries.isEmpty {
                    chunk.entries[chunk.entries.count - 1].endOffset = line.endOffset
                    chunk.entries[chunk.entries.count - 1].spoolLine = line.number
                }
                continue
            }
            lines.append((chunk.entries.count, line))
            chunk.entries.append(
                ImportRunner.Entry(line: line.number, spoolLine: line.number, endOffset: line.endOffset))
        }
        read.chunk = chunk
        read.lines = lines
        return read
    }

    private static func decode(
        _ read: Lines, format: ImportFormat, unchanged: UnchangedRecords?, editsFirst: EditsFirst?, uncommitted: Int,
        recent: inout [Set<String>]
    ) throws -> ImportRunner.Chunk {
        var chunk = read.chunk
        let lines = read.lines
        chunk.records.reserveCapacity(lines.count)
        let decoder = JiraIssueDecoder()
        let sources = try read.sources.map { try unchanged?.find(in: $0, excluding: recent) } ?? nil
        var written = Set<String>()
        for (index, pending) in lines.enumerated() {
            if sources?.unchanged.contains(index) == true {
                chunk.entries[pending.entry].unchanged = true
                continue
            }
            editsFirst?.yieldToInteractiveSaves()
            if var record = decode(pending.line, format: format, decoder: decoder, into: &chunk.entries[pending.entry])
            {
                // The digest is kept only for the key it was read under.
                if let source = sources?.lines[index], source.key == record.key { record.sourceDigest = source.digest }
                written.insert(record.key)
                chunk.entries[pending.entry].record = chunk.records.count
                chunk.records.append(record)
            }
        }
        recent.insert(written, at: 0)
        if recent.count > uncommitted { recent.removeLast(recent.count - uncommitted) }
        chunk.reads = UpsertKeys(chunk.records)
        chunk.absentBugs = sources?.absent ?? []
        return chunk
    }

    /// Decodes and checks the record of a spooled line; one that cannot be decoded, or is
    /// invalid, gives `nil` and leaves its reason in `entry`.
    @inline(__always)
    private static func decode(
        _ line: OffsetLineReader.Line, format: ImportFormat, decoder: JiraIssueDecoder,
        into entry: inout ImportRunner.Entry
    ) -> BugRecord? {
        var record: BugRecord?
        // An element of a JSON array: its position, for the reject.
        var issue: Int?
        do {
            switch format.spoolLines {
            case .jira:
                record = try line.bytes.withUnsafeBufferPointer { bytes in
                    guard let element = try SpooledElement(bytes) else {
                        return try decoder.decode(bytes: bytes, line: line.number)
                    }
                    entry.line = element.line
                    issue = element.issue
                    switch element.content {
                    case .issue(let range):
                        return try decoder.decode(
                            bytes: UnsafeBufferPointer(rebasing: bytes[range]), line: element.line)
                    case .reject(let reason): throw ImportError(.invalidRecord, reason)
                    }
                }
            case .record:
                record = try line.bytes.withUnsafeBufferPointer { try BugRecord(json: $0) }
            case .envelope:
                let envelope = try line.bytes.withUnsafeBufferPointer { try SpoolEnvelope(json: $0) }
                entry.line = envelope._line
                record = envelope.record
                entry.reject = envelope._reject ?? (envelope.record == nil ? "empty record" : nil)
            }
            if let record { try BugUpserter.validate(record, at: entry.line) }
        } catch let error as ImportError {
            record = nil
            entry.reject = error.message
        } catch let error as DecodingError {
            record = nil
            entry.reject = "not a valid record: \(ImportRunner.describe(error))"
        } catch {
            record = nil
            entry.reject = "\(error)"
        }
        if let issue, let reject = entry.reject { entry.reject = "issue \(issue) of the array: \(reject)" }
        return record
    }
}
