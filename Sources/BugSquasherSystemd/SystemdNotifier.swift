import CSystemd
public import Foundation

/// Talks to the service manager through `$NOTIFY_SOCKET` (`sd_notify(3)`): readiness, status,
/// stopping, watchdog keep-alives, timeout extensions. Without `NOTIFY_SOCKET` every call does
/// nothing and never fails, so the same binary runs under systemd and from a shell.
///
/// ```swift
/// let notifier = SystemdNotifier()
/// notifier.ready(status: "Idle")
/// notifier.status("Importing job 3: 5,000 of 24,554 records")
/// ```
public struct SystemdNotifier: Sendable {
    /// Whether a service manager listens (`NOTIFY_SOCKET` is set).
    public let isEnabled: Bool

    /// Reads `NOTIFY_SOCKET` from the environment.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        isEnabled = environment["NOTIFY_SOCKET"] != nil
    }

    /// Sends `KEY=value` lines; returns whether they were sent.
    @discardableResult
    public func notify(_ lines: String...) -> Bool {
        guard isEnabled else { return false }
        return sd_notify(0, lines.joined(separator: "\n")) > 0
    }

    /// `READY=1`, with a status line.
    public func ready(status: String) { notify("READY=1", "STATUS=\(status)") }

    /// `STATUS=…`: what the daemon is doing, for `systemctl status`.
    public func status(_ text: String) { notify("STATUS=\(text.replacingOccurrences(of: "\n", with: " "))") }

    /// `STOPPING=1`.
    public func stopping(status: String) { notify("STOPPING=1", "STATUS=\(status)") }

    /// `WATCHDOG=1`: the daemon proved it is healthy.
    public func watchdog() { notify("WATCHDOG=1") }

    /// `EXTEND_TIMEOUT_USEC=…`: a shutdown step needs up to `duration` more.
    public func extendTimeout(_ duration: Duration, status: String) {
        let microseconds = duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000
        notify("EXTEND_TIMEOUT_USEC=\(microseconds)", "STATUS=\(status)")
    }

    /// The watchdog interval the manager expects for this process (`WATCHDOG_USEC`, when
    /// `WATCHDOG_PID` is unset or this process), or `nil` when the watchdog is off.
    public static func watchdogInterval() -> Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(microseconds))
    }
}
