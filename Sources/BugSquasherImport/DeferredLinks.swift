public import BugSquasherGraph

/// The links of a chunk's bugs and comments to people, components and projects whose rows
/// another save is writing, left until that save has committed.
///
/// An importer upserts the next chunk while the previous one saves. When both name the same
/// person (a reporter of both), the next chunk cannot read that person yet: it is being
/// inserted or changed. Rather than wait for the save before upserting anything, the upsert
/// leaves those links aside (``BugUpserter/upsert(_:keys:validated:deferring:in:)``) and makes
/// them once the save is in (``BugUpserter/link(_:in:)``), which takes a fetch or two instead of
/// the whole upsert. Why: docs/DESIGN-NOTES.md, "Shared objects are linked after the save before".
public struct DeferredLinks: Sendable {
    /// One link waiting, with the record that names its object.
    public enum Link: Sendable {
        case project(bug: ObjectID, ProjectRecord)
        case reporter(bug: ObjectID, PersonRecord)
        case assignee(bug: ObjectID, PersonRecord)
        case author(comment: ObjectID, PersonRecord)
        /// All of a bug's components, when one of them waits: which ones to remove depends on
        /// all of them.
        case components(bug: ObjectID, [Component], isNew: Bool)
    }

    /// One of a bug's components, in a ``Link/components(bug:_:isNew:)`` link.
    public enum Component: Sendable {
        /// One the upsert found or inserted.
        case object(ObjectID)
        /// One whose link waits.
        case named(String)
    }

    /// The keys of the objects the links name, by entity.
    public var keys: UpsertKeys
    /// The links, in the order of the records.
    public var links: [Link]

    /// Whether no link waits.
    public var isEmpty: Bool { links.isEmpty }
}
