import Foundation

/// What a user says about a CSV export's columns when its header is not one the importer knows:
/// which column holds which field (`squasherctl import FILE --map key="Issue id" --map
/// created=Opened`), and the project whose key turns numeric IDs into bug keys (`--project KEY`:
/// `123` becomes `KEY-123`).
///
/// A mapped field reads its column only; every other field is looked for under the names Jira's
/// and Bugzilla's own exports give it (see ``CSVBugMapper``).
public struct CSVColumnMapping: Sendable, Hashable {
    /// A field of a bug that a column can hold.
    public enum Field: String, Sendable, CaseIterable, Comparable {
        /// The bug's key (`TIMOB-123`), or a number that the project's key turns into one.
        case key
        /// The tracker's own ID of the bug (Jira's numeric `Issue id`, Bugzilla's `bug_id`).
        case id
        /// The one-line summary.
        case summary
        /// The long description.
        case description
        /// The workflow status.
        case status
        /// The resolution.
        case resolution
        /// The priority.
        case priority
        /// The issue type or severity.
        case type
        /// Labels or keywords (a repeated column, or one split at commas and spaces).
        case labels
        /// When it was created.
        case created
        /// When it was last updated.
        case updated
        /// When it was resolved.
        case resolved
        /// The project's key.
        case project
        /// The project's name (Bugzilla's product).
        case projectName = "project-name"
        /// Components (a repeated column).
        case components
        /// Who reported it.
        case reporter
        /// Who it is assigned to.
        case assignee
        /// Comments (a repeated column, Jira's `date;author;body`).
        case comments

        /// Other names a user may write for a field in `--map`.
        static let aliases: [String: Field] = [
            "title": .summary, "details": .description, "component": .components, "label": .labels,
            "keywords": .labels, "severity": .type, "product": .projectName, "comment": .comments,
            "assigned_to": .assignee, "opened": .created, "changed": .updated,
        ]

        /// The field a `--map` name stands for, in any case; `nil` for none.
        public init?(named name: String) {
            let lowered = name.lowercased()
            guard let field = Field(rawValue: lowered) ?? Self.aliases[lowered] else { return nil }
            self = field
        }

        /// The names `--map` takes, for messages: "key, id, summary, …".
        public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }

        public static func < (lhs: Field, rhs: Field) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }

    /// The column each mapped field is read from, as the header names it.
    public var columns: [Field: String]
    /// The key of the project of every bug of the export, and the prefix of numeric keys.
    public var project: String?

    /// A mapping; empty, it changes nothing.
    public init(columns: [Field: String] = [:], project: String? = nil) {
        self.columns = columns
        self.project = project
    }

    /// Whether it says nothing.
    public var isEmpty: Bool { columns.isEmpty && project == nil }

    /// Reads `FIELD=COLUMN` pairs, as `--map` takes them, and a project key.
    ///
    /// - Throws: ``ImportError`` (`invalidRecord`) naming the pair that is not `FIELD=COLUMN`,
    ///   an unknown field (with the known ones), a field mapped twice, or a project key that
    ///   cannot start a bug key.
    public init(parsing pairs: [String], project: String? = nil) throws {
        let named = try pairs.map { pair -> (field: String, column: String) in
            guard let equals = pair.firstIndex(of: "=") else {
                throw ImportError(
                    .invalidRecord,
                    "--map \(pair) is not FIELD=COLUMN.", advice: "Write it as, for instance, --map key=\"Issue id\".")
            }
            return (
                pair[..<equals].trimmingCharacters(in: .whitespaces),
                pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            )
        }
        try self.init(named: named, project: project)
    }

    /// Reads the columns of fields given by name (`Import.Begin`'s `columns`, or `--map`'s
    /// pairs), and a project key.
    ///
    /// - Throws: ``ImportError`` (`invalidRecord`) naming an unknown field (with the known
    ///   ones), an empty column, a field mapped twice, or a project key that cannot start a
    ///   bug key.
    public init(named: [(field: String, column: String)], project: String? = nil) throws {
        var columns: [Field: String] = [:]
        for (name, column) in named {
            guard let field = Field(named: name) else {
                throw ImportError(
                    .invalidRecord,
                    "--map \(name)=\(column): there is no field '\(name)'. The fields are \(Field.names).")
            }
            guard !column.isEmpty else {
                throw ImportError(
                    .invalidRecord,
                    "--map \(name)= names no column.",
                    advice: "Write the column's name as the header has it after the '='.")
            }
            if let earlier = columns[field], earlier.lowercased() != column.lowercased() {
                throw ImportError(
                    .invalidRecord, "--map maps \(field.rawValue) twice, to '\(earlier)' and to '\(column)'.",
                    advice: "Keep one.")
            }
            columns[field] = column
        }
        if let project {
            try Self.checkProjectKey(project)
        }
        self.init(columns: columns, project: project)
    }

    /// Refuses a project key that cannot start a bug key (`KEY-123`).
    static func checkProjectKey(_ key: String) throws {
        let valid =
            !key.isEmpty && key.count <= 40
            && key.unicodeScalars.allSatisfy {
                ("A"..."Z").contains($0) || ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_"
            } && key.unicodeScalars.first.map { !("0"..."9").contains($0) } == true
        guard valid else {
            throw ImportError(
                .invalidRecord,
                "--project '\(key)' is not a project key.",
                advice: "Use letters, digits and underscores, starting with a letter (TIMOB), at most 40 characters."
            )
        }
    }

    /// The mapping as squasherctl takes it and a job records it: `key="Issue id" created="Opened"
    /// project=TIMOB`, fields in their usual order.
    public var description: String {
        var parts = columns.sorted { $0.key < $1.key }.map { "\($0.key.rawValue)=\(Self.quoted($0.value))" }
        if let project { parts.append("--project \(project)") }
        return parts.joined(separator: " ")
    }

    /// A column name as a shell would take it back.
    static func quoted(_ name: String) -> String {
        name.allSatisfy { $0.isLetter || $0.isNumber || "_-/.".contains($0) }
            ? name : "\"" + name.replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}
