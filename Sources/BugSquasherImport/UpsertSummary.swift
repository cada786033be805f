/// What one ``BugUpserter/upsert(_:in:)`` call did to the bugs of its chunk.
///
/// Each distinct key counts once: ``inserted`` + ``updated`` + ``unchanged`` is the number of
/// distinct keys, and ``superseded`` counts the records dropped because a later record of the
/// same chunk had the same key. Summaries add up across chunks:
///
/// ```swift
/// var total = UpsertSummary()
/// total += try await context.perform { context in try upserter.upsert(chunk, in: context) }
/// print("\(total.inserted) new, \(total.updated) changed, \(total.unchanged) unchanged")
/// ```
public struct UpsertSummary: Sendable, Hashable, CustomStringConvertible {
    /// Bugs that did not exist and were inserted.
    public var inserted: Int
    /// Existing bugs that changed (a field, a relationship, or one of their comments).
    public var updated: Int
    /// Existing bugs the records left exactly as they were.
    public var unchanged: Int
    /// Records ignored because a later record in the same chunk had the same key.
    public var superseded: Int

    /// Creates a summary; all counts default to zero.
    public init(inserted: Int = 0, updated: Int = 0, unchanged: Int = 0, superseded: Int = 0) {
        self.inserted = inserted
        self.updated = updated
        self.unchanged = unchanged
        self.superseded = superseded
    }

    /// The number of distinct bugs the records named.
    public var total: Int { inserted + updated + unchanged }

    /// Adds two summaries, count by count.
    public static func + (lhs: UpsertSummary, rhs: UpsertSummary) -> UpsertSummary {
        UpsertSummary(
            inserted: lhs.inserted + rhs.inserted,
            updated: lhs.updated + rhs.updated,
            unchanged: lhs.unchanged + rhs.unchanged,
            superseded: lhs.superseded + rhs.superseded
        )
    }

    /// Adds a summary to this one.
    public static func += (lhs: inout UpsertSummary, rhs: UpsertSummary) { lhs = lhs + rhs }

    /// The four counts, for logs.
    public var description: String {
        "inserted \(inserted), updated \(updated), unchanged \(unchanged), superseded \(superseded)"
    }
}
