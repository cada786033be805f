import BugSquasherGraph
public import Foundation

/// Maps CSV exports of Jira ("Export → CSV") and Bugzilla (`buglist.cgi?ctype=csv`), and CSV files
/// with other column names (through a ``CSVColumnMapping``), to ``BugRecord``s by their header row.
///
/// Header names are matched without regard to case. A field no column holds is left as the bug has
/// it; a date that is there but cannot be read rejects its row, never becomes "no date". The
/// columns, keys and dates of each flavor: docs/IMPORTS.md, "CSV exports".
public struct CSVBugMapper: Sendable {
    /// The export's origin: the column names looked for, and the defaults of a record.
    public enum Flavor: String, Sendable, CaseIterable {
        /// A Jira CSV export.
        case jira
        /// A Bugzilla CSV export.
        case bugzilla
    }

    typealias Field = CSVColumnMapping.Field

    /// The flavor in use.
    public let flavor: Flavor
    /// The columns each field is read from, as positions in the header.
    private let fieldColumns: [Field: [Int]]
    /// The header's names, as written.
    private let header: [String]
    /// The project key the mapping gives every bug, if any.
    private let project: String?
    /// How many fields the header has, and so every row.
    private let width: Int
    /// The record fields no column of the header holds: an export of some columns only leaves
    /// the others as the bug has them.
    private let absent: BugRecord.Fields
    /// Columns the header has more than once that a record takes one value from, with their
    /// positions: a row that holds different values in them is refused.
    private let repeated: [(name: String, indexes: [Int])]

    /// The names each field is looked for under, per flavor, when no mapping names its column.
    static let synonyms: [Flavor: [Field: [String]]] = [
        .jira: [
            .key: ["issue key"], .id: ["issue id"], .summary: ["summary"], .description: ["description"],
            .status: ["status"], .resolution: ["resolution"], .priority: ["priority"], .type: ["issue type"],
            .labels: ["labels"], .created: ["created"], .updated: ["updated"], .resolved: ["resolved"],
            .project: ["project key"], .projectName: ["project name"], .components: ["component/s", "components"],
            .reporter: ["reporter"], .assignee: ["assignee"], .comments: ["comment"],
        ],
        .bugzilla: [
            .id: ["bug_id", "bug id", "id", "issue id"], .summary: ["short_desc", "summary"],
            .description: ["long_desc", "description"], .status: ["bug_status", "status"], .resolution: ["resolution"],
            .priority: ["priority"], .type: ["bug_severity", "severity"], .labels: ["keywords"],
            .created: ["opendate", "opened", "creation_ts", "creation_time", "created", "reported"],
            .updated: ["changeddate", "changed", "delta_ts", "last_change_time", "updated", "last changed"],
            .resolved: ["cf_last_resolved", "resolved", "last resolved"], .projectName: ["product"],
            .components: ["component"],
            .reporter: ["reporter"], .assignee: ["assigned_to", "assignee", "assigned to"],
        ],
    ]

    /// The fields whose columns may repeat, one value each (Jira's lists).
    private static let listFields: [Flavor: Set<Field>] = [.jira: [.labels, .components, .comments], .bugzilla: []]

    /// The record field each mapped field fills, for those a source may leave out.
    private static let recordFields: [Field: BugRecord.Fields] = [
        .id: .jiraID, .summary: .title, .description: .details, .status: .status, .resolution: .resolution,
        .priority: .priority, .type: .type, .labels: .labels, .created: .created, .updated: .updated,
        .resolved: .resolved, .components: .components, .reporter: .reporter, .assignee: .assignee,
    ]

    /// Reads a header row, with the columns a user mapped.
    ///
    /// - Throws: ``ImportError`` (`invalidRecord`) when a mapped column is not in the header, or
    ///   the header has no column for the key (or only numeric IDs and no project to make keys
    ///   of them); the message lists the header's columns.
    public init(header: [String], flavor: Flavor, mapping: CSVColumnMapping = CSVColumnMapping()) throws {
        self.flavor = flavor
        self.header = header
        project = mapping.project
        width = header.count
        var byName: [String: [Int]] = [:]
        for (index, name) in header.enumerated() {
            byName[Self.normalized(name), default: []].append(index)
        }
        var fieldColumns: [Field: [Int]] = [:]
        var repeated: [(String, [Int])] = []
        let synonyms = Self.synonyms[flavor, default: [:]]
        for field in Field.allCases {
            if let column = mapping.columns[field] {
                guard let indexes = byName[Self.normalized(column)] else {
                    throw ImportError(
                        .invalidRecord,
                        "--map \(field.rawValue)=\(CSVColumnMapping.quoted(column)): the header has no column '\(column)'. \(Self.listing(header))",
                        advice: "Name one of them, as the header writes it."
                    )
                }
                fieldColumns[field] = indexes
            } else if let name = synonyms[field]?.first(where: { byName[$0] != nil }) {
                // Under the first of its usual names the header has (every column of that name).
                fieldColumns[field] = byName[name]
            }
            if let indexes = fieldColumns[field], indexes.count > 1,
                !Self.listFields[flavor, default: []].contains(field)
            {
                repeated.append((header[indexes[0]].trimmingCharacters(in: .whitespaces).lowercased(), indexes))
            }
        }
        self.fieldColumns = fieldColumns
        self.repeated = repeated.sorted { $0.0 < $1.0 }
        absent = Self.recordFields.reduce(into: []) { absent, entry in
            if fieldColumns[entry.key] == nil { absent.insert(entry.value) }
        }
        guard fieldColumns[.key] != nil || fieldColumns[.id] != nil else {
            let usual =
                flavor == .jira
                ? "a Jira export names it 'Issue key'" : "a Bugzilla export names it 'bug_id' or 'Bug ID'"
            throw ImportError(
                .invalidRecord,
                "The CSV header has no column for the bug's key (\(usual)). \(Self.listing(header))",
                advice:
                    "Name the key column with --map key=COLUMN (or numeric IDs with --map id=COLUMN --project KEY), or pick the right --format."
            )
        }
        if flavor == .jira, fieldColumns[.key] == nil, mapping.project == nil, fieldColumns[.project] == nil {
            let column = header[fieldColumns[.id]![0]]
            throw ImportError(
                .invalidRecord,
                "The CSV header has '\(column)' but no 'Issue key': its numeric IDs need a project to become keys. \(Self.listing(header))",
                advice:
                    "Give the project with --project KEY (bugs become KEY-<id>), name the key column with --map key=COLUMN, or import it as --format bugzilla-csv (bugs become BZ-<id>)."
            )
        }
    }

    /// A header name as it is matched: trimmed, lower case.
    private static func normalized(_ name: String) -> String {
        name.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// "Its columns are A, B, C." for a message, at most 40 of them.
    private static func listing(_ header: [String]) -> String {
        let shown = header.prefix(40).map { "'\($0)'" }.joined(separator: ", ")
        return "Its columns are \(shown)\(header.count > 40 ? " and \(header.count - 40) more" : "")."
    }

    /// Detects the flavor of a header row, if it is one of the supported exports: `Issue key`
    /// or `Issue id` (Jira), `bug_id` or `Bug ID` (Bugzilla).
    public static func detect(header: [String]) -> Flavor? {
        let names = Set(header.map(normalized))
        if names.contains("issue key") { return .jira }
        if names.contains("bug_id") || names.contains("bug id") { return .bugzilla }
        if names.contains("issue id") { return .jira }
        return nil
    }

    /// Which column each field is read from, and the columns nothing reads: what a job records,
    /// so that a user can see what became of every column.
    public var columnsRead: String {
        var read = Set<Int>()
        let fields = fieldColumns.sorted { $0.key < $1.key }.map { field, indexes -> String in
            read.formUnion(indexes)
            return
                "\(field.rawValue)=\(CSVColumnMapping.quoted(header[indexes[0]].trimmingCharacters(in: .whitespaces)))"
        }
        var text = fields.joined(separator: " ")
        if let project { text += " --project \(project)" }
        let unread = header.indices.filter { !read.contains($0) }.map {
            header[$0].trimmingCharacters(in: .whitespaces)
        }
        let unique = unread.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
        if !unique.isEmpty {
            text +=
                "; not imported: " + unique.prefix(20).joined(separator: ", ")
                + (unique.count > 20 ? " and \(unique.count - 20) more" : "")
        }
        return text
    }

    private func value(_ fields: [String], _ field: Field) -> String? {
        for index in fieldColumns[field] ?? [] where index < fields.count {
            let text = fields[index].trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty { return text }
        }
        return nil
    }

    private func values(_ fields: [String], _ field: Field) -> [String] {
        (fieldColumns[field] ?? []).compactMap {
            $0 < fields.count ? fields[$0].trimmingCharacters(in: .whitespacesAndNewlines) : nil
        }.filter { !$0.isEmpty }
    }

    /// The column a field's value came from in this row, for messages.
    private func column(_ fields: [String], _ field: Field) -> String {
        let indexes = fieldColumns[field] ?? []
        let index =
            indexes.first { $0 < fields.count && !fields[$0].trimmingCharacters(in: .whitespacesAndNewlines).isEmpty }
            ?? indexes.first
        return index.map { header[$0].trimmingCharacters(in: .whitespaces) } ?? field.rawValue
    }

    private func date(_ fields: [String], _ field: Field, line: Int) throws -> Date? {
        guard let text = value(fields, field) else { return nil }
        guard let date = TrackerDate.parse(text) else {
            throw ImportError(
                .invalidRecord,
                "Column '\(column(fields, field))' holds '\(text.prefix(80))', which is not a date this importer reads (15/Apr/11 2:23 AM, 2011-04-15 02:23:39 with or without a zone such as +00:00, or ISO 8601).",
                advice:
                    "Fix the date in the export, or read the field from another column (--map \(field.rawValue)=COLUMN).",
                inputLine: line)
        }
        return date
    }

    /// Maps one data row.
    ///
    /// - Throws: ``ImportError`` naming the column, for a missing key, a number that no project
    ///   makes a key of, or an unreadable date; for a row whose field count is not the header's
    ///   (its values would land in the wrong columns).
    public func record(_ fields: [String], line: Int) throws -> BugRecord {
        guard fields.count == width else {
            throw ImportError(
                .invalidRecord,
                "The row has \(fields.count) fields but the header has \(width), so its values cannot be matched to columns (a value with a comma or a quote that is not quoted?).",
                advice: "Fix this row, or export the file again.",
                inputLine: line)
        }
        for (name, indexes) in repeated {
            let values = indexes.map { fields[$0].trimmingCharacters(in: .whitespacesAndNewlines) }.filter {
                !$0.isEmpty
            }
            guard Set(values).count > 1 else { continue }
            throw ImportError(
                .invalidRecord,
                "Column '\(name)' is in the header \(indexes.count) times, and this row holds different values in them (\(values.prefix(3).map { "'\($0.prefix(40))'" }.joined(separator: ", "))): which one is meant cannot be told.",
                advice: "Keep one of those columns, or export the file again.",
                inputLine: line)
        }
        let (key, idNumber) = try key(fields, line: line)
        let isJira = flavor == .jira
        let product = value(fields, .projectName)
        let projectKey =
            project ?? value(fields, .project)
            ?? (isJira
                ? String(key.split(separator: "-").first ?? Substring(key))
                : product.map {
                    String($0.uppercased().unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) }.prefix(20))
                }.flatMap { $0.isEmpty ? nil : $0 } ?? "BUGZILLA")
        var record = BugRecord(
            key: key,
            jiraID: idNumber ?? value(fields, .id),
            title: value(fields, .summary) ?? key,
            details: value(fields, .description),
            status: value(fields, .status) ?? (isJira ? "Open" : "NEW"),
            resolution: value(fields, .resolution).flatMap { isJira && $0 == "Unresolved" ? nil : $0 },
            priority: value(fields, .priority).flatMap { isJira && $0 == "None" ? nil : $0 },
            type: value(fields, .type),
            labels: labels(fields),
            created: try date(fields, .created, line: line),
            updated: try date(fields, .updated, line: line),
            resolved: try date(fields, .resolved, line: line),
            project: ProjectRecord(key: projectKey, name: product ?? (isJira ? nil : projectKey)),
            components: values(fields, .components),
            reporter: person(value(fields, .reporter)),
            assignee: person(value(fields, .assignee)),
            comments: comments(fields, key: key)
        )
        record.absent = absent
        return record
    }

    /// The row's key, and the tracker's ID when the key was made of it.
    private func key(_ fields: [String], line: Int) throws -> (key: String, idNumber: String?) {
        let field: Field = value(fields, .key) != nil ? .key : .id
        guard let cell = value(fields, field) else {
            let names = [Field.key, .id].compactMap { fieldColumns[$0].map { "'\(header[$0[0]])'" } }
            throw ImportError(
                .missingKey,
                "The row has no key: \(names.joined(separator: " and ")) \(names.count == 1 ? "is" : "are") empty.",
                inputLine: line)
        }
        let digits = cell.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        if field == .key, !digits { return (cell, nil) }
        // A number: the tracker's ID, made a key with the project's. Trackers number from 1,
        // so leading zeros are dropped ("007" is bug 7, as Bugzilla reads it), and a sign or a
        // fraction would make keys no tracker has ("BZ--5").
        let number = String(cell.drop { $0 == "0" })
        guard digits, !number.isEmpty else {
            throw ImportError(
                .invalidRecord,
                "Column '\(column(fields, field))' holds '\(cell.prefix(80))', which is neither a bug key (PROJ-123) nor a bug number (a positive whole number).",
                inputLine: line)
        }
        guard let prefix = project ?? (flavor == .bugzilla ? "BZ" : value(fields, .project)) else {
            throw ImportError(
                .invalidRecord,
                "Column '\(column(fields, field))' holds the number \(cell), not a bug key, and the row names no project to make one of it.",
                advice: "Give --project KEY to import it as KEY-\(number).",
                inputLine: line)
        }
        return ("\(prefix)-\(number)", field == .id ? number : nil)
    }

    private func labels(_ fields: [String]) -> [String] {
        let cells = values(fields, .labels)
        // Jira repeats the column, one label each; Bugzilla's keywords are one cell.
        guard flavor == .bugzilla else { return cells.map { $0.replacingOccurrences(of: " ", with: "_") } }
        return cells.flatMap { $0.split(whereSeparator: { $0 == "," || $0 == " " }).map(String.init) }
    }

    private func comments(_ fields: [String], key: String) -> [CommentRecord] {
        values(fields, .comments).enumerated().map { index, text -> CommentRecord in
            // Jira writes "date;author;body".
            let parts = text.split(separator: ";", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, let created = TrackerDate.parse(parts[0]) else {
                return CommentRecord(
                    jiraID: "\(key)-c\(index + 1)", body: text, author: nil, created: nil, updated: nil)
            }
            return CommentRecord(
                jiraID: "\(key)-c\(index + 1)", body: parts[2],
                author: parts[1].isEmpty ? nil : PersonRecord(name: parts[1], displayName: nil), created: created,
                updated: nil)
        }
    }

    private func person(_ name: String?) -> PersonRecord? {
        name.map { PersonRecord(name: $0, displayName: nil) }
    }
}

/// Dates as trackers write them in CSV exports.
public enum TrackerDate {
    /// The zone abbreviations a tracker may write after a time (Bugzilla writes its users'),
    /// as offsets: only those that name one offset wherever they are used (`CST` and `IST`
    /// name several, and are refused).
    private static let zoneAbbreviations: [String: String] = [
        "UTC": "Z", "GMT": "Z", "Z": "Z", "PST": "-08:00", "PDT": "-07:00", "MST": "-07:00", "MDT": "-06:00",
        "EST": "-05:00", "EDT": "-04:00", "CET": "+01:00", "CEST": "+02:00", "EET": "+02:00", "EEST": "+03:00",
        "JST": "+09:00",
    ]
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Parses `15/Apr/11 2:23 AM` (Jira), `2011-04-15 02:23:39` or `2011-04-15 02:23` (Bugzilla,
    /// UTC; seconds may have a fraction, and a zone may follow, apart or not: `UTC`, `GMT`, `Z`,
    /// `+0500`, `+05:00`, or an abbreviation with one meaning such as `PST`), or
    /// anything ``ISO8601Date`` reads; `nil` otherwise. Nothing is rolled over or left out: a
    /// second of 99, a garbled minute or a zone it does not know (`CST`) is `nil`, not a nearby
    /// instant.
    public static func parse(_ text: String) -> Date? {
        let text = text.trimmingCharacters(in: .whitespaces)
        if let date = ISO8601Date.parse(text) { return date }
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        // 2011-04-15 02:23(:39(.750)?)?( UTC| +0000|+00:00)?: ISO 8601 with a space for the T,
        // the zone after the time or apart from it.
        if parts.count == 2 || parts.count == 3, parts[0].contains("-") {
            var time = parts[1]
            var zone = parts.count == 2 ? "Z" : zoneAbbreviations[parts[2].uppercased()] ?? String(parts[2])
            if let attached = time.firstIndex(where: { "+-Zz".contains($0) }) {
                guard parts.count == 2 else { return nil }
                zone = time[attached...].uppercased()
                time = time[..<attached]
            }
            guard zone == "Z" || zone.first == "+" || zone.first == "-" else { return nil }
            // Two digits of hour, as ISO 8601 has them (2:23:39 is 02:23:39).
            let padded = time.prefix { $0 != ":" }.count == 1 ? "0" + time : String(time)
            return ISO8601Date.parse("\(parts[0])T\(padded)\(zone)")
        }
        // 15/Apr/11 2:23 AM
        func number(_ text: Substring) -> Int? {
            text.allSatisfy(\.isASCII) && text.allSatisfy(\.isNumber) ? Int(text) : nil
        }
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
