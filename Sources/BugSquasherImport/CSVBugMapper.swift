import BugSquasherGraph
public import Foundation

/// Maps CSV exports of Jira and Bugzilla to ``BugRecord``s by their header row.
///
/// - **Jira** ("Export → CSV"): `Issue key`, `Summary`, `Description`, `Status`, `Resolution`,
///   `Priority`, `Issue Type`, `Project key`, `Project name`, `Reporter`, `Assignee`, `Created`,
///   `Updated`, `Resolved`, repeated `Component/s` and `Labels` columns, and repeated `Comment`
///   columns (`date;author;body`). Dates as Jira writes them (`15/Apr/11 2:23 AM`) or ISO 8601.
/// - **Bugzilla** (`buglist.cgi?ctype=csv`): `bug_id`, `product`, `component`, `bug_status`,
///   `resolution`, `short_desc`, `priority`, `bug_severity`, `assigned_to`, `reporter`,
///   `opendate`, `changeddate`, `keywords`; long names (`Bug ID`, `Product`, `Summary`, …) too.
///   The key is `BZ-<bug_id>` and the project is the product.
///
/// Header names are matched without regard to case.
public struct CSVBugMapper: Sendable {
    /// The export's origin.
    public enum Flavor: String, Sendable, CaseIterable {
        /// A Jira CSV export.
        case jira
        /// A Bugzilla CSV export.
        case bugzilla
    }

    /// The flavor in use.
    public let flavor: Flavor
    private let columns: [String: [Int]]
    /// How many fields the header has, and so every row.
    private let width: Int
    /// The record fields no column of the header holds: an export of some columns only leaves
    /// the others as the bug has them.
    private let absent: BugRecord.Fields
    /// Columns the header has more than once that a record takes one value from, with their
    /// positions: a row that holds different values in them is refused.
    private let repeated: [(name: String, indexes: [Int])]

    /// The columns each record field may come from, per flavor.
    private static let fieldColumns: [Flavor: [(BugRecord.Fields, [String])]] = [
        .jira: [
            (.jiraID, ["issue id"]), (.title, ["summary"]), (.details, ["description"]), (.status, ["status"]),
            (.resolution, ["resolution"]), (.priority, ["priority"]), (.type, ["issue type"]), (.labels, ["labels"]),
            (.created, ["created"]), (.updated, ["updated"]), (.resolved, ["resolved"]), (.components, ["component/s", "components"]),
            (.reporter, ["reporter"]), (.assignee, ["assignee"]),
        ],
        .bugzilla: [
            (.title, ["short_desc", "summary"]), (.details, ["long_desc", "description"]), (.status, ["bug_status", "status"]),
            (.resolution, ["resolution"]), (.priority, ["priority"]), (.type, ["bug_severity", "severity"]), (.labels, ["keywords"]),
            (.created, ["opendate", "opened", "creation_ts"]), (.updated, ["changeddate", "changed", "delta_ts"]), (.resolved, []),
            (.components, ["component"]), (.reporter, ["reporter"]), (.assignee, ["assigned_to", "assignee"]),
        ],
    ]

    /// Reads a header row.
    ///
    /// - Throws: ``ImportError`` (`invalidRecord`) when the header lacks the key column of the
    ///   flavor, with the columns it did find.
    public init(header: [String], flavor: Flavor) throws {
        self.flavor = flavor
        width = header.count
        var columns: [String: [Int]] = [:]
        for (index, name) in header.enumerated() {
            columns[name.trimmingCharacters(in: .whitespaces).lowercased(), default: []].append(index)
        }
        self.columns = columns
        // Jira repeats the columns of lists (labels, components, comments); the others hold one
        // value each, and so do all of Bugzilla's.
        let lists: BugRecord.Fields = flavor == .jira ? [.labels, .components] : []
        let single = Set(Self.fieldColumns[flavor, default: []].filter { !lists.contains($0.0) }.flatMap(\.1))
            .union(flavor == .jira ? ["issue key", "project key", "project name"] : ["bug_id", "bug id", "id", "product"])
        repeated = columns.filter { single.contains($0.key) && $0.value.count > 1 }.map { ($0.key, $0.value) }.sorted { $0.name < $1.name }
        absent = Self.fieldColumns[flavor, default: []].reduce(into: []) { absent, entry in
            if !entry.1.contains(where: { columns[$0] != nil }) { absent.insert(entry.0) }
        }
        let keyColumns = flavor == .jira ? ["issue key"] : ["bug_id", "bug id", "id"]
        guard keyColumns.contains(where: { columns[$0] != nil }) else {
            throw ImportError(.invalidRecord, "This is not a \(flavor.rawValue) CSV export: its header has no \(keyColumns.map { "'\($0)'" }.joined(separator: " or ")) column (it has \(header.prefix(8).joined(separator: ", "))). Export with the key column, or pick the right --format.")
        }
    }

    /// Detects the flavor of a header row, if it is one of the supported exports.
    public static func detect(header: [String]) -> Flavor? {
        let names = Set(header.map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
        if names.contains("issue key") { return .jira }
        if names.contains("bug_id") || names.contains("bug id") { return .bugzilla }
        return nil
    }

    private func value(_ fields: [String], _ names: String...) -> String? {
        for name in names {
            for index in columns[name] ?? [] where index < fields.count {
                let text = fields[index].trimmingCharacters(in: .whitespacesAndNewlines)
                if !text.isEmpty { return text }
            }
        }
        return nil
    }

    private func values(_ fields: [String], _ name: String) -> [String] {
        (columns[name] ?? []).compactMap { $0 < fields.count ? fields[$0].trimmingCharacters(in: .whitespacesAndNewlines) : nil }.filter { !$0.isEmpty }
    }

    private func date(_ fields: [String], _ names: String..., line: Int) throws -> Date? {
        for name in names {
            guard let text = value(fields, name) else { continue }
            guard let date = TrackerDate.parse(text) else {
                throw ImportError(.invalidRecord, "Column '\(name)' holds '\(text)', which is not a date this importer reads (15/Apr/11 2:23 AM, 2011-04-15 02:23:39, or ISO 8601).", inputLine: line)
            }
            return date
        }
        return nil
    }

    /// Maps one data row.
    ///
    /// - Throws: ``ImportError`` naming the column, for a missing key or an unreadable date; for
    ///   a row whose field count is not the header's (its values would land in the wrong
    ///   columns).
    public func record(_ fields: [String], line: Int) throws -> BugRecord {
        guard fields.count == width else {
            throw ImportError(.invalidRecord, "The row has \(fields.count) fields but the header has \(width), so its values cannot be matched to columns (a value with a comma or a quote that is not quoted?). Fix this row, or export the file again.", inputLine: line)
        }
        for (name, indexes) in repeated {
            let values = indexes.map { fields[$0].trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
            guard Set(values).count > 1 else { continue }
            throw ImportError(.invalidRecord, "Column '\(name)' is in the header \(indexes.count) times, and this row holds different values in them (\(values.prefix(3).map { "'\($0.prefix(40))'" }.joined(separator: ", "))): which one is meant cannot be told. Keep one of those columns, or export the file again.", inputLine: line)
        }
        var record = switch flavor {
        case .jira: try jiraRecord(fields, line: line)
        case .bugzilla: try bugzillaRecord(fields, line: line)
        }
        record.absent = absent
        return record
    }

    private func person(_ name: String?) -> PersonRecord? {
        name.map { PersonRecord(name: $0, displayName: nil) }
    }

    private func jiraRecord(_ fields: [String], line: Int) throws -> BugRecord {
        guard let key = value(fields, "issue key") else {
            throw ImportError(.missingKey, "The row has no 'Issue key'.", inputLine: line)
        }
        let projectKey = value(fields, "project key") ?? String(key.split(separator: "-").first ?? Substring(key))
        let comments = values(fields, "comment").enumerated().map { index, text -> CommentRecord in
            // Jira writes "date;author;body".
            let parts = text.split(separator: ";", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, let created = TrackerDate.parse(parts[0]) else {
                return CommentRecord(jiraID: "\(key)-c\(index + 1)", body: text, author: nil, created: nil, updated: nil)
            }
            return CommentRecord(jiraID: "\(key)-c\(index + 1)", body: parts[2], author: parts[1].isEmpty ? nil : PersonRecord(name: parts[1], displayName: nil), created: created, updated: nil)
        }
        return BugRecord(
            key: key,
            jiraID: value(fields, "issue id"),
            title: value(fields, "summary") ?? key,
            details: value(fields, "description"),
            status: value(fields, "status") ?? "Open",
            resolution: value(fields, "resolution").flatMap { $0 == "Unresolved" ? nil : $0 },
            priority: value(fields, "priority").flatMap { $0 == "None" ? nil : $0 },
            type: value(fields, "issue type"),
            labels: values(fields, "labels").map { $0.replacingOccurrences(of: " ", with: "_") },
            created: try date(fields, "created", line: line),
            updated: try date(fields, "updated", line: line),
            resolved: try date(fields, "resolved", line: line),
            project: ProjectRecord(key: projectKey, name: value(fields, "project name")),
            components: values(fields, "component/s") + values(fields, "components"),
            reporter: person(value(fields, "reporter")),
            assignee: person(value(fields, "assignee")),
            comments: comments
        )
    }

    private func bugzillaRecord(_ fields: [String], line: Int) throws -> BugRecord {
        guard let cell = value(fields, "bug_id", "bug id", "id") else {
            throw ImportError(.missingKey, "The row has no 'bug_id'.", inputLine: line)
        }
        // Bugzilla numbers bugs from 1. Digits only: "-5" or "+5" would make keys no Bugzilla
        // bug has ("BZ--5"), and a number of any length is still a key.
        // Leading zeros are dropped: "007" is bug 7, the key BZ-7, as Bugzilla itself reads it.
        let id = String(cell.drop { $0 == "0" })
        guard !id.isEmpty, id.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            throw ImportError(.invalidRecord, "Column 'bug_id' holds '\(cell)', which is not a Bugzilla bug number (a positive whole number).", inputLine: line)
        }
        let product = value(fields, "product") ?? "BUGZILLA"
        let projectKey = String(product.uppercased().unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) }.prefix(20))
        return BugRecord(
            key: "BZ-\(id)",
            jiraID: id,
            title: value(fields, "short_desc", "summary") ?? "BZ-\(id)",
            details: value(fields, "long_desc", "description"),
            status: value(fields, "bug_status", "status") ?? "NEW",
            resolution: value(fields, "resolution"),
            priority: value(fields, "priority"),
            type: value(fields, "bug_severity", "severity"),
            labels: (value(fields, "keywords") ?? "").split(whereSeparator: { $0 == "," || $0 == " " }).map(String.init),
            created: try date(fields, "opendate", "opened", "creation_ts", line: line),
            updated: try date(fields, "changeddate", "changed", "delta_ts", line: line),
            resolved: nil,
            project: ProjectRecord(key: projectKey.isEmpty ? "BUGZILLA" : projectKey, name: product),
            components: value(fields, "component").map { [$0] } ?? [],
            reporter: person(value(fields, "reporter")),
            assignee: person(value(fields, "assigned_to", "assignee")),
            comments: []
        )
    }
}

/// Dates as trackers write them in CSV exports.
public enum TrackerDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Parses `15/Apr/11 2:23 AM` (Jira), `2011-04-15 02:23:39` or `2011-04-15 02:23` (Bugzilla,
    /// UTC; seconds may have a fraction, and a zone may follow: `UTC`, `GMT`, `Z` or `+0500`), or
    /// anything ``ISO8601Date`` reads; `nil` otherwise. Nothing is rolled over or left out: a
    /// second of 99, a garbled minute or a zone it does not know (`PST`) is `nil`, not a nearby
    /// instant.
    public static func parse(_ text: String) -> Date? {
        let text = text.trimmingCharacters(in: .whitespaces)
        if let date = ISO8601Date.parse(text) { return date }
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        // 2011-04-15 02:23(:39(.750)?)?( UTC| +0000)?: ISO 8601 with a space for the T.
        if parts.count == 2 || parts.count == 3, parts[0].contains("-") {
            let zone = parts.count == 2 ? "Z" : ["UTC", "GMT", "Z"].contains(parts[2].uppercased()) ? "Z" : String(parts[2])
            guard zone == "Z" || zone.first == "+" || zone.first == "-" else { return nil }
            // Two digits of hour, as ISO 8601 has them (2:23:39 is 02:23:39).
            let time = parts[1].prefix { $0 != ":" }.count == 1 ? "0" + parts[1] : String(parts[1])
            return ISO8601Date.parse("\(parts[0])T\(time)\(zone)")
        }
        // 15/Apr/11 2:23 AM
        func number(_ text: Substring) -> Int? { text.allSatisfy(\.isASCII) && text.allSatisfy(\.isNumber) ? Int(text) : nil }
        let slash = text.split(separator: "/", omittingEmptySubsequences: false)
        guard slash.count == 3, let dayOfMonth = number(slash[0]),
              let month = months.firstIndex(of: slash[1].lowercased())
        else { return nil }
        let rest = slash[2].split(separator: " ")
        guard (1...3).contains(rest.count), var year = number(rest[0]) else { return nil }
        if rest[0].count <= 2 { year += year < 70 ? 2000 : 1900 }
        var hour = 0
        var minute = 0
        if rest.count >= 2 {
            let hm = rest[1].split(separator: ":", omittingEmptySubsequences: false)
            guard hm.count == 2, let h = number(hm[0]), let m = number(hm[1]), hm[1].count == 2 else { return nil }
            hour = h
            minute = m
            if rest.count == 3 {
                let meridiem = rest[2].uppercased()
                guard (1...12).contains(hour), meridiem == "AM" || meridiem == "PM" else { return nil }
                hour = hour % 12 + (meridiem == "PM" ? 12 : 0)
            }
        }
        guard (1...9999).contains(year) else { return nil }
        let iso = String(format: "%04d-%02d-%02dT%02d:%02d:00Z", year, month + 1, dayOfMonth, hour, minute)
        return ISO8601Date.parse(iso)
    }
}
