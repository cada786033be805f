import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherStack
import Foundation
import Testing

// Swift Testing has its own `Bug` and `Comment`; these names mean the model's classes here.
private typealias Bug = BugSquasherModel.Bug
private typealias Comment = BugSquasherModel.Comment

@Suite struct BugUpserterTests {
    private let upserter = BugUpserter()

    private func makeContext() throws -> ObjectContext {
        ObjectContext(coordinator: try StoreCoordinator(model: BugModel.model, store: InMemoryStore()))
    }

    /// A context whose store holds the sample records, saved; new bugs inserted as rows or as
    /// objects (``BugUpserter/insertsRows``).
    private func savedSampleContext(insertsRows: Bool = false) async throws -> ObjectContext {
        let context = try makeContext()
        let (upserter, records) = (BugUpserter(insertsRows: insertsRows), sampleRecords())
        _ = try await context.perform { context in try upserter.upsert(records, in: context) }
        try await context.save()
        return context
    }

    private func sampleRecords() -> [BugRecord] {
        let alice = PersonRecord(name: "user-alice", displayName: "Alice")
        let bob = PersonRecord(name: "user-bob", displayName: "Bob")
        return [
            BugRecord(
                key: "TIMOB-1", jiraID: "1", title: "Crash on launch", details: "Stack trace attached.",
                status: "Open", priority: "High", type: "Bug", labels: ["ios", "crash"],
                created: ISO8601Date.parse("2011-04-15T02:23:39.000+0000"),
                updated: ISO8601Date.parse("2011-04-16T02:23:39.000+0000"),
                project: ProjectRecord(key: "TIMOB", name: "Titanium SDK"), components: ["iOS", "Runtime"],
                reporter: alice, assignee: bob,
                comments: [
                    CommentRecord(
                        jiraID: "c1", body: "Seen it too.", author: bob,
                        created: ISO8601Date.parse("2011-04-15T03:00:00Z")),
                    CommentRecord(jiraID: "c2", body: "Fixed.", author: alice),
                ]
            ),
            BugRecord(
                key: "TIMOB-2", jiraID: "2", title: "Typo in docs", status: "Closed", resolution: "Fixed",
                priority: nil, type: "Story", resolved: ISO8601Date.parse("2011-05-01"),
                project: ProjectRecord(key: "TIMOB", name: "Titanium SDK"), components: [], reporter: bob
            ),
            BugRecord(
                key: "ALOY-1", title: "logger.js failing", status: "Open",
                project: ProjectRecord(key: "ALOY", name: "Alloy"), components: ["Runtime"],
                comments: [CommentRecord(jiraID: "c3", body: "", author: PersonRecord(name: "user-carol"))]
            ),
        ]
    }

    /// A stack on a SQLite store in a fresh directory, and what removes the directory.
    private func sqliteStack(_ name: String) throws -> (stack: PersistentStack, remove: () -> Void) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let stack = try PersistentStack(
            model: BugModel.model, storeURL: directory.appendingPathComponent("bugs.sqlite"))
        return (stack, { try? FileManager.default.removeItem(at: directory) })
    }

    private func count<T: ManagedObject>(_ type: T.Type, in context: ObjectContext) async throws -> Int {
        try await context.perform { context in try context.count(FetchRequest<T>()) }
    }

    @Test(arguments: [false, true])
    func insertsThenLeavesUnchangedRecordsClean(insertsRows: Bool) async throws {
        let context = try makeContext()
        let upserter = BugUpserter(insertsRows: insertsRows)
        let records = sampleRecords()

        let first = try await context.perform { context in try upserter.upsert(records, in: context) }
        #expect(first == UpsertSummary(inserted: 3))
        try await context.save()
        #expect(try await count(Bug.self, in: context) == 3)
        #expect(try await count(Project.self, in: context) == 2)
        #expect(try await count(Person.self, in: context) == 3)
        #expect(try await count(Component.self, in: context) == 2)
        #expect(try await count(Comment.self, in: context) == 3)

        let second = try await context.perform { context in try upserter.upsert(records, in: context) }
        #expect(second == UpsertSummary(unchanged: 3))
        #expect(await context.hasChanges == false)
    }

    @Test func reimportInAFreshContextChangesNothing() async throws {
        let coordinator = try StoreCoordinator(model: BugModel.model, store: InMemoryStore())
        let upserter = self.upserter
        let records = sampleRecords()
        let writer = ObjectContext(coordinator: coordinator)
        _ = try await writer.perform { context in try upserter.upsert(records, in: context) }
        try await writer.save()

        let fresh = ObjectContext(coordinator: coordinator)
        let summary = try await fresh.perform { context in try upserter.upsert(records, in: context) }
        #expect(summary == UpsertSummary(unchanged: 3))
        #expect(await fresh.hasChanges == false)
    }

    @Test func changingOneTitleUpdatesExactlyOneBug() async throws {
        let context = try makeContext()
        let upserter = self.upserter
        var records = sampleRecords()
        _ = try await context.perform { [records] context in try upserter.upsert(records, in: context) }
        try await context.save()

        records[1].title = "Typo in the docs"
        let summary = try await context.perform { [records] context in try upserter.upsert(records, in: context) }
        #expect(summary == UpsertSummary(updated: 1, unchanged: 2))
        let (updatedKeys, insertedCount) = await context.perform { context in
            (context.updatedObjects.compactMap { ($0 as? Bug)?.key }, context.insertedObjects.count)
        }
        #expect(updatedKeys == ["TIMOB-2"])
        #expect(insertedCount == 0)
        try await context.save()
        let title = try await context.perform { context in
            try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-2")).first?.title
        }
        #expect(title == "Typo in the docs")
    }

    @Test(arguments: [false, true])
    func setsFieldsRelationshipsAndComments(insertsRows: Bool) async throws {
        let context = try await savedSampleContext(insertsRows: insertsRows)

        struct Snapshot: Sendable, Equatable {
            var title: String, status: String, priority: String?, labels: [String], created: Date?
            var project: String?, projectName: String?, reporter: String?, assignee: String?, assigneeName: String?
            var components: [String], comments: [String], commentAuthors: [String?]
        }
        let snapshot = try await context.perform { context -> Snapshot? in
            guard let bug = try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1")).first else {
                return nil
            }
            let comments = bug.comments.sorted { $0.jiraID < $1.jiraID }
            return Snapshot(
                title: bug.title, status: bug.status, priority: bug.priority, labels: bug.labels, created: bug.created,
                project: bug.project?.key, projectName: bug.project?.name, reporter: bug.reporter?.name,
                assignee: bug.assignee?.name, assigneeName: bug.assignee?.displayName,
                components: bug.components.map(\.name).sorted(), comments: comments.map(\.body),
                commentAuthors: comments.map { $0.author?.name }
            )
        }
        #expect(
            snapshot
                == Snapshot(
                    title: "Crash on launch", status: "Open", priority: "High", labels: ["ios", "crash"],
                    created: ISO8601Date.parse("2011-04-15T02:23:39.000+0000"), project: "TIMOB",
                    projectName: "Titanium SDK",
                    reporter: "user-alice", assignee: "user-bob", assigneeName: "Bob",
                    components: ["Runtime", "iOS"], comments: ["Seen it too.", "Fixed."],
                    commentAuthors: ["user-bob", "user-alice"]
                ))
    }

    /// Jira JSON with some fields, a CSV with some columns, a partial NDJSON record.
    @Test("a partial record changes only the fields it carries; an explicit null clears")
    func partialRecordsLeaveTheRestAlone() async throws {
        let context = try await savedSampleContext()
        let upserter = self.upserter

        struct Seen: Sendable, Equatable {
            var title: String, status: String, priority: String?, details: String?, assignee: String?,
                components: [String], created: Date?
        }
        func seen() async throws -> Seen? {
            try await context.perform { context -> Seen? in
                guard let bug = try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1")).first else {
                    return nil
                }
                return Seen(
                    title: bug.title, status: bug.status, priority: bug.priority, details: bug.details,
                    assignee: bug.assignee?.name,
                    components: bug.components.map(\.name).sorted(), created: bug.created)
            }
        }
        let before = try #require(try await seen())

        // Jira: a search with fields=summary.
        let jira = try JiraIssueDecoder().decode(
            Data(#"{"id":"1","key":"TIMOB-1","fields":{"summary":"renamed"}}"#.utf8), line: 1)
        // A Jira CSV export of two columns.
        let csv = try CSVBugMapper(header: ["Issue key", "Status"], flavor: .jira).record(
            ["TIMOB-1", "Reopened"], line: 2)
        // A BugSquasher record that sets the priority to none, explicitly.
        let ndjson = try Array(#"{"key":"TIMOB-1","project":{"key":"TIMOB"},"priority":null}"#.utf8)
            .withUnsafeBufferPointer { try BugRecord(json: $0) }
        for record in [jira, csv, ndjson] {
            _ = try await context.perform { context in try upserter.upsert([record], in: context) }
            try await context.save()
        }
        var expected = before
        expected.title = "renamed"
        expected.status = "Reopened"
        expected.priority = nil
        #expect(try await seen() == expected)
        // Through a job's spool (JSON) and back, a record keeps what it leaves out.
        let spooled = try JSONEncoder().encode(csv)
        let back = try [UInt8](spooled).withUnsafeBufferPointer { try BugRecord(json: $0) }
        #expect(back.absent == csv.absent && back.absent.contains(.title) && !back.absent.contains(.status))
    }

    @Test func makesComponentsExactlyTheRecordsSet() async throws {
        let context = try makeContext()
        let upserter = self.upserter
        var records = sampleRecords()
        _ = try await context.perform { [records] context in try upserter.upsert(records, in: context) }
        try await context.save()

        records[0].components = ["Runtime", "Android"]
        let summary = try await context.perform { [records] context in try upserter.upsert(records, in: context) }
        #expect(summary == UpsertSummary(updated: 1, unchanged: 2))
        try await context.save()
        let names = try await context.perform { context in
            try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1")).first?.components.map(\.name)
                .sorted()
        }
        #expect(names == ["Android", "Runtime"])
        #expect(try await count(Component.self, in: context) == 3)  // "iOS" is kept, only unlinked
    }

    /// A key named twice in one chunk gets both records, in order, as it would from two chunks:
    /// the later record's fields over the earlier's, the fields it lacks kept, and the comments
    /// of both. Where chunk boundaries fall must not change what an import stores.
    @Test(arguments: [false, true])
    func repeatedKeysAreAppliedInOrder(insertsRows: Bool) async throws {
        let context = try makeContext()
        let upserter = BugUpserter(insertsRows: insertsRows)
        var first = sampleRecords()[0]
        first.comments = [CommentRecord(jiraID: "rk-1", body: "first")]
        var second = first
        second.title = "Crash on launch (again)"
        // Fields the second record does not carry: they keep the first record's values.
        second.priority = nil
        second.components = []
        second.absent = [.priority, .components]
        second.comments = [CommentRecord(jiraID: "rk-2", body: "second")]
        let chunk = [first] + sampleRecords().dropFirst() + [second]
        let summary = try await context.perform { context in try upserter.upsert(chunk, in: context) }
        #expect(summary == UpsertSummary(inserted: 3, repeated: 1))
        try await context.save()
        let (title, priority, components, comments) = try await context.perform { context in
            let bug = try #require(try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1")).first)
            return (bug.title, bug.priority, bug.components.map(\.name).sorted(), bug.comments.map(\.jiraID).sorted())
        }
        #expect(title == "Crash on launch (again)")
        #expect(priority == "High")
        #expect(components == first.components.sorted())
        #expect(comments == ["rk-1", "rk-2"])

        // Once stored, the same two records in one chunk update the bug once.
        var third = second
        third.title = "Crash on launch (third)"
        let again = try await context.perform { [second, third] context in
            try upserter.upsert([second, third], in: context)
        }
        #expect(again == UpsertSummary(updated: 1, repeated: 1))
    }

    /// "CAF\u{C9}-1" and "CAFE\u{301}-1" read the same, and Swift's `String` calls them equal,
    /// but the store holds them as two keys: one chunk naming both must write two bugs, not let
    /// one replace the other. A title changed to another Unicode form of itself is saved.
    @Test func keysAndTextAreComparedByteForByteAsTheStoreDoes() async throws {
        let (stack, remove) = try sqliteStack("upsert-unicode")
        defer { remove() }
        let upserter = self.upserter
        let composed = "CAF\u{C9}-1"
        let decomposed = "CAFE\u{301}-1"
        #expect(composed == decomposed)  // what the upserter must not rely on
        let project = ProjectRecord(key: "CAF\u{C9}")
        let chunk = [
            BugRecord(
                key: composed, title: "composed", status: "Open", project: project,
                components: ["R\u{E9}seau", "Re\u{301}seau"]),
            BugRecord(key: decomposed, title: "decomposed", status: "Open", project: ProjectRecord(key: "CAFE\u{301}")),
        ]

        let importer = stack.importerContext()
        let summary = try await importer.perform { context in try upserter.upsert(chunk, in: context) }
        #expect(summary == UpsertSummary(inserted: 2))
        try await importer.save()

        let reader = stack.temporaryContext()
        let stored = try await reader.perform { context in
            try context.fetch(FetchRequest<Bug>()).map {
                ($0.key, $0.title, $0.project?.key ?? "", $0.components.count)
            }
        }
        #expect(stored.count == 2)
        let byTitle = Dictionary(uniqueKeysWithValues: stored.map { ($0.1, $0) })
        #expect(byTitle["composed"].map { Array($0.0.utf8) } == Array(composed.utf8))
        #expect(byTitle["decomposed"].map { Array($0.0.utf8) } == Array(decomposed.utf8))
        #expect(byTitle["composed"]?.3 == 2)
        #expect(try await count(Project.self, in: reader) == 2)
        #expect(try await count(Component.self, in: reader) == 2)

        // The same text in the other form is a change, and it is saved.
        var composedTitle = chunk[0]
        var decomposedTitle = chunk[0]
        composedTitle.title = "Caf\u{E9}"
        decomposedTitle.title = "Cafe\u{301}"
        let first = try await importer.perform { [composedTitle] context in
            try upserter.upsert([composedTitle], in: context)
        }
        #expect(first == UpsertSummary(updated: 1))
        try await importer.save()
        let second = try await importer.perform { [decomposedTitle] context in
            try upserter.upsert([decomposedTitle], in: context)
        }
        #expect(second == UpsertSummary(updated: 1))
        try await importer.save()
        let title = try await stack.temporaryContext().perform { context in
            try context.fetch(FetchRequest<Bug>(predicate: Key("key") == .string(composed))).map(\.title)
        }
        #expect(title.map { Array($0.utf8) } == [Array("Cafe\u{301}".utf8)])
    }

    /// The importer upserts a chunk while the one before saves. People, components and projects
    /// the one before writes are left aside and linked after its save: the result is what the
    /// two chunks give one after the other, with no second insert of a shared object.
    @Test("links to shared objects another chunk writes wait for its save, and end the same", arguments: [false, true])
    func deferredLinks(insertsRows: Bool) async throws {
        let (stack, remove) = try sqliteStack("upsert-deferred")
        defer { remove() }
        let upserter = BugUpserter(insertsRows: insertsRows)
        let first = [sampleRecords()[0]]
        let second = [
            BugRecord(
                key: "TIMOB-3", title: "Web view leaks", status: "Open",
                project: ProjectRecord(key: "TIMOB", name: "Titanium SDK"), components: ["Runtime", "Web"],
                reporter: PersonRecord(name: "user-alice", displayName: "Alice B."),
                assignee: PersonRecord(name: "user-dave", displayName: "Dave"),
                comments: [CommentRecord(jiraID: "c9", body: "Confirmed.", author: PersonRecord(name: "user-bob"))]),
            // "Web" again, not shared: the one object both bugs link to.
            BugRecord(
                key: "TIMOB-4", title: "Web view blank", status: "Open", project: ProjectRecord(key: "TIMOB"),
                components: ["Web"]),
        ]

        let one = stack.importerContext()
        let written = try await one.perform { context in
            _ = try upserter.upsert(first, in: context)
            return UpsertKeys(writtenIn: context)
        }
        let shared = written.common(with: UpsertKeys(second), in: BugUpserter.sharedEntities)
        #expect(shared.byEntity["Person"]?.map(\.string).sorted() == ["user-alice", "user-bob"])
        #expect(shared.byEntity["Component"]?.map(\.string) == ["Runtime"])
        #expect(shared.byEntity["Project"]?.map(\.string) == ["TIMOB"])
        #expect(!written.overlaps(UpsertKeys(second), in: ["Bug", "Comment"]))

        // The second chunk is upserted before the first is saved.
        let two = stack.importerContext()
        let links = try await two.perform { context in
            try upserter.upsert(second, deferring: shared, in: context)
        }
        #expect(links.links.count == 5)  // 2 projects, a reporter, components, the comment's author
        let didSave = try #require(try await one.save())
        try await two.perform { context in
            _ = context.merge(didSave)
            try upserter.link(links, in: context)
        }
        _ = try await two.save()

        let reader = stack.temporaryContext()
        #expect(try await count(Person.self, in: reader) == 3)
        #expect(try await count(Component.self, in: reader) == 3)
        #expect(try await count(Project.self, in: reader) == 1)
        let stored = try await reader.perform { context in
            let bug = try #require(try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-3")).first)
            return (
                bug.reporter?.displayName, bug.assignee?.name, bug.project?.key, bug.components.map(\.name).sorted(),
                bug.comments.first?.author?.name
            )
        }
        #expect(stored.0 == "Alice B.")
        #expect(stored.1 == "user-dave")
        #expect(stored.2 == "TIMOB")
        #expect(stored.3 == ["Runtime", "Web"])
        #expect(stored.4 == "user-bob")
    }

    /// New bugs and comments inserted as rows, without objects, are saved and announced as the
    /// same bugs and comments inserted as objects: the same rows, links and versions, and a
    /// did-save naming the same objects, with the shared objects they join as updated.
    @Test("new bugs inserted as rows save and announce what objects would")
    func rowsSaveWhatObjectsWould() async throws {
        struct Saved: Equatable {
            var inserted: [String: Int]
            var updated: [String: [String]]
            var bugs: [String]
        }
        func importSample(insertsRows: Bool) async throws -> Saved {
            let coordinator = try StoreCoordinator(model: BugModel.model, store: InMemoryStore())
            let seed = ObjectContext(coordinator: coordinator)
            // An existing project and person, which the new bugs join.
            try await seed.perform { context in
                context.insert(Project.self).key = "TIMOB"
                context.insert(Person.self).name = "user-bob"
                try context.saveToStore()
            }
            let context = ObjectContext(coordinator: coordinator)
            let upserter = BugUpserter(insertsRows: insertsRows)
            let records = sampleRecords()
            let rows = try await context.perform { context in
                _ = try upserter.upsert(records, in: context)
                return (context.insertedRows.count, UpsertKeys(writtenIn: context).byEntity["Bug"]?.count)
            }
            #expect(rows.0 == (insertsRows ? 6 : 0))  // 3 bugs, 3 comments
            #expect(rows.1 == 3)
            // Nothing saved would fail the comparison below.
            let didSave = try await context.save() ?? DidSave(token: .zero, storeIdentifier: "")
            #expect(didSave.objectIDs.allSatisfy { !$0.isTemporary })
            let bugs = try await ObjectContext(coordinator: coordinator).perform { context in
                try context.fetch(FetchRequest<Bug>(sort: [Key("key").ascending])).map { bug in
                    let comments = bug.comments.map { "\($0.jiraID):\($0.author?.name ?? "-")" }.sorted()
                    return
                        "\(bug.key) v\(bug.snapshotVersion) \(bug.project?.key ?? "-") \(bug.reporter?.name ?? "-") \(bug.assignee?.name ?? "-") \(bug.components.map(\.name).sorted()) \(comments) \(bug.labels)"
                }
            }
            return Saved(
                inserted: Dictionary(grouping: didSave.inserted, by: \.objectID.entityName).mapValues(\.count),
                updated: Dictionary(
                    uniqueKeysWithValues: didSave.updated.map {
                        ("\($0.objectID.entityName) v\($0.version)", $0.changedKeys.sorted())
                    }),
                bugs: bugs)
        }
        let asObjects = try await importSample(insertsRows: false)
        let asRows = try await importSample(insertsRows: true)
        #expect(asRows == asObjects)
        #expect(asRows.inserted == ["Bug": 3, "Comment": 3, "Project": 1, "Person": 2, "Component": 2])
        #expect(asRows.updated["Project v2"]?.contains("bugs") == true)
    }

    /// A key the caller found absent is not looked up: the bug is inserted. Should it exist after
    /// all, the save fails on the unique key (the importer then saves the chunk's records one by
    /// one, looking each up), never two bugs with one key.
    @Test("bugs named absent are inserted without a lookup; one that exists fails the save", arguments: [false, true])
    func absentBugs(insertsRows: Bool) async throws {
        let coordinator = try StoreCoordinator(model: BugModel.model, store: InMemoryStore())
        let upserter = BugUpserter(insertsRows: insertsRows)
        let records = sampleRecords()
        let absent = Set(records.map { StoredText($0.key) })
        let first = ObjectContext(coordinator: coordinator)
        let summary = try await first.perform { context in
            try upserter.upsert(records, absentBugs: absent, in: context)
        }
        #expect(summary == UpsertSummary(inserted: 3))
        try await first.save()

        let second = ObjectContext(coordinator: coordinator)
        _ = try await second.perform { context in try upserter.upsert(records, absentBugs: absent, in: context) }
        let failure = await #expect(throws: GraphError.self) { try await second.save() }
        #expect(failure?.code == .constraintViolation)
        #expect(try await count(Bug.self, in: ObjectContext(coordinator: coordinator)) == 3)
    }

    /// The comments of bugs named absent are not looked up either (on a first import, thousands
    /// a chunk): a comment that exists under another bug — an issue moved to another project
    /// keeps its comments' IDs — fails the save on its unique key, and the same records upserted
    /// without `absentBugs` move it.
    @Test("comments of bugs named absent are not looked up; one under another bug fails the save")
    func absentBugsComments() async throws {
        let coordinator = try StoreCoordinator(model: BugModel.model, store: InMemoryStore())
        let upserter = BugUpserter(insertsRows: true)
        let first = ObjectContext(coordinator: coordinator)
        _ = try await first.perform { context in try upserter.upsert(self.sampleRecords(), in: context) }
        try await first.save()

        var moved = sampleRecords()[0]
        moved.key = "MOVED-1"
        let second = ObjectContext(coordinator: coordinator)
        _ = try await second.perform { [moved] context in
            try upserter.upsert([moved], absentBugs: [StoredText("MOVED-1")], in: context)
        }
        let failure = await #expect(throws: GraphError.self) { try await second.save() }
        #expect(failure?.code == .constraintViolation)

        let third = ObjectContext(coordinator: coordinator)
        _ = try await third.perform { [moved] context in try upserter.upsert([moved], in: context) }
        try await third.save()
        let owners = try await ObjectContext(coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Comment>()).map { "\($0.jiraID)=\($0.bug?.key ?? "-")" }.sorted()
        }
        #expect(owners.filter { $0.hasPrefix("c1=") || $0.hasPrefix("c2=") } == ["c1=MOVED-1", "c2=MOVED-1"])
    }

    @Test("labels keep plain text; whitespace of any kind becomes _, empty and repeated ones go")
    func labels() async throws {
        let context = try makeContext()
        let upserter = self.upserter
        var record = sampleRecords()[0]
        record.labels = ["ios", "needs triage", "no\u{A0}break", "", "ios", "tab\there", "caf\u{E9}"]
        _ = try await context.perform { [record] context in try upserter.upsert([record], in: context) }
        let labels = try await context.perform { context in
            try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1")).first?.labels
        }
        #expect(labels == ["ios", "needs_triage", "no_break", "tab_here", "caf\u{E9}"])
    }

    @Test func refusesARecordWithAnEmptyOrBlankKeyAndChangesNothing() async throws {
        let context = try makeContext()
        let upserter = self.upserter
        let blank = [
            BugRecord(key: "", title: "?", status: "Open", project: ProjectRecord(key: "TIMOB")),
            BugRecord(key: " \t\u{3000}", title: "?", status: "Open", project: ProjectRecord(key: "TIMOB")),
            BugRecord(key: "TIMOB-9", title: "?", status: "Open", project: ProjectRecord(key: "  ")),
            BugRecord(
                key: "TIMOB-9", title: "?", status: "Open", project: ProjectRecord(key: "TIMOB"),
                reporter: PersonRecord(name: " ")),
        ]
        for (record, what) in zip(blank, ["key", "key", "project key", "person name"]) {
            let chunk = sampleRecords() + [record]
            let error = await #expect(throws: ImportError.self) {
                _ = try await context.perform { context in try upserter.upsert(chunk, in: context) }
            }
            #expect(error?.code == .invalidRecord)
            #expect(
                error?.message.contains("Record 3 (key \"\(record.key)\") has an empty or blank \(what)") == true,
                "\(String(describing: error))")
            #expect(await context.hasChanges == false)
        }
    }

    /// No lookup would find the bug; a space inside a key is fine.
    @Test("a key with spaces around it or a control character in it is refused")
    func refusesKeysNoLookupWouldFind() throws {
        for key in [" TIMOB-1", "TIMOB-1\t", "\u{A0}TIMOB-1", "TIMOB\u{1}-1", "TIMOB-1\u{85}", "TIMOB-1\u{3000}"] {
            let record = BugRecord(key: key, title: "?", status: "Open", project: ProjectRecord(key: "TIMOB"))
            let error = #expect(throws: ImportError.self, "\(key.debugDescription)") {
                try BugUpserter.validate(record, at: 4)
            }
            #expect(
                error?.message.contains(
                    "Record 4 has the key \(String(reflecting: key)), with spaces around it or a control character")
                    == true, "\(String(describing: error))")
        }
        let project = #expect(throws: ImportError.self) {
            try BugUpserter.validate(
                BugRecord(key: "TIMOB-1", title: "?", status: "Open", project: ProjectRecord(key: "TIMOB ")), at: 1)
        }
        #expect(project?.message.contains("project key") == true)
        try BugUpserter.validate(
            BugRecord(key: "MY PROJ-1", title: "?", status: "Open", project: ProjectRecord(key: "MY PROJ")), at: 1)
    }

    @Test func reimportsTheRealSampleWithoutChanges() async throws {
        guard let file = TestData.sampleFile() else { return }
        let decoder = JiraIssueDecoder()
        var chunks: [[BugRecord]] = [[]]
        for (lineNumber, bytes) in try LineReader(path: file) {
            if chunks[chunks.count - 1].count == 100 { chunks.append([]) }
            chunks[chunks.count - 1].append(try decoder.decode(bytes, line: lineNumber))
            if chunks.count == 3, chunks[2].count == 100 { break }
        }
        let coordinator = try StoreCoordinator(model: BugModel.model, store: InMemoryStore())
        let upserter = self.upserter

        let writer = ObjectContext(coordinator: coordinator)
        var first = UpsertSummary()
        for chunk in chunks {
            first += try await writer.perform { context in try upserter.upsert(chunk, in: context) }
            try await writer.save()
        }
        #expect(first == UpsertSummary(inserted: 300))

        let fresh = ObjectContext(coordinator: coordinator)
        var second = UpsertSummary()
        for chunk in chunks {
            second += try await fresh.perform { context in try upserter.upsert(chunk, in: context) }
            #expect(await fresh.hasChanges == false)
        }
        #expect(second == UpsertSummary(unchanged: 300))
    }
}
