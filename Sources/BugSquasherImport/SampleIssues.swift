import Foundation

/// Generates Jira-like bug records for demos, tests and benchmarks when no real export is at
/// hand: deterministic, with the shape of the real data (projects, components, people,
/// comments, missing fields now and then).
///
/// ```swift
/// let records = SampleIssues.generate(count: 1_000)
/// ```
public enum SampleIssues {
    static let projects = [("TIMOB", "Titanium Mobile"), ("ALOY", "Alloy"), ("MOD", "Modules")]
    static let components = ["Android", "iOS", "Windows", "Tooling", "Documentation", "CLI"]
    static let statuses = ["Open", "In Progress", "Resolved", "Closed", "Reopened"]
    static let priorities = ["Trivial", "Low", "Medium", "High", "Critical"]

    /// `count` records, keys `PROJECT-n`; the same count always gives the same records.
    public static func generate(count: Int, startingAt first: Int = 1) -> [BugRecord] {
        (first..<(first + count)).map(record)
    }

    /// The record with number `n`.
    public static func record(_ n: Int) -> BugRecord {
        let project = projects[n % projects.count]
        let created = Date(timeIntervalSince1970: 1_300_000_000 + Double(n) * 3_600)
        let reporter = PersonRecord(name: "user-\(String(n % 97, radix: 16))", displayName: "User \(n % 97)")
        let comments = (0..<(n % 4)).map { c in
            CommentRecord(
                jiraID: "\(n * 10 + c)", body: "Comment \(c) on issue \(n): reproduced on build \(n % 50).",
                author: reporter, created: created.addingTimeInterval(Double(c + 1) * 600), updated: nil)
        }
        return BugRecord(
            key: "\(project.0)-\(n)",
            jiraID: "\(100_000 + n)",
            title: "Issue \(n): \(components[n % components.count]) crashes when rotating the device",
            details: n % 9 == 0 ? nil : "Steps to reproduce issue \(n): open the app, rotate the device, read the log.",
            status: statuses[n % statuses.count],
            resolution: n % statuses.count >= 2 ? "Fixed" : nil,
            priority: priorities[n % priorities.count],
            type: n % 7 == 0 ? "Story" : "Bug",
            labels: n % 5 == 0 ? ["regression"] : [],
            created: created,
            updated: created.addingTimeInterval(86_400),
            resolved: nil,
            project: ProjectRecord(key: project.0, name: project.1),
            components: n % 11 == 0 ? [] : [components[n % components.count]],
            reporter: reporter,
            assignee: n % 4 == 0 ? nil : PersonRecord(name: "user-\(String((n + 13) % 97, radix: 16))"),
            comments: comments
        )
    }
}
