/// Primary keys this process took from `bs_sequence` ahead of its saves, by entity, as a
/// PostgreSQL sequence with `CACHE` keeps values for its session: most saves then take their
/// keys without a round trip to the server. Keys are unique across processes, and increase
/// within one; between processes they interleave by block. Keys left when the process ends, or
/// when the reserve is emptied, are never used.
/// Why it is built this way: docs/DESIGN-NOTES.md, "Primary keys are taken in blocks".
struct KeyReserve: Sendable {
    private var free: [String: Range<Int64>] = [:]

    /// How many keys to allocate for an entity when `count` are wanted and the reserve holds
    /// fewer: the `count`, and eight times as many again (at least 63, at most 65,535) for the
    /// saves after.
    static func allocation(for count: Int64) -> Int64 {
        count + min(max(count * 8, 63), 65_535)
    }

    /// The first of `count` consecutive keys of `entity`, taken from the reserve; `nil` when it
    /// holds fewer.
    mutating func take(_ count: Int64, of entity: String) -> Int64? {
        guard let range = free[entity], range.count >= count else { return nil }
        free[entity] = (range.lowerBound + count)..<range.upperBound
        return range.lowerBound
    }

    /// Keeps the keys in `range` of `entity` for later saves, in place of what was left.
    mutating func keep(_ range: Range<Int64>, of entity: String) {
        free[entity] = range
    }

    /// Gives up every key kept: the database they came from may have gone back (a new
    /// connection, a restore), so that other processes may be given them again.
    mutating func removeAll() {
        free.removeAll()
    }
}
