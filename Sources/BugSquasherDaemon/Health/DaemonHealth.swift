import Foundation

/// Whether squasherd serves as it should, decided from what it recorded (``HealthRecord``) and
/// what its store says now: `ok`, or `degraded` with the problems. Pure, so that every rule is
/// tested without a daemon; `squasherctl status` exits 5 when degraded (docs/OPERATIONS.md,
/// "Health").
struct DaemonHealth: Equatable {
    /// One reason the daemon is degraded.
    struct Problem: Equatable {
        /// `store-unavailable`, `store-cannot-write`, `job-failed` or `subscribers-dropped`.
        var code: String
        /// What happened, for a person.
        var message: String
    }

    /// What the daemon recorded lately.
    struct Facts {
        /// The last time a write was refused because the store could not take it.
        var lastRefusedWrite: Date?
        /// The last job that failed, and when.
        var lastFailedJob: (id: String, at: Date)?
        /// The last time a subscriber was dropped for falling behind, and how many were in the
        /// window before it.
        var lastDroppedSubscriber: Date?
        var droppedSubscribers = 0
    }

    /// How long a refused write or a dropped subscriber keeps the daemon degraded.
    static let window: TimeInterval = 300
    /// How long a failed job does.
    static let jobWindow: TimeInterval = 3_600

    var problems: [Problem]
    /// `ok` or `degraded`.
    var state: String { problems.isEmpty ? "ok" : "degraded" }

    /// The health of a daemon with `facts`, whose store reports `storeProblem` now.
    init(_ facts: Facts, storeProblem: String?, now: Date) {
        problems = []
        if let storeProblem {
            problems.append(Problem(code: "store-unavailable", message: storeProblem))
        }
        if let at = facts.lastRefusedWrite, now.timeIntervalSince(at) < Self.window {
            problems.append(
                Problem(
                    code: "store-cannot-write",
                    message: "The store refused a write \(Self.ago(at, now)); see the log for why."))
        }
        if let job = facts.lastFailedJob, now.timeIntervalSince(job.at) < Self.jobWindow {
            problems.append(
                Problem(code: "job-failed", message: "Import job \(job.id) failed \(Self.ago(job.at, now))."))
        }
        if let at = facts.lastDroppedSubscriber, now.timeIntervalSince(at) < Self.window {
            problems.append(
                Problem(
                    code: "subscribers-dropped",
                    message:
                        "\(facts.droppedSubscribers) subscriber(s) fell too far behind and were told to resync in the last \(Int(Self.window / 60)) minutes."
                ))
        }
    }

    private static func ago(_ date: Date, _ now: Date) -> String {
        "\(max(0, Int(now.timeIntervalSince(date)))) s ago"
    }
}
