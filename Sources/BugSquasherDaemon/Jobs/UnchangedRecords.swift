import Algorithms
import BugSquasherGraph
import BugSquasherImport

/// Finds the lines of a chunk that are the very bytes their bug was last imported from, by
/// their ``SourceDigest`` against the one kept on the bug: those are not decoded or upserted.
/// Only Jira JSON and BugSquasher NDJSON lines have digests (a CSV row means nothing without its
/// header and mapping). Why and when a line is skipped: docs/DESIGN-NOTES.md, "Unchanged records
/// are skipped".
struct UnchangedRecords: Sendable {
    /// What the digests of one chunk's lines found.
    struct Found {
        /// Each line's key and digest, where it has them.
        var lines: [(key: String, digest: Int64)?]
        /// The positions of the lines to skip.
        var unchanged: Set<Int>
        /// The keys looked up that the store has no bug for.
        var absent: Set<StoredText> = []
    }

    let seed: UInt64
    let coordinator: StoreCoordinator

    /// Skips the unchanged lines of `format`'s jobs; `nil` for a format without digests.
    init?(format: ImportFormat, coordinator: StoreCoordinator) {
        guard format.spoolLines != .envelope else { return nil }
        seed = SourceDigest.seed([format.rawValue, "1"])
        self.coordinator = coordinator
    }

    /// The key and digest of each line, where it has them: what ``find(in:excluding:)`` takes.
    func sources(of lines: some Sequence<OffsetLineReader.Line>, format: ImportFormat) -> [(
        key: String, digest: Int64
    )?] {
        var sources: [(key: String, digest: Int64)?] = []
        sources.reserveCapacity(lines.underestimatedCount)
        for line in lines {
            sources.append(
                line.bytes.withUnsafeBufferPointer { bytes -> (key: String, digest: Int64)? in
                    // An element of a JSON array is spooled with its position: decoded as it is.
                    guard format.spoolLines != .jira || ((try? SpooledElement(bytes)) ?? nil) == nil,
                        let key = SourceDigest.key(ofJSONObject: bytes)
                    else { return nil }
                    return (key, SourceDigest.of(bytes, seed: seed))
                })
        }
        return sources
    }

    /// Which of the lines whose ``sources(of:format:)`` are `sources` are unchanged. A key met
    /// twice in the chunk, or written by a chunk before that may not have committed yet
    /// (`excluding`), is decoded whatever its digest: the last record of a key must win.
    func find(in sources: [(key: String, digest: Int64)?], excluding recent: [Set<String>]) throws -> Found {
        var found = Found(lines: sources, unchanged: [])
        var counts: [String: Int] = [:]
        for source in sources {
            if let source { counts[source.key, default: 0] += 1 }
        }
        var candidates = Set(counts.compactMap { $0.value == 1 ? $0.key : nil })
        for keys in recent { candidates.subtract(keys) }
        guard !candidates.isEmpty else { return found }
        let stored = try storedDigests(of: Array(candidates))
        for (index, source) in found.lines.enumerated() {
            if let source, candidates.contains(source.key), stored.digests[source.key] == source.digest {
                found.unchanged.insert(index)
            }
        }
        found.absent = Set(candidates.lazy.map(StoredText.init)).subtracting(stored.present)
        return found
    }

    /// The digests kept on the bugs with these keys, and the keys that have a bug, read as rows
    /// (no objects), 500 keys a fetch.
    private func storedDigests(of keys: [String]) throws -> (digests: [String: Int64], present: Set<StoredText>) {
        guard let entity = coordinator.model.entity(named: "Bug"), let keyIndex = entity.attributeIndex["key"],
            let digestIndex = entity.attributeIndex["sourceDigest"]
        else { return ([:], Set(keys.map(StoredText.init))) }
        var result: [String: Int64] = [:]
        var present = Set<StoredText>()
        result.reserveCapacity(keys.count)
        for batch in keys.chunks(ofCount: BugUpserter.inListLimit) {
            let request = FetchDescription(
                entityName: "Bug", predicate: Key("key").in(batch.map { Value.string($0) }), resultType: .rows,
                attributesToFetch: ["key", "sourceDigest"])
            guard case .rows(let rows) = try coordinator.fetch(request) else { continue }
            for row in rows {
                guard case .string(let key) = row.snapshot.attributes[keyIndex] else { continue }
                present.insert(StoredText(key))
                if case .int64(let digest) = row.snapshot.attributes[digestIndex] { result[key] = digest }
            }
        }
        return (result, present)
    }
}
