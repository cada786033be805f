import BugSquasherGraph
import BugSquasherModel
import Foundation
import Testing

@Suite("Contexts")
struct ContextTests {
    @Test("a child context's save pushes into its parent; the parent's save reaches the store")
    func childContexts() async throws {
        let coordinator = try makeCoordinator()
        let parent = ObjectContext(coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump, name: "parent")
        let ids = try await parent.perform { try $0.insertBugs(["Open", "Open"]) }
        try await parent.perform { context in
            (try context.existingObject(with: ids[1]) as! Bug).status = "Parent edit"
        }
        let child = await parent.newChildContext()
        let newID = try await child.perform { context -> ObjectID in
            let edited = try context.existingObject(with: ids[1]) as! Bug
            #expect(edited.status == "Parent edit")  // the child sees the parent's unsaved state
            let bug = try context.existingObject(with: ids[0]) as! Bug
            bug.status = "In Progress"
            let comment = context.insert(Comment.self)
            comment.jiraID = "c1"
            comment.body = "from the child"
            comment.bug = bug
            return comment.objectID
        }
        let pushed = try await child.save()
        #expect(pushed == nil)
        let parentState = await parent.perform { context in
            ((context.registeredObject(for: ids[0]) as? Bug)?.status, context.hasChanges, context.insertedObjects.count)
        }
        #expect(parentState.0 == "In Progress")
        #expect(parentState.1)
        #expect(parentState.2 == 1)
        let stored = try await ObjectContext(coordinator: coordinator).perform { context in
            try context.count(FetchRequest<Comment>())
        }
        #expect(stored == 0)
        let didSave = try await parent.save()
        #expect(didSave?.inserted.map(\.objectID.entityName) == ["Comment"])
        #expect(didSave?.inserted.allSatisfy { !$0.objectID.isTemporary } == true)
        let check = try await ObjectContext(coordinator: coordinator).perform { context in
            let bug = try context.existingObject(with: ids[0]) as! Bug
            return (bug.status, bug.comments.map(\.body), bug.comments.map(\.objectID) == [newID])
        }
        #expect(check.0 == "In Progress")
        #expect(check.1 == ["from the child"])
        #expect(check.2 == false)  // the child's temporary ID was replaced by a permanent one
    }

    @Test("writesStoredValues tells row writes from version bumps of the one-to-many side")
    func storedValueWrites() async throws {
        let coordinator = try makeCoordinator()
        let context = ObjectContext(coordinator: coordinator, mergePolicy: .error, name: "writes")
        try await context.perform { context in
            let ids = try context.insertBugs(["Open", "Open", "Open"])
            let project = context.insert(Project.self)
            project.key = "P"
            let component = context.insert(Component.self)
            component.name = "Core"
            let insertedProject = context.writesStoredValues(of: project)
            #expect(insertedProject)
            try context.saveToStore()
            let bugs = try ids.map { try context.existingObject(with: $0) as! Bug }
            let unchanged = [context.writesStoredValues(of: bugs[0]), context.writesStoredValues(of: project)]
            #expect(unchanged == [false, false])

            bugs[0].status = "Closed"  // an attribute
            bugs[1].project = project  // a to-one: the bug's row; the project's to-many only bumps it
            bugs[2].add(component, to: "components")  // many-to-many: the owner's join rows
            let changed = [bugs[0], bugs[1], project].map { context.writesStoredValues(of: $0) }
            #expect(changed == [true, true, false])
            #expect(project.hasChanges)
            let linked = [context.writesStoredValues(of: bugs[2]), context.writesStoredValues(of: component)]
            #expect(linked.filter { $0 }.count == 1, "exactly one side owns the join rows")
        }
    }

    @Test("a context that refuses saves throws, and says why")
    func readOnly() async throws {
        let context = ObjectContext(coordinator: try makeCoordinator())
        context.refuseSaves(because: "testing")
        await context.perform { context in
            let bug = context.insert(Bug.self)
            bug.key = "X-1"
        }
        await #expect { try await context.save() } throws: { error in
            (error as? GraphError)?.code == .readOnly && "\(error)".contains("testing")
        }
    }

    @Test("required attributes are validated on save")
    func validation() async throws {
        let model = try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Note", attributes: [.attribute("title", .string), .attribute("rank", .int64, optional: true)])
        ])
        let context = ObjectContext(coordinator: try StoreCoordinator(model: model, store: InMemoryStore()))
        await #expect {
            try await context.perform { context in
                let note = try context.insert(entityNamed: "Note")
                note["title"] = .null
                note["rank"] = "not a number"
                try context.saveToStore()
            }
        } throws: { error in
            let message = "\(error)"
            return (error as? GraphError)?.code == .validation && message.contains("Note.title is required")
                && message.contains("Note.rank is int64")
        }
    }
}

@Suite("Live queries")
struct LiveQueryTests {
    @Test("a live query reports inserts, updates, deletes and moves from merged did-saves")
    func liveQuery() async throws {
        let coordinator = try makeCoordinator()
        let writer = ObjectContext(coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump, name: "writer")
        let ids = try await writer.perform { try $0.insertBugs(["Open", "Open", "Closed"]) }
        let reader = ObjectContext(
            coordinator: try StoreCoordinator(model: BugModel.model, store: coordinator.store),
            mergePolicy: .mergeByPropertyStoreTrump, name: "reader")

        // used on the reader's executor only
        final class Recorder: @unchecked Sendable { var changes: [LiveQueryChanges] = [] }
        let recorder = Recorder()
        let initial = try await reader.perform { context -> [String] in
            let query = try context.liveQuery(
                FetchRequest<Bug>(predicate: Key("status") == "Open", sort: [Key("title").ascending]))
            query.onChange = { recorder.changes.append($0) }
            LiveQueryHolder.shared[ObjectIdentifier(context)] = query
            return query.objects.map(\.key)
        }
        #expect(initial == ["TIMOB-1", "TIMOB-2"])

        let didSave = try await writer.perform { context -> DidSave in
            (try context.existingObject(with: ids[2]) as! Bug).status = "Open"  // enters
            (try context.existingObject(with: ids[0]) as! Bug).title = "Bug 9"  // moves to the end
            context.delete(try context.existingObject(with: ids[1]))  // leaves
            let bug = context.insert(Bug.self)  // enters
            bug.key = "TIMOB-4"
            bug.title = "Bug 0"
            bug.status = "Open"
            return try #require(try context.saveToStore())
        }
        let keys = await reader.perform { context -> [String] in
            context.merge(didSave)
            return (LiveQueryHolder.shared[ObjectIdentifier(context)] as! LiveQuery<Bug>).objects.map(\.key)
        }
        #expect(keys == ["TIMOB-4", "TIMOB-3", "TIMOB-1"])
        let change = try #require(recorder.changes.last)
        #expect(change.deleted.map(\.objectID) == [ids[1]])
        #expect(Set(change.inserted.map(\.objectID.uriString)).count == 2)
        #expect(change.inserted.contains { $0.objectID == ids[2] })
        #expect(change.moved.map(\.objectID) == [ids[0]] || change.updated.map(\.objectID) == [ids[0]])
    }
}

/// Keeps live queries alive between `perform` calls in tests (a context holds them weakly).
enum LiveQueryHolder {
    nonisolated(unsafe) static var shared: [ObjectIdentifier: AnyObject] = [:]
}
