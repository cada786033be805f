import BugSquasherGraph
import BugSquasherModel
import BugSquasherPostgres
import BugSquasherSQLite
import BugSquasherTesting
import Foundation
import Testing

/// The store contract: every test runs against SQLiteStore, InMemoryStore and PostgresStore.
@Suite("Store contract", .dropsPostgresSchemas)
struct StoreContractTests {
    @Test("insert, save, fetch: permanent IDs, URIs, faults, uniquing", arguments: StoreKind.allCases)
    func roundTrip(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let ids = try await fixture.context().perform { try $0.seedBugs(3) }
        #expect(ids.allSatisfy { !$0.isTemporary && $0.storeIdentifier == fixture.coordinator.storeIdentifier })
        #expect(ids.map(\.primaryKey) == [1, 2, 3])
        #expect(ids.allSatisfy { ObjectID(uri: $0.uriString) == $0 })
        #expect(ids[0].uriString == "x-bugsquasher://\(fixture.coordinator.storeIdentifier)/Bug/p1")

        let reader = fixture.context(name: "reader")
        try await reader.perform { context in
            let bugs = try context.fetch(FetchRequest<Bug>(sort: [Key("key").ascending]))
            #expect(bugs.count == 3)
            #expect(bugs.allSatisfy { $0.isFault })
            fixture.counting.resetCounts()
            #expect(bugs[1].title == "Bug number 2")
            #expect(!bugs[1].isFault)
            #expect(fixture.counting.current.valueLoads == 1)
            #expect(bugs[1].project?.key == "TIMOB")
            // Uniquing: one object per ID per context.
            let again = try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-2")).first
            #expect(again === bugs[1])
            #expect(context.object(with: ids[1]) === bugs[1])
            #expect(try context.existingObject(with: ids[1]) === bugs[1])
        }
    }

    @Test("temporary IDs become permanent on save, in the order asked", arguments: StoreKind.allCases)
    func permanentIDs(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let temporary = (0..<5).map { _ in ObjectID.temporary(entity: "Comment") }
        #expect(temporary.allSatisfy { $0.isTemporary })
        #expect(ObjectID(uri: temporary[0].uriString) == temporary[0])
        let first = try fixture.coordinator.obtainPermanentIDs(for: temporary)
        let second = try fixture.coordinator.obtainPermanentIDs(for: Array(temporary.prefix(2)))
        #expect(first.compactMap(\.primaryKey) == [1, 2, 3, 4, 5])
        #expect(second.compactMap(\.primaryKey) == [6, 7])
    }

    @Test(
        "predicates, sorts, limits, counts and ID fetches mean the same in every store", arguments: StoreKind.allCases)
    func predicates(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in
            _ = try context.seedBugs(10)
            _ = try context.seedBugs(4, prefix: "ALOY")
        }
        let cases: [(ObjectPredicate, [SortKey], Int?, Int, [String])] = [
            (Key("key") == "TIMOB-3", [], nil, 0, ["TIMOB-3"]),
            (Key("status") != "Open" && Key("project.key") == "ALOY", [], nil, 0, ["ALOY-1", "ALOY-3"]),
            (
                Key("created") > .date(Date(timeIntervalSince1970: 8 * 86_400)) && Key("project.key") == "TIMOB", [],
                nil, 0, ["TIMOB-10", "TIMOB-9"]
            ),
            (
                Key("created") <= .date(Date(timeIntervalSince1970: 2 * 86_400)), [], nil, 0,
                ["ALOY-1", "ALOY-2", "TIMOB-1", "TIMOB-2"]
            ),
            (Key("key").in(["TIMOB-1", "ALOY-4", "NOPE-1"]), [], nil, 0, ["ALOY-4", "TIMOB-1"]),
            (
                Key("key").beginsWith("ALOY") || Key("key") == "TIMOB-10", [], nil, 0,
                ["ALOY-1", "ALOY-2", "ALOY-3", "ALOY-4", "TIMOB-10"]
            ),
            (!Key("key").contains("TIMOB"), [], nil, 0, ["ALOY-1", "ALOY-2", "ALOY-3", "ALOY-4"]),
            (
                Key("title").contains("NUMBER 1", caseInsensitive: true) && Key("project.key") == "TIMOB", [], nil, 0,
                ["TIMOB-1", "TIMOB-10"]
            ),
            (Key("resolution") == Value.null && Key("key") == "ALOY-2", [], nil, 0, ["ALOY-2"]),
            // NOT of a comparison with an empty value is true: a comparison with null is false,
            // not SQL's unknown (`NOT resolution == "Fixed"` found no bug without a resolution).
            (
                !(Key("resolution") == "Fixed") && Key("project.key") == "ALOY", [], nil, 0,
                ["ALOY-1", "ALOY-2", "ALOY-3", "ALOY-4"]
            ),
            (
                !(Key("resolution") < "G" || Key("resolution").contains("x")) && Key("project.key") == "ALOY", [], nil,
                0, ["ALOY-1", "ALOY-2", "ALOY-3", "ALOY-4"]
            ),
            (
                !(Key("assignee.name") == "zz") && Key("project.key") == "ALOY", [], nil, 0,
                ["ALOY-1", "ALOY-2", "ALOY-3", "ALOY-4"]
            ),
            (!(!(Key("resolution") == "Fixed")) && Key("project.key") == "ALOY", [], nil, 0, []),
            (.all, [Key("priority").descending, Key("key").descending], 3, 0, ["TIMOB-7", "TIMOB-4", "TIMOB-10"]),
            (.all, [], 2, 3, ["ALOY-4", "TIMOB-1"]),
        ]
        let results = try await fixture.context().perform { context in
            try cases.map { predicate, sort, limit, offset, _ in
                try context.fetch(
                    FetchRequest<Bug>(
                        predicate: predicate, sort: sort + [Key("key").ascending], limit: limit, offset: offset)
                ).map(\.key)
            }
        }
        for (result, testCase) in zip(results, cases) {
            #expect(result == testCase.4, "\(testCase.0)")
        }
        try await fixture.context().perform { context in
            let project = try context.fetch(FetchRequest<Project>(predicate: Key("key") == "ALOY"))[0]
            let byProject = try context.fetch(
                FetchRequest<Bug>(predicate: Key("project") == project.objectID, sort: [Key("key").ascending])
            ).map(\.key)
            #expect(byProject == ["ALOY-1", "ALOY-2", "ALOY-3", "ALOY-4"])
            let open = try context.count(FetchRequest<Bug>(predicate: Key("status") == "Open"))
            #expect(open == 7)
            let limited = try context.count(FetchRequest<Bug>(limit: 5))
            #expect(limited == 5)
            let before = context.registeredObjectIDs.count
            let ids = try context.fetchObjectIDs(FetchRequest<Bug>(predicate: Key("project.key") == "TIMOB"))
            let after = context.registeredObjectIDs.count
            #expect(ids.count == 10)
            #expect(after == before)
            var unknownKeyFailed = false
            do { _ = try context.fetch(FetchRequest<Bug>(predicate: Key("nope") == "x")) } catch {
                unknownKeyFailed = error is GraphError
            }
            #expect(unknownKeyFailed)
        }
    }

    /// Where nil goes in a sort, and which letters CONTAINS[c] folds, are the same in every
    /// store: nil first ascending and last descending, and ASCII letters only, whatever the
    /// database's own collation does.
    @Test("nil sorts first ascending, last descending; CONTAINS[c] folds ASCII only", arguments: StoreKind.allCases)
    func nilOrderAndFolding(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let keys = try await fixture.context().perform { context in
            let ids = try context.seedBugs(5, prefix: "NIL")
            let bugs = try ids.map { try context.existingObject(with: $0) as! Bug }
            (bugs[0].resolution, bugs[1].resolution) = ("Fixed", "Duplicate")
            let person = context.insert(Person.self)
            person.name = "ann"
            bugs[2].assignee = person
            (bugs[0].title, bugs[1].title, bugs[2].title, bugs[3].title) = ("CAFÉ", "café", "\u{212A}elvin", "kilo")
            try context.saveToStore()
            let all = Key("project.key") == "NIL"
            let cases: [(ObjectPredicate, [SortKey])] = [
                (all, [Key("resolution").ascending]), (all, [Key("resolution").descending]),
                (all, [Key("assignee.name").ascending]), (all, [Key("assignee.name").descending]),
                (all && Key("title").contains("É", caseInsensitive: true), []),
                (all && Key("title").contains("cafÉ", caseInsensitive: true), []),
                (all && Key("title").contains("\u{212A}", caseInsensitive: true), []),
                (all && Key("title").contains("K", caseInsensitive: true), []),
            ]
            return try cases.map { predicate, sort in
                try context.fetch(FetchRequest<Bug>(predicate: predicate, sort: sort + [Key("key").ascending])).map(
                    \.key)
            }
        }
        #expect(keys[0] == ["NIL-3", "NIL-4", "NIL-5", "NIL-2", "NIL-1"])
        #expect(keys[1] == ["NIL-1", "NIL-2", "NIL-3", "NIL-4", "NIL-5"])
        #expect(keys[2] == ["NIL-1", "NIL-2", "NIL-4", "NIL-5", "NIL-3"])
        #expect(keys[3] == ["NIL-3", "NIL-1", "NIL-2", "NIL-4", "NIL-5"])
        #expect(keys[4] == ["NIL-1"])
        #expect(keys[5] == ["NIL-1"])
        #expect(keys[6] == ["NIL-3"])
        #expect(keys[7] == ["NIL-4"])
    }

    /// The SQLite store pads them to a few prepared shapes.
    @Test("a rows fetch of some attributes reads them as a full fetch does", arguments: StoreKind.allCases)
    func attributesToFetch(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in _ = try context.seedBugs(5) }
        let entity = try #require(fixture.coordinator.model.entity(named: "Bug"))
        let asked: Set<String> = ["key", "status"]
        var request = FetchDescription(entityName: "Bug", sort: [Key("key").ascending], resultType: .rows)
        guard case .rows(let full) = try fixture.coordinator.fetch(request) else { throw ContractFailure() }
        request.attributesToFetch = asked
        guard case .rows(let some) = try fixture.coordinator.fetch(request) else { throw ContractFailure() }
        #expect(some.map(\.objectID) == full.map(\.objectID))
        for (partial, whole) in zip(some, full) {
            for name in asked {
                let index = try #require(entity.attributeIndex[name])
                #expect(partial.snapshot.attributes[index] == whole.snapshot.attributes[index], "\(name)")
            }
            #expect(partial.snapshot.version == whole.snapshot.version)
        }
    }

    @Test("IN lists of every length find the same objects", arguments: StoreKind.allCases)
    func inLists(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in _ = try context.seedBugs(20) }
        try await fixture.context().perform { context in
            // 1,500 is past the longest padded list (1,024): it keeps its length.
            for length in [1, 2, 3, 5, 8, 9, 17, 1_500] {
                let keys = (1...length).map { Value.string("TIMOB-\($0)") } + [.string("NOPE-\(length)")]
                let expected = min(length, 20)
                let found = try context.fetch(FetchRequest<Bug>(predicate: Key("key").in(keys)))
                #expect(Set(found.map(\.key)) == Set((1...expected).map { "TIMOB-\($0)" }), "\(length) keys")
                #expect(
                    try context.count(FetchRequest<Bug>(predicate: Key("key").in(keys))) == expected, "\(length) keys")
                #expect(
                    try context.fetchObjectIDs(FetchRequest<Bug>(predicate: Key("key").in(keys))).count == expected,
                    "\(length) keys")
            }
            let all = try context.fetch(FetchRequest<Bug>())
            let nullOrHigh = try context.fetch(
                FetchRequest<Bug>(
                    predicate: Key("resolution").in([.null]) && Key("priority").in(["High", "Low", "High"])))
            #expect(
                Set(nullOrHigh.map(\.key))
                    == Set(all.filter { $0.resolution == nil && ["High", "Low"].contains($0.priority) }.map(\.key)))
        }
    }

    @Test(
        "empty strings and empty data stay empty, not null, through inserts and updates", arguments: StoreKind.allCases)
    func emptyValues(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let id = try await fixture.context().perform { context in
            let ids = try context.seedBugs(1)
            let bug = try context.existingObject(with: ids[0]) as! Bug
            bug.details = ""
            bug.setValue(.string(""), for: "jiraID")
            try context.saveToStore()
            return ids[0]
        }
        try await fixture.context().perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            #expect(bug.details == "")
            #expect(bug.jiraID == "")
            #expect(bug.resolution == nil)
            bug.resolution = ""
            bug.details = nil
            try context.saveToStore()
        }
        try await fixture.context().perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            #expect(bug.resolution == "")
            #expect(bug.details == nil)
        }
    }

    @Test(
        "text holding U+0000 reads back whole, through inserts, updates and predicates", arguments: StoreKind.allCases)
    func textWithNUL(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let details = "Console output:\n{code}\n\u{0}\u{0}Oct  3 09:32:23 iPhone"
        let id = try await fixture.context().perform { context in
            let ids = try context.seedBugs(2)
            let bug = try context.existingObject(with: ids[0]) as! Bug
            bug.details = details
            try context.saveToStore()
            return ids[0]
        }
        try await fixture.context().perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            #expect(bug.details == details)
            let found = try context.fetch(FetchRequest<Bug>(predicate: Key("details") == .string(details))).map(
                \.objectID)
            #expect(found == [id])
            // Substring operators compare the bytes on both sides of a U+0000, in text and needle.
            for text in [
                #"details CONTAINS "\u0000\u0000Oct""#, #"details CONTAINS[c] "{CODE}\n\u0000""#,
                #"details BEGINSWITH "Console""#, #"details CONTAINS "iPhone""#,
            ] {
                let matches = try context.fetch(FetchRequest<Bug>(predicate: try ObjectPredicate(parsing: text))).map(
                    \.objectID)
                #expect(matches == [id], "\(text)")
            }
            for text in [#"details CONTAINS "\u0000x""#, #"details BEGINSWITH "\u0000""#] {
                #expect(
                    try context.fetch(FetchRequest<Bug>(predicate: try ObjectPredicate(parsing: text))).isEmpty,
                    "\(text)")
            }
            bug.title = "a\u{0}b"
            try context.saveToStore()
        }
        try await fixture.context().perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            #expect(bug.title == "a\u{0}b")
        }
    }

    /// SQLite reads inserted text where the string keeps it (no copy), and PostgreSQL gets
    /// enough rows to take them by `COPY`: short strings (kept inside the string value), long
    /// ones, non-ASCII ones, ones with COPY's escapes and ones holding U+0000 all read back
    /// whole, and a predicate finds each.
    @Test("inserted text of any length and kind reads back whole", arguments: StoreKind.allCases)
    func insertedText(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let titles = [
            "", "a", "fifteen bytes!!", "sixteen bytes!!!", "é 🐛 中文", "a\u{0}b", "tab\tback\\slash\r\nline",
            "\u{10FFFF} \u{F4}", String(repeating: "A long title, longer than any inline string. ", count: 300),
        ]
        let ids = try await fixture.context().perform { context in
            let bugs = titles.enumerated().map { index, title in
                let bug = context.insert(Bug.self)
                bug.key = "TEXT-\(index)"
                bug.title = title
                bug.details = title.isEmpty ? nil : title + " (details)"
                return bug
            }
            try context.saveToStore()
            return bugs.map(\.objectID)
        }
        try await fixture.context().perform { context in
            for (id, title) in zip(ids, titles) {
                let bug = try context.existingObject(with: id) as! Bug
                #expect(bug.title == title)
                #expect(bug.details == (title.isEmpty ? nil : title + " (details)"))
                let found = try context.fetch(FetchRequest<Bug>(predicate: Key("title") == .string(title)))
                #expect(found.map(\.objectID) == [id], "\(title.prefix(20))")
            }
        }
    }

    /// SQLite 3.40 crashed the process on 64 such terms. Past 32 distinct key paths a sort is refused.
    @Test("a key path repeated in a sort over a join sorts by it once")
    func repeatedSortKeys() async throws {
        let fixture = try StoreFixture(.sqlite)
        let context = fixture.context()
        _ = try await context.perform { try $0.seedBugs(3) }
        _ = try await context.save()
        try await context.perform { context in
            let repeated = Array(repeating: [Key("project.key").ascending, Key("key").descending], count: 40).flatMap {
                $0
            }
            let keys = try context.fetch(FetchRequest<Bug>(sort: repeated)).map(\.key)
            #expect(keys == ["TIMOB-3", "TIMOB-2", "TIMOB-1"])
            let error = #expect(throws: GraphError.self) {
                try context.fetch(FetchRequest<Bug>(sort: (1...33).map { Key("title\($0)").ascending }))
            }
            #expect(
                error?.message.contains("sorts by 33 key paths. Give at most 32") == true,
                "\(String(describing: error))")
        }
    }

    @Test("prefetching returns loaded objects; batch faulting loads a batch per request", arguments: StoreKind.allCases)
    func prefetchAndBatches(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        _ = try await fixture.context().perform { try $0.seedBugs(25) }
        try await fixture.context().perform { context in
            var request = FetchRequest<Bug>(sort: [Key("created").ascending])
            request.returnsObjectsAsFaults = false
            fixture.counting.resetCounts()
            let loaded = try context.fetch(request)
            #expect(loaded.allSatisfy { !$0.isFault })
            _ = loaded.map(\.title)
            #expect(fixture.counting.current.valueLoads == 0)
        }
        try await fixture.context().perform { context in
            var request = FetchRequest<Bug>(sort: [Key("created").ascending])
            request.batchSize = 10
            let bugs = try context.fetch(request)
            fixture.counting.resetCounts()
            _ = bugs.map(\.title)
            #expect(fixture.counting.current.valueLoads == 3)
            #expect(fixture.counting.current.loadedObjects == 25)
        }
    }

    @Test("fetches see unsaved inserts, edits and deletes", arguments: StoreKind.allCases)
    func pendingChanges(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in
            _ = try context.seedBugs(4)
            let bugs = try context.fetch(FetchRequest<Bug>(sort: [Key("key").ascending]))
            context.delete(bugs[0])
            bugs[1].status = "Reopened"
            let fresh = context.insert(Bug.self)
            fresh.key = "TIMOB-0"
            fresh.status = "Reopened"
            fresh.title = "new"
            #expect(
                try context.fetch(
                    FetchRequest<Bug>(predicate: Key("status") == "Reopened", sort: [Key("key").ascending])
                ).map(\.key) == ["TIMOB-0", "TIMOB-2"])
            #expect(try context.count(FetchRequest<Bug>()) == 4)
            #expect(
                try context.fetch(FetchRequest<Bug>(sort: [Key("key").ascending], limit: 1)).map(\.key) == ["TIMOB-0"])
        }
    }

    @Test("setting a value to the value it has does not dirty the object", arguments: StoreKind.allCases)
    func sameValueIsNotAChange(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in
            _ = try context.seedBugs(1)
            let bug = try context.fetch(FetchRequest<Bug>())[0]
            bug.title = bug.title
            bug.status = "Open" == bug.status ? "Open" : bug.status
            bug.project = bug.project
            let clean = !context.hasChanges && context.updatedObjects.isEmpty
            #expect(clean)
            bug.title = "changed"
            let dirty = context.hasChanges
            #expect(dirty)
            #expect(bug.changedValues.keys.sorted() == ["title"])
            bug.title = "Bug number 1"
            let cleanAgain = !context.hasChanges
            #expect(cleanAgain)
            #expect(try context.saveToStore() == nil)
        }
    }

    @Test("delete rules: cascade, nullify, deny", arguments: StoreKind.allCases)
    func deleteRules(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in
            let bug = context.insert(Bug.self)
            bug.key = "TIMOB-1"
            bug.title = "t"
            let person = context.insert(Person.self)
            person.name = "user-1"
            bug.reporter = person
            for index in 1...3 {
                let comment = context.insert(Comment.self)
                comment.jiraID = "c\(index)"
                comment.bug = bug
                comment.author = person
            }
            let project = context.insert(Project.self)
            project.key = "TIMOB"
            bug.project = project
            try context.saveToStore()
        }
        try await fixture.context().perform { context in
            let person = try context.fetch(FetchRequest<Person>())[0]
            context.delete(person)
            try context.saveToStore()
            let bug = try context.fetch(FetchRequest<Bug>())[0]
            #expect(bug.reporter == nil)
            #expect(bug.comments.count == 3)
            #expect(bug.comments.allSatisfy { $0.author == nil })

            let project = try context.fetch(FetchRequest<Project>())[0]
            context.delete(project)
            #expect { try context.saveToStore() } throws: { ($0 as? GraphError)?.code == .validation }
            context.rollback()

            context.delete(bug)
            try context.saveToStore()
            #expect(try context.count(FetchRequest<Comment>()) == 0)
            #expect(try context.count(FetchRequest<Bug>()) == 0)
            #expect(project.bugs.isEmpty)
        }
    }

    @Test("many-to-many links persist from either side", arguments: StoreKind.allCases)
    func manyToMany(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        try await fixture.context().perform { context in
            let bug = context.insert(Bug.self)
            bug.key = "TIMOB-1"
            let ui = context.insert(Component.self)
            ui.name = "UI"
            let android = context.insert(Component.self)
            android.name = "Android"
            bug.add(ui, to: "components")
            android.add(bug, to: "bugs")
            try context.saveToStore()
        }
        try await fixture.context().perform { context in
            let bug = try context.fetch(FetchRequest<Bug>())[0]
            #expect(Set(bug.components.map(\.name)) == ["UI", "Android"])
            let ui = try context.fetch(FetchRequest<Component>(predicate: Key("name") == "UI"))[0]
            #expect(ui.bugs.map(\.key) == ["TIMOB-1"])
            bug.remove(ui, from: "components")
            try context.saveToStore()
        }
        try await fixture.context().perform { context in
            let ui = try context.fetch(FetchRequest<Component>(predicate: Key("name") == "UI"))[0]
            #expect(ui.bugs.isEmpty)
            #expect(try context.fetch(FetchRequest<Bug>())[0].components.map(\.name) == ["Android"])
        }
    }

    @Test("a unique key refuses a second object with the same value", arguments: StoreKind.allCases)
    func uniqueKey(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        _ = try await fixture.context().perform { try $0.seedBugs(1) }
        await fixture.context().perform { context in
            let duplicate = context.insert(Bug.self)
            duplicate.key = "TIMOB-1"
            #expect { try context.saveToStore() } throws: { ($0 as? GraphError)?.code == .constraintViolation }
        }
    }

    @Test("did-saves carry increasing tokens and land in the history", arguments: StoreKind.allCases)
    func historyTokens(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let context = fixture.context()
        let ids = try await context.perform { try $0.seedBugs(2) }
        let second = try await context.perform { context -> DidSave? in
            let bug = try context.existingObject(with: ids[0])
            bug["title"] = "renamed"
            return try context.saveToStore()
        }
        let third = try await context.perform { context -> DidSave? in
            context.delete(try context.existingObject(with: ids[1]))
            return try context.saveToStore()
        }
        let empty = try await context.save()
        #expect(empty == nil)
        let history = try fixture.coordinator.changes(after: .zero)
        #expect(history.map(\.token.rawValue) == [1, 2, 3])
        #expect(history[0].inserted.count == 3)
        #expect(history[1].updated.map(\.objectID) == [ids[0]])
        #expect(history[1].updated[0].changedKeys == ["title"])
        #expect(history[1].updated[0].version == 2)
        #expect(second?.updated[0].values?.attributes[2] == .string("renamed"))
        #expect(history[2].deleted.map(\.objectID) == [ids[1]])
        #expect(third?.token == HistoryToken(rawValue: 3))
        #expect(try fixture.coordinator.changes(after: HistoryToken(rawValue: 1)).map(\.token.rawValue) == [2, 3])
        #expect(try fixture.counting.currentHistoryToken().rawValue == 3)
    }

    /// Retention deletes the oldest saves only, keeps the newest (its token is the store's), and
    /// says where the history now begins; the next save takes the next token.
    @Test(
        "pruning the history keeps a run of the newest saves", arguments: StoreKind.allCases.filter { $0 != .inMemory })
    func historyPruning(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let store = try #require(fixture.counting.base as? any HistoryPruning)
        let context = fixture.context()
        let ids = try await context.perform { try $0.seedBugs(1) }
        for round in 1...9 {
            try await context.perform { context in
                try context.existingObject(with: ids[0])["title"] = .string("round \(round)")
                _ = try context.saveToStore()
            }
        }
        #expect(try store.historyHorizon().rawValue == 0)
        #expect(try store.pruneHistory(before: nil, keepingNewest: 3) == 7)
        #expect(try store.historyHorizon().rawValue == 7)
        #expect(try fixture.coordinator.changes(after: HistoryToken(rawValue: 7)).map(\.token.rawValue) == [8, 9, 10])
        #expect(try store.pruneHistory(before: nil, keepingNewest: 3) == 0)
        // By age: everything older than a minute from now, except the newest save.
        #expect(try store.pruneHistory(before: Date().addingTimeInterval(60), keepingNewest: nil) == 2)
        #expect(try store.historyHorizon().rawValue == 9)
        #expect(try fixture.counting.currentHistoryToken().rawValue == 10)
        try await context.perform { context in
            try context.existingObject(with: ids[0])["title"] = "after pruning"
            #expect(try context.saveToStore()?.token.rawValue == 11)
        }
        #expect(try fixture.coordinator.changes(after: HistoryToken(rawValue: 9)).map(\.token.rawValue) == [10, 11])
    }

    @Test("a store rejects request kinds it does not know", arguments: StoreKind.allCases)
    func unknownRequest(kind: StoreKind) throws {
        struct VacuumRequest: StoreRequest {}
        let fixture = try StoreFixture(kind)
        #expect { try fixture.coordinator.execute(VacuumRequest()) } throws: {
            ($0 as? GraphError)?.code == .unsupportedRequest
        }
    }

    @Test("registrations are reference-counted down to the store", arguments: StoreKind.allCases)
    func registrations(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let ids = try await fixture.context().perform { try $0.seedBugs(2) }
        let registered = { () -> Set<ObjectID> in
            switch fixture.counting.base {
            case let store as InMemoryStore: store.registeredObjectIDs
            case let store as SQLiteStore: store.registeredObjectIDs
            case let store as PostgresStore: store.registeredObjectIDs
            default: []
            }
        }
        let a = fixture.context(name: "a")
        let b = fixture.context(name: "b")
        _ = await a.perform { $0.object(with: ids[0]).objectID }
        _ = await b.perform { $0.object(with: ids[0]).objectID }
        #expect(registered().contains(ids[0]))
        await a.reset()
        #expect(registered().contains(ids[0]))
        await b.reset()
        #expect(!registered().contains(ids[0]))
    }

    @Test("rollback, reset and refresh", arguments: StoreKind.allCases)
    func rollbackResetRefresh(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let ids = try await fixture.context().perform { try $0.seedBugs(1) }
        let context = fixture.context()
        try await context.perform { context in
            let bug = try context.existingObject(with: ids[0]) as! Bug
            bug.title = "local"
            let inserted = context.insert(Bug.self)
            inserted.key = "TIMOB-99"
            context.rollback()
            let rolledBack = !context.hasChanges
            #expect(rolledBack)
            #expect(bug.title == "Bug number 1")
            #expect(try context.count(FetchRequest<Bug>()) == 1)
            bug.title = "local edit"
        }
        try await fixture.context(name: "other").perform { other in
            let bug = try other.existingObject(with: ids[0]) as! Bug
            bug.status = "Closed by other"
            try other.saveToStore()
        }
        try await context.perform { context in
            let bug = try context.existingObject(with: ids[0]) as! Bug
            try context.refresh(bug, mergeChanges: true)
            #expect(bug.title == "local edit")
            #expect(bug.status == "Closed by other")
            try context.refresh(bug, mergeChanges: false)
            #expect(bug.isFault)
            #expect(bug.title == "Bug number 1")
            #expect(bug.status == "Closed by other")
            context.reset()
            let empty = context.registeredObjects.isEmpty
            #expect(empty)
        }
    }
}

/// A store answered a fetch with another kind of result than asked.
private struct ContractFailure: Error {}
