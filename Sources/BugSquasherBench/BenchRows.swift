import Foundation

/// Deterministic bug rows for the benchmark: realistic sizes (a 60-character title, a
/// 400-character description), keys in sequential or shuffled order.
struct BenchRows {
    let count: Int
    private let stride: Int

    /// Rows 1…count; in random order, row `n` of the import is `(stride × n) mod count + 1` for a
    /// stride coprime with count near count × 0.618 — a fixed permutation that scatters
    /// consecutive keys across the unique index like a shuffle, without holding an array of
    /// `count` positions (so the benchmark's own memory does not grow with N).
    init(count: Int, randomOrder: Bool) {
        self.count = count
        guard randomOrder, count > 2 else {
            stride = 1
            return
        }
        var candidate = max(2, Int(Double(count) * 0.618_033_988_7))
        while gcd(candidate, count) != 1 { candidate += 1 }
        stride = candidate
    }

    /// The row number imported at `position` (0-based).
    func row(at position: Int) -> Int {
        stride == 1 ? position + 1 : Int((UInt64(stride) * UInt64(position)) % UInt64(count)) + 1
    }

    static let statuses = ["Open", "In Progress", "Resolved", "Closed", "Reopened"]
    static let priorities = ["Low", "Medium", "High", "Critical"]
    static let filler = String(
        repeating: "Steps to reproduce: open the app, rotate the device, watch the log. ", count: 6)

    /// The values of row `n`, in the order of the Bug entity's attributes.
    static func values(_ n: Int) -> (
        key: String, title: String, details: String, status: String, priority: String, type: String, labels: String,
        created: Double
    ) {
        (
            "BENCH-\(n)",
            "Crash #\(n) when rotating the device while the keyboard is open",
            "\(n): " + String(filler.prefix(400)),
            statuses[n % statuses.count],
            priorities[n % priorities.count],
            n % 7 == 0 ? "Story" : "Bug",
            n % 3 == 0 ? "regression android" : "",
            1_300_000_000 + Double(n) * 60
        )
    }
}

private func gcd(_ a: Int, _ b: Int) -> Int { b == 0 ? a : gcd(b, a % b) }

/// The process's peak resident set size, from `/proc/self/status` (`VmHWM`), in MiB.
func peakRSSMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kib = Double(line.split(separator: " ").dropFirst().first ?? "")
    else { return 0 }
    return kib / 1024
}

/// The current resident set size (`VmRSS`), in MiB.
func currentRSSMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
        let kib = Double(line.split(separator: " ").dropFirst().first ?? "")
    else { return 0 }
    return kib / 1024
}
