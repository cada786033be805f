import Foundation

/// The process's resident memory and open file descriptors, read from /proc at each scrape.
public enum ProcessMetrics {
    /// Resident set size in bytes (`/proc/self/statm`), or `nil` where /proc is not mounted.
    public static func residentBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// Open file descriptors (`/proc/self/fd`), or `nil` where /proc is not mounted.
    public static func openDescriptors() -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map { max(0, $0.count - 1) }
    }
}
