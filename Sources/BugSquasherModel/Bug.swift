public import BugSquasherGraph
public import Foundation

/// One issue, unique by ``key`` (`TIMOB-100`).
public final class Bug: ManagedObject {
    public override class var entityName: String { "Bug" }

    /// The issue key, such as `TIMOB-100`.
    public var key: String {
        get { get("key") ?? "" }
        set { set("key", newValue) }
    }
    /// The numeric ID in the tracker it came from.
    public var jiraID: String? {
        get { get("jiraID") }
        set { set("jiraID", newValue) }
    }
    /// The summary line.
    public var title: String {
        get { get("title") ?? "" }
        set { set("title", newValue) }
    }
    /// The description (Jira markup).
    public var details: String? {
        get { get("details") }
        set { set("details", newValue) }
    }
    /// The workflow status (`Open`, `Closed`, …).
    public var status: String {
        get { get("status") ?? "" }
        set { set("status", newValue) }
    }
    /// The resolution (`Fixed`, `Won't Fix`, …), if resolved.
    public var resolution: String? {
        get { get("resolution") }
        set { set("resolution", newValue) }
    }
    /// The priority (`High`, `Medium`, …).
    public var priority: String? {
        get { get("priority") }
        set { set("priority", newValue) }
    }
    /// The issue type (`Bug`, `Story`, …).
    public var type: String? {
        get { get("type") }
        set { set("type", newValue) }
    }
    /// The labels (stored space-separated: Jira labels never contain spaces).
    public var labels: [String] {
        get { (get("labels", as: String.self) ?? "").split(separator: " ").map(String.init) }
        set { set("labels", newValue.joined(separator: " ")) }
    }
    /// When the issue was created.
    public var created: Date? {
        get { get("created") }
        set { set("created", newValue) }
    }
    /// When the issue last changed.
    public var updated: Date? {
        get { get("updated") }
        set { set("updated", newValue) }
    }
    /// When the issue was resolved.
    public var resolved: Date? {
        get { get("resolved") }
        set { set("resolved", newValue) }
    }
    /// The digest of the source bytes the bug was last imported from (see docs/DESIGN-NOTES.md,
    /// "Unchanged records are skipped"); `nil` once it is edited, or when it came from a source
    /// without one. An import meeting the same bytes for its key again skips them.
    public var sourceDigest: Int64? {
        get { get("sourceDigest") }
        set { set("sourceDigest", newValue) }
    }

    /// The project.
    public var project: Project? {
        get { related("project") }
        set { setRelated(newValue, for: "project") }
    }
    /// Who reported it.
    public var reporter: Person? {
        get { related("reporter") }
        set { setRelated(newValue, for: "reporter") }
    }
    /// Who it is assigned to.
    public var assignee: Person? {
        get { related("assignee") }
        set { setRelated(newValue, for: "assignee") }
    }
    /// Its components.
    public var components: [Component] { relatedObjects("components") }
    /// Its comments (deleted with the bug).
    public var comments: [Comment] { relatedObjects("comments") }
}

/// A comment on a bug, unique by ``jiraID``.
public final class Comment: ManagedObject {
    public override class var entityName: String { "Comment" }

    /// The comment's ID in the tracker it came from.
    public var jiraID: String {
        get { get("jiraID") ?? "" }
        set { set("jiraID", newValue) }
    }
    /// The text (Jira markup).
    public var body: String {
        get { get("body") ?? "" }
        set { set("body", newValue) }
    }
    /// When it was written.
    public var created: Date? {
        get { get("created") }
        set { set("created", newValue) }
    }
    /// When it was last edited.
    public var updated: Date? {
        get { get("updated") }
        set { set("updated", newValue) }
    }
    /// The bug it belongs to.
    public var bug: Bug? {
        get { related("bug") }
        set { setRelated(newValue, for: "bug") }
    }
    /// Who wrote it.
    public var author: Person? {
        get { related("author") }
        set { setRelated(newValue, for: "author") }
    }
}

/// A component, shared by bugs and unique by ``name``.
public final class Component: ManagedObject {
    public override class var entityName: String { "Component" }

    /// The component's name.
    public var name: String {
        get { get("name") ?? "" }
        set { set("name", newValue) }
    }
    /// The bugs filed against it.
    public var bugs: [Bug] { relatedObjects("bugs") }
}

/// A person (reporter, assignee, comment author), unique by ``name``.
public final class Person: ManagedObject {
    public override class var entityName: String { "Person" }

    /// The account name.
    public var name: String {
        get { get("name") ?? "" }
        set { set("name", newValue) }
    }
    /// The display name.
    public var displayName: String? {
        get { get("displayName") }
        set { set("displayName", newValue) }
    }
}

/// A project, unique by ``key`` (`TIMOB`); cannot be deleted while it has bugs.
public final class Project: ManagedObject {
    public override class var entityName: String { "Project" }

    /// The project key.
    public var key: String {
        get { get("key") ?? "" }
        set { set("key", newValue) }
    }
    /// The project's name.
    public var name: String? {
        get { get("name") }
        set { set("name", newValue) }
    }
    /// The project's bugs.
    public var bugs: [Bug] { relatedObjects("bugs") }
}
