import Foundation

/// Deterministic bug rows for the benchmark: realistic sizes (a 60-character title, a
/// 400-character description), keys in sequential or shuffled order.
struct BenchRows {
    let count: Int
    let order: [Int]

    init(count: Int, randomOrder: Bool) {
        self.count = count
        var order = Array(1...count)
        if randomOrder {
            var generator = SplitMix64(seed: 42)
            order.shuffle(using: &generator)
        }
        self.order = order
    }

    static let statuses = ["Open", "In Progress", "Resolved", "Closed", "Reopened"]
    static let priorities = ["Low", "Medium", "High", "Critical"]
    static let filler = String(repeating: "Steps to reproduce: open the app, rotate the device, watch the log. ", count: 6)

    /// The values of row `n`, in the order of the Bug entity's attributes.
    static func values(_ n: Int) -> (key: String, title: String, details: String, status: String, priority: String, type: String, labels: String, created: Double) {
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

/// A small, seedable generator so that "random order" is the same order in every run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

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
