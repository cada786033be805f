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
    public var isEnabled: Bool { socket != nil }
    /// `NOTIFY_SOCKET`: where the service manager listens.
    private let socket: String?

    /// Reads `NOTIFY_SOCKET` from the environment.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        socket = environment["NOTIFY_SOCKET"]
    }

    /// Sends `KEY=value` lines; returns whether they were sent.
    @discardableResult
    public func notify(_ lines: String...) -> Bool {
        isEnabled && send(lines) == nil
    }

    /// Sends `KEY=value` lines; returns why they could not be sent, or `nil` when they were
    /// (or when there is no `NOTIFY_SOCKET` to send them to).
    private func send(_ lines: [String]) -> String? {
        guard isEnabled else { return nil }
        let result = sd_notify(0, lines.joined(separator: "\n"))
        return result < 0 ? String(cString: strerror(-result)) : nil
    }

    /// `READY=1`, with a status line. Returns what to log when the service manager could not
    /// be told (a `NOTIFY_SOCKET` naming no socket): a `Type=notify` unit would then time out
    /// starting, with nothing from squasherd to say why.
    @discardableResult
    public func ready(status: String) -> String? {
        guard let failure = send(["READY=1", "STATUS=\(status)"]) else { return nil }
        return
            "Could not tell the service manager that squasherd is ready: sending READY=1 to NOTIFY_SOCKET=\(socket ?? "") failed (\(failure)). Under systemd (Type=notify) the start will time out and squasherd be stopped; outside systemd, unset NOTIFY_SOCKET or point it at a datagram socket that listens."
    }

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

    /// What the service manager asks of this process's watchdog.
    public enum Watchdog: Equatable, Sendable {
        /// No watchdog (`WATCHDOG_USEC` unset, or set for another process by `WATCHDOG_PID`).
        case off
        /// Ping at least once per `interval`.
        case interval(Duration)
        /// `WATCHDOG_USEC` holds `value`, which is not a number of microseconds above zero (or
        /// `WATCHDOG_PID` is not a process ID).
        case invalid(value: String)
    }

    /// The shortest watchdog interval squasherd follows: it pings every half interval, and each
    /// ping reads the store, so a shorter one would only burn CPU (1 µs, a typo, pinged 6,000
    /// times a second) while systemd stops the process anyway.
    public static let minimumWatchdogInterval = Duration.milliseconds(100)

    /// The watchdog the manager expects for this process (`WATCHDOG_USEC`, when `WATCHDOG_PID`
    /// is unset or this process).
    public static func watchdog() -> Watchdog {
        var microseconds: UInt64 = 0
        let result = sd_watchdog_enabled(0, &microseconds)
        if result < 0 { return .invalid(value: ProcessInfo.processInfo.environment["WATCHDOG_USEC"] ?? "") }
        guard result > 0, microseconds > 0 else { return .off }
        return .interval(.microseconds(Int64(clamping: microseconds)))
    }
}
