public import BugSquasherGraph

/// The bug model: `Bug`, `Comment`, `Component`, `Person` and `Project`, with fields that follow
/// Jira's REST representation of an issue, and the daemon's `ImportJob` and `ImportReject`.
///
/// - `Bug` is unique by `key`; it belongs to a `Project`, has a `reporter` and an `assignee`, shared
///   `components`, and `comments` deleted with it (cascade).
/// - `Comment` is unique by `jiraID`, with one bug and one `author`; `Component`, `Person` and
///   `Project` are shared and upserted by `name`, `name` and `key`.
/// - A job's progress is saved in the same transaction as each chunk it imports, so a restart
///   resumes exactly there.
public enum BugModel {
    /// The entities.
    public static let entities: [EntityDescription] = [
        EntityDescription(
            name: "Bug", objectType: Bug.self, uniqueKey: "key",
            attributes: [
                .attribute("key", .string),
                .attribute("jiraID", .string, optional: true),
                .attribute("title", .string),
                .attribute("details", .string, optional: true),
                .attribute("status", .string, default: "Open"),
                .attribute("resolution", .string, optional: true),
                .attribute("priority", .string, optional: true),
                .attribute("type", .string, optional: true),
                .attribute("labels", .string, default: ""),
                .attribute("created", .date, optional: true),
                .attribute("updated", .date, optional: true),
                .attribute("resolved", .date, optional: true),
                .attribute("sourceDigest", .int64, optional: true),
            ],
            relationships: [
                .toOne("project", "Project", inverse: "bugs"),
                .toOne("reporter", "Person", inverse: "reported"),
                .toOne("assignee", "Person", inverse: "assigned"),
                .toMany("components", "Component", inverse: "bugs"),
                .toMany("comments", "Comment", inverse: "bug", deleteRule: .cascade),
            ]
        ),
        EntityDescription(
            name: "Comment", objectType: Comment.self, uniqueKey: "jiraID",
            attributes: [
                .attribute("jiraID", .string),
                .attribute("body", .string),
                .attribute("created", .date, optional: true),
                .attribute("updated", .date, optional: true),
            ],
            relationships: [
                .toOne("bug", "Bug", inverse: "comments"),
                .toOne("author", "Person", inverse: "comments"),
            ]
        ),
        EntityDescription(
            name: "Component", objectType: Component.self, uniqueKey: "name",
            attributes: [.attribute("name", .string)],
            relationships: [.toMany("bugs", "Bug", inverse: "components")]
        ),
        EntityDescription(
            name: "Person", objectType: Person.self, uniqueKey: "name",
            attributes: [
                .attribute("name", .string),
                .attribute("displayName", .string, optional: true),
            ],
            relationships: [
                .toMany("reported", "Bug", inverse: "reporter"),
                .toMany("assigned", "Bug", inverse: "assignee"),
                .toMany("comments", "Comment", inverse: "author"),
            ]
        ),
        EntityDescription(
            name: "Project", objectType: Project.self, uniqueKey: "key",
            attributes: [
                .attribute("key", .string),
                .attribute("name", .string, optional: true),
            ],
            relationships: [.toMany("bugs", "Bug", inverse: "project", deleteRule: .deny)]
        ),
        EntityDescription(
            name: "ImportJob", objectType: ImportJob.self, uniqueKey: "jobID",
            attributes: [
                .attribute("jobID", .string),
                .attribute("name", .string),
                .attribute("format", .string),
                .attribute("state", .string),
                .attribute("chunkSize", .int64, default: 1_000),
                .attribute("recordsRead", .int64, default: 0),
                .attribute("imported", .int64, default: 0),
                .attribute("rejected", .int64, default: 0),
                .attribute("byteOffset", .int64, default: 0),
                .attribute("linesRead", .int64, default: 0),
                .attribute("bytesTotal", .int64, default: 0),
                .attribute("created", .date, optional: true),
                .attribute("finished", .date, optional: true),
                .attribute("error", .string, optional: true),
                .attribute("columns", .string, optional: true),
                .attribute("owner", .string, optional: true),
            ],
            relationships: [.toMany("rejects", "ImportReject", inverse: "job", deleteRule: .cascade)]
        ),
        EntityDescription(
            name: "ImportReject", objectType: ImportReject.self,
            attributes: [
                .attribute("line", .int64),
                .attribute("reason", .string),
            ],
            relationships: [.toOne("job", "ImportJob", inverse: "rejects")]
        ),
    ]

    /// The model built from ``entities``.
    public static let model: ManagedObjectModel = {
        do { return try ManagedObjectModel(entities: entities) } catch {
            fatalError("The bug model is inconsistent: \(error)")
        }
    }()
}
