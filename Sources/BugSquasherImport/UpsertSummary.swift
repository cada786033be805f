/// What one ``BugUpserter/upsert(_:keys:validated:in:)`` call did to the bugs of its chunk: each
/// distinct key counts once in ``inserted``, ``updated`` or ``unchanged``, and ``repeated`` counts
/// the records whose key an earlier record of the chunk named. Summaries add up across chunks:
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
    /// Records whose key an earlier record of the same chunk named: each was applied, in input
    /// order, to the bug that earlier record inserted or updated.
    public var repeated: Int

    /// Creates a summary; all counts default to zero.
    public init(inserted: Int = 0, updated: Int = 0, unchanged: Int = 0, repeated: Int = 0) {
        self.inserted = inserted
        self.updated = updated
        self.unchanged = unchanged
        self.repeated = repeated
    }

    /// The number of distinct bugs the records named.
    public var total: Int { inserted + updated + unchanged }

    /// Adds two summaries, count by count.
    public static func + (lhs: UpsertSummary, rhs: UpsertSummary) -> UpsertSummary {
        UpsertSummary(
            inserted: lhs.inserted + rhs.inserted,
            updated: lhs.updated + rhs.updated,
            unchanged: lhs.unchanged + rhs.unchanged,
            repeated: lhs.repeated + rhs.repeated
        )
    }

    /// Counts one bug's outcome.
    mutating func count(_ outcome: UpsertPass.Outcome) {
        switch outcome {
        case .inserted: inserted += 1
        case .updated: updated += 1
        case .unchanged: unchanged += 1
        }
    }

    /// Adds a summary to this one.
    public static func += (lhs: inout UpsertSummary, rhs: UpsertSummary) { lhs = lhs + rhs }

    /// The four counts, for logs.
    public var description: String {
        "inserted \(inserted), updated \(updated), unchanged \(unchanged), repeated \(repeated)"
    }
}
