import BugSquasherGraph
import BugSquasherModel
import BugSquasherTesting
import Foundation
import Testing

/// Merge policies on one two-context conflict, and did-save merges.
@Suite("Merging", .dropsPostgresSchemas)
struct MergeTests {
    /// Context A and B load TIMOB-1 (title "Bug number 1", status Closed, priority Medium).
    /// A changes title and priority and saves; then B changes title and status and saves with
    /// `policy`. Returns B's save error (if any), the stored values afterwards, and how many
    /// conflicts the coordinator counted as resolved.
    func conflict(_ kind: StoreKind, _ policy: MergePolicy) async throws -> (
        error: GraphError?, title: String, status: String, priority: String?, resolved: Int
    ) {
        let fixture = try StoreFixture(kind)
        let id = try await fixture.context().perform { try $0.seedBugs(1) }[0]
        let a = fixture.context(.error, name: "a")
        let b = fixture.context(policy, name: "b")
        _ = try await b.perform { try ($0.existingObject(with: id) as! Bug).title }
        try await a.perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            bug.title = "title from A"
            bug.priority = "High"
            try context.saveToStore()
        }
        let saveError: GraphError?
        do {
            try await b.perform { context in
                let bug = context.registeredObject(for: id) as! Bug
                bug.title = "title from B"
                bug.status = "Reopened"
                try context.saveToStore()
            }
            saveError = nil
        } catch let error as GraphError {
            saveError = error
        }
        let resolved = fixture.coordinator.resolvedConflictCount
        return try await fixture.context(name: "check").perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            return (saveError, bug.title, bug.status, bug.priority, resolved)
        }
    }

    @Test("error policy: the save fails and lists the conflict with both versions", arguments: StoreKind.allCases)
    func errorPolicy(kind: StoreKind) async throws {
        let result = try await conflict(kind, .error)
        let error = try #require(result.error)
        #expect(error.code == .mergeConflict)
        #expect(error.conflicts.count == 1)
        #expect(error.conflicts.first?.cachedVersion == 1)
        #expect(error.conflicts.first?.persistedVersion == 2)
        #expect(result.title == "title from A")
        #expect(result.status == "Closed")
        #expect(result.resolved == 0)
    }

    @Test("store trump: the store's changes win property by property", arguments: StoreKind.allCases)
    func storeTrump(kind: StoreKind) async throws {
        let result = try await conflict(kind, .mergeByPropertyStoreTrump)
        #expect(result.error == nil)
        #expect(result.title == "title from A")
        #expect(result.status == "Reopened")
        #expect(result.priority == "High")
    }

    @Test("object trump: local changes win property by property", arguments: StoreKind.allCases)
    func objectTrump(kind: StoreKind) async throws {
        let result = try await conflict(kind, .mergeByPropertyObjectTrump)
        #expect(result.error == nil)
        #expect(result.resolved == 1)
        #expect(result.title == "title from B")
        #expect(result.status == "Reopened")
        #expect(result.priority == "High")
    }

    @Test("overwrite: the whole object is written over the store", arguments: StoreKind.allCases)
    func overwrite(kind: StoreKind) async throws {
        let result = try await conflict(kind, .overwrite)
        #expect(result.error == nil)
        #expect(result.title == "title from B")
        #expect(result.status == "Reopened")
        #expect(result.priority == "Medium")
    }

    @Test("rollback: local changes of conflicting objects are discarded", arguments: StoreKind.allCases)
    func rollback(kind: StoreKind) async throws {
        let result = try await conflict(kind, .rollback)
        #expect(result.error == nil)
        #expect(result.title == "title from A")
        #expect(result.status == "Closed")
        #expect(result.priority == "High")
    }

    @Test(
        "merging a 10,000-object save into a context with 10 registered objects loads nothing else",
        arguments: StoreKind.allCases)
    func mergeLoadsOnlyRegistered(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let ids = try await fixture.context().perform { try $0.seedBugs(10_000) }
        let watched = Array(ids.prefix(10))
        let subscriber = ObjectContext(
            coordinator: try fixture.secondCoordinator(), mergePolicy: .mergeByPropertyStoreTrump, name: "subscriber")
        try await subscriber.perform { context in
            for id in watched { _ = try (context.existingObject(with: id) as! Bug).title }
        }
        let didSave = try await fixture.context(.mergeByPropertyObjectTrump, name: "writer").perform {
            context -> DidSave in
            var request = FetchRequest<Bug>()
            request.returnsObjectsAsFaults = false
            for bug in try context.fetch(request) { bug.status = "Triaged" }
            return try #require(try context.saveToStore())
        }
        #expect(didSave.updated.count == 10_000)
        let withoutValues = didSave.withoutValues
        fixture.counting.resetCounts()
        let result = await subscriber.perform { context in
            let result = context.merge(withoutValues)
            let registered = context.registeredObjects.count
            #expect(registered == 11)  // the 10 bugs and their project fault
            return result
        }
        #expect(Set(result.refreshed) == Set(watched))
        #expect(fixture.counting.current == CountingStore.Counts())
        // Touching the refreshed objects loads exactly them, once, with the new values.
        await subscriber.perform { context in
            let statuses = watched.map { (context.registeredObject(for: $0) as! Bug).status }
            #expect(statuses == Array(repeating: "Triaged", count: 10))
        }
        #expect(fixture.counting.current.loadedObjects == 10)
        #expect(fixture.counting.current.fetches == 0)
    }

    @Test("merging deletions and keeping local edits per the merge policy", arguments: StoreKind.allCases)
    func mergeDeletesAndLocalEdits(kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let ids = try await fixture.context().perform { try $0.seedBugs(3) }
        let reader = ObjectContext(
            coordinator: try fixture.secondCoordinator(), mergePolicy: .mergeByPropertyObjectTrump)
        try await reader.perform { context in
            for id in ids { _ = try (context.existingObject(with: id) as! Bug).title }
            (context.registeredObject(for: ids[0]) as! Bug).title = "local draft"
        }
        let didSave = try await fixture.context(.mergeByPropertyObjectTrump).perform { context -> DidSave in
            let first = try context.existingObject(with: ids[0]) as! Bug
            first.title = "saved elsewhere"
            first.status = "In Review"
            context.delete(try context.existingObject(with: ids[2]))
            return try #require(try context.saveToStore())
        }
        try await reader.perform { context in
            let result = context.merge(didSave)
            #expect(result.deleted == [ids[2]])
            #expect(context.registeredObject(for: ids[2]) == nil)
            let first = context.registeredObject(for: ids[0]) as! Bug
            #expect(first.title == "local draft")
            #expect(first.status == "In Review")
            #expect(first.hasChanges)
            try context.saveToStore()
        }
        let title = try await fixture.context().perform { (try $0.existingObject(with: ids[0]) as! Bug).title }
        #expect(title == "local draft")
    }

    /// The object was deleted in the store meanwhile. Failing, the save names it and saves nothing.
    @Test(
        "a save over a store deletion yields to it, or fails with failsOverStoreDeletions",
        arguments: StoreKind.allCases)
    func saveOverStoreDeletion(kind: StoreKind) async throws {
        for fails in [false, true] {
            let fixture = try StoreFixture(kind)
            let ids = try await fixture.context().perform { try $0.seedBugs(2) }
            let editor = fixture.context(.mergeByPropertyObjectTrump, name: "editor")
            try await editor.perform { context in
                context.failsOverStoreDeletions = fails
                (try context.existingObject(with: ids[0]) as! Bug).title = "edited while deleted"
                (try context.existingObject(with: ids[1]) as! Bug).title = "edited beside it"
            }
            try await fixture.context(name: "deleter").perform { context in
                context.delete(try context.existingObject(with: ids[0]))
                try context.saveToStore()
            }
            let failure: GraphError? = await editor.perform { context in
                do {
                    try context.saveToStore()
                    return nil
                } catch {
                    return error as? GraphError
                }
            }
            let stored = try await fixture.context(name: "check").perform { context in
                try context.fetch(FetchRequest<Bug>()).map { [$0.objectID: $0.title] }.reduce(
                    into: [ObjectID: String]()
                ) { $0.merge($1) { a, _ in a } }
            }
            #expect(stored[ids[0]] == nil, "the deletion stays")
            if fails {
                let error = try #require(failure)
                #expect(error.code == .mergeConflict)
                #expect(error.conflicts.map(\.objectID) == [ids[0]])
                #expect(error.message.contains("deleted in the store meanwhile"), "\(error.message)")
                #expect(stored[ids[1]] == "Bug number 2", "a failed save saves nothing")
            } else {
                #expect(failure == nil, "\(String(describing: failure))")
                #expect(stored[ids[1]] == "edited beside it")
            }
        }
    }
}
