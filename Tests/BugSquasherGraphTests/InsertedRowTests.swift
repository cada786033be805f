import BugSquasherGraph
import BugSquasherModel
import Testing

/// Rows inserted without objects (`ObjectContext.insertRow(_:values:)`), as an importer inserts
/// new bugs.
@Suite("Rows inserted without objects")
struct InsertedRowTests {
    /// A new bug's values: the entity's defaults with a key and a title.
    private func bugValues(_ key: String, in coordinator: StoreCoordinator) throws -> (EntityDescription, [Value]) {
        let entity = try coordinator.model.requireEntity("Bug")
        var values = entity.defaultValues
        values[entity.attributeIndex["key"]!] = .string(key)
        values[entity.attributeIndex["title"]!] = .string("Title of \(key)")
        return (entity, values)
    }

    @Test("a row saves as an inserted object: permanent ID, links, did-save, the objects it joins bumped")
    func rowsSave() async throws {
        let coordinator = try makeCoordinator()
        let projectID = try await ObjectContext(coordinator: coordinator).perform { context in
            let project = context.insert(Project.self)
            project.key = "TIMOB"
            try context.saveToStore()
            return project.objectID
        }
        let (bugEntity, bugValues) = try bugValues("TIMOB-1", in: coordinator)
        let commentEntity = try coordinator.model.requireEntity("Comment")
        var commentValues = commentEntity.defaultValues
        commentValues[commentEntity.attributeIndex["jiraID"]!] = .string("c1")
        commentValues[commentEntity.attributeIndex["body"]!] = .string("A row too.")

        let context = ObjectContext(coordinator: coordinator, mergePolicy: .mergeByPropertyObjectTrump)
        let (bug, pending) = try await context.perform { [commentValues] context in
            let project = try context.existingObject(with: projectID)
            let component = context.insert(Component.self)
            component.name = "Runtime"
            let bug = context.insertRow(bugEntity, values: bugValues)
            context.setToOne(ofRow: bug, "project", to: project)
            context.add(component, toRow: bug, "components")
            context.add(component, toRow: bug, "components")  // once
            let comment = context.insertRow(commentEntity, values: commentValues)
            context.setToOne(ofRow: comment, "bug", toRow: bug)
            // Not a member of the project's bugs here, but the project changed.
            #expect((project as! Project).bugs.isEmpty)
            #expect(project.hasChanges)
            return (bug, (context.isInsertedRow(bug), context.insertedRows.count, context.hasChanges))
        }
        #expect(bug.isTemporary)
        #expect(pending == (true, 2, true))

        let didSave = try #require(try await context.save())
        #expect(Set(didSave.inserted.map(\.objectID.entityName)) == ["Bug", "Comment", "Component"])
        #expect(didSave.objectIDs.allSatisfy { !$0.isTemporary })
        let project = try #require(didSave.updated.first { $0.objectID == projectID })
        #expect(project.version == 2)
        #expect(project.changedKeys == ["bugs"])
        #expect(await context.perform { ($0.isInsertedRow(bug), $0.hasChanges) } == (false, false))

        let stored = try await ObjectContext(coordinator: coordinator).perform { context in
            let bug = try #require(try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1")).first)
            return (
                bug.title, bug.status, bug.project?.key, bug.components.map(\.name), bug.comments.map(\.body),
                bug.project?.bugs.count
            )
        }
        #expect(stored.0 == "Title of TIMOB-1")
        #expect(stored.1 == "Open")  // the default
        #expect(stored.2 == "TIMOB")
        #expect(stored.3 == ["Runtime"])
        #expect(stored.4 == ["A row too."])
        #expect(stored.5 == 1)
    }

    /// What an importer does for a chunk: relationships looked up once, by position.
    @Test("relationships given by position link rows as those given by name do")
    func rowsBySlot() async throws {
        let coordinator = try makeCoordinator()
        let (bugEntity, first) = try bugValues("TIMOB-1", in: coordinator)
        let (_, second) = try bugValues("TIMOB-2", in: coordinator)
        let commentEntity = try coordinator.model.requireEntity("Comment")
        var commentValues = commentEntity.defaultValues
        commentValues[commentEntity.attributeIndex["jiraID"]!] = .string("c1")
        commentValues[commentEntity.attributeIndex["body"]!] = .string("On the first bug.")
        let project = try #require(bugEntity.toOneIndex["project"])
        let reporter = try #require(bugEntity.toOneIndex["reporter"])
        let components = try #require(bugEntity.toManyIndex["components"])
        let bugOfComment = try #require(commentEntity.toOneIndex["bug"])
        let author = try #require(commentEntity.toOneIndex["author"])

        let context = ObjectContext(coordinator: coordinator)
        try await context.perform { [commentValues] context in
            let timob = context.insert(Project.self)
            timob.key = "TIMOB"
            let person = context.insert(Person.self)
            person.name = "ingo"
            let runtime = context.insert(Component.self)
            runtime.name = "Runtime"
            let bug1 = context.insertRow(bugEntity, values: first)
            context.setToOne(ofRow: bug1, toOneSlot: project, to: timob)
            context.setToOne(ofRow: bug1, toOneSlot: reporter, to: person)
            context.add(runtime, toRow: bug1, toManySlot: components)
            let bug2 = context.insertRow(bugEntity, values: second)
            context.setToOne(ofRow: bug2, "project", to: timob)
            // A row before the last one, and a row's relationship pointed elsewhere again.
            context.setToOne(ofRow: bug1, toOneSlot: reporter, to: nil)
            let comment = context.insertRow(commentEntity, values: commentValues)
            context.setToOne(ofRow: comment, toOneSlot: bugOfComment, toRow: bug1)
            context.setToOne(ofRow: comment, toOneSlot: author, to: person)
            try context.saveToStore()
        }
        let stored = try await ObjectContext(coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Bug>(sort: [Key("key").ascending])).map {
                ($0.key, $0.project?.key, $0.reporter?.name, $0.components.map(\.name), $0.comments.map(\.author?.name))
            }
        }
        try #require(stored.count == 2)
        #expect(stored[0].0 == "TIMOB-1" && stored[0].1 == "TIMOB" && stored[0].2 == nil)
        #expect(stored[0].3 == ["Runtime"] && stored[0].4 == ["ingo"])
        #expect(stored[1].0 == "TIMOB-2" && stored[1].1 == "TIMOB")
        #expect(stored[1].3.isEmpty && stored[1].4.isEmpty)
    }

    @Test("rows are validated like objects, and a rollback drops them")
    func rowsAreValidated() async throws {
        let coordinator = try makeCoordinator()
        var (entity, values) = try bugValues("TIMOB-2", in: coordinator)
        values[entity.attributeIndex["title"]!] = .null
        let context = ObjectContext(coordinator: coordinator)
        await context.perform { [entity, values] in _ = $0.insertRow(entity, values: values) }
        let failure = await #expect(throws: GraphError.self) { try await context.save() }
        #expect(failure?.code == .validation)
        #expect(failure?.message.contains("title") == true)
        await context.perform { $0.rollback() }
        #expect(await context.perform { ($0.hasChanges, $0.insertedRows.count) } == (false, 0))
        let empty = try await context.save()
        #expect(empty == nil)
    }
}
