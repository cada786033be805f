import BugSquasherGraph
import BugSquasherModel
import BugSquasherStack
import Foundation
import Synchronization
import Testing

private typealias Bug = BugSquasherModel.Bug

@Suite("Persistent stack")
final class PersistentStackTests {
    let directory: URL
    let stack: PersistentStack

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-stack-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        stack = try PersistentStack(model: BugModel.model, storeURL: directory.appendingPathComponent("bugs.sqlite"))
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    func importBugs(_ keys: [String], status: String = "Open") async throws -> DidSave? {
        let importer = stack.importerContext()
        try await importer.perform { context in
            for key in keys {
                let bug =
                    try context.fetch(FetchRequest<Bug>(predicate: Key("key") == .string(key))).first
                    ?? context.insert(Bug.self)
                bug.key = key
                bug.title = "Bug \(key)"
                bug.status = status
            }
        }
        return try await importer.save()
    }

    @Test("the contexts get the merge policies of the stack")
    func policies() async throws {
        #expect(await stack.mainContext.mergePolicy == .mergeByPropertyStoreTrump)
        #expect(await stack.importerContext().mergePolicy == .mergeByPropertyObjectTrump)
        #expect(await stack.temporaryContext().mergePolicy == .rollback)
        #expect(try await stack.editorContext().mergePolicy == .mergeByPropertyObjectTrump)
        #expect(stack.mainCoordinator !== stack.writerCoordinator)
        #expect(stack.mainCoordinator.store === stack.writerCoordinator.store)
    }

    @Test("importer saves are merged into the main context, refreshing only registered objects")
    func smartMerge() async throws {
        _ = try await importBugs(["TIMOB-1", "TIMOB-2", "TIMOB-3"])
        let held = try await stack.mainContext.perform { context in
            let bug = try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1"))[0]
            _ = bug.status
            return bug.objectID
        }
        _ = try await importBugs(["TIMOB-1", "TIMOB-2", "TIMOB-4"], status: "Closed")
        let state = await stack.mainContext.perform { context in
            (context.registeredObjectIDs, (context.registeredObject(for: held) as? Bug)?.status)
        }
        #expect(state.0 == [held])
        #expect(state.1 == "Closed")
    }

    @Test("with shouldMergeIncomingSavedObjects off, the main context keeps its objects as they were")
    func mergeOff() async throws {
        _ = try await importBugs(["TIMOB-1"])
        let held = try await stack.mainContext.perform { context in
            let bug = try context.fetch(FetchRequest<Bug>())[0]
            _ = bug.status
            return bug.objectID
        }
        stack.shouldMergeIncomingSavedObjects = false
        _ = try await importBugs(["TIMOB-1"], status: "Closed")
        let status = await stack.mainContext.perform { ($0.registeredObject(for: held) as? Bug)?.status }
        #expect(status == "Open")
    }

    @Test("empty saves post nothing")
    func emptySave() async throws {
        let seen = Mutex(0)
        stack.observeDidSaves { _ in seen.withLock { $0 += 1 } }
        _ = try await importBugs(["TIMOB-1"])
        let empty = try await importBugs(["TIMOB-1"])
        #expect(empty == nil)
        #expect(seen.withLock { $0 } == 1)
    }

    @Test("a read-only main context refuses saves and editor contexts; temporary contexts never save")
    func readOnly() async throws {
        _ = try await importBugs(["TIMOB-1"])
        stack.isMainContextReadOnly = true
        await stack.mainContext.perform { context in
            let bug = context.insert(Bug.self)
            bug.key = "TIMOB-9"
        }
        await #expect { try await self.stack.mainContext.save() } throws: { ($0 as? GraphError)?.code == .readOnly }
        await #expect { try await self.stack.editorContext() } throws: { ($0 as? GraphError)?.code == .readOnly }
        await stack.mainContext.rollback()
        stack.isMainContextReadOnly = false

        let temporary = stack.temporaryContext()
        await temporary.perform { context in
            let bug = context.insert(Bug.self)
            bug.key = "TIMOB-8"
        }
        await #expect { try await temporary.save() } throws: { ($0 as? GraphError)?.code == .readOnly }
    }

    @Test("an editor's save goes through the main context to the store and is observed")
    func editor() async throws {
        _ = try await importBugs(["TIMOB-1"])
        let observed = Mutex<[DidSave]>([])
        stack.observeDidSaves { didSave in observed.withLock { $0.append(didSave) } }
        let editor = try await stack.editorContext()
        try await editor.perform { context in
            let bug = try context.fetch(FetchRequest<Bug>())[0]
            bug.status = "Edited"
        }
        let didSave = try await editor.saveToPersistentStore()
        #expect(didSave?.updated.count == 1)
        #expect(observed.withLock { $0.count } == 1)
        let stored = try await stack.temporaryContext().perform { try $0.fetch(FetchRequest<Bug>())[0].status }
        #expect(stored == "Edited")
    }

    /// Further saves are refused.
    @Test("a retired importer's save merges as usual but registers none of its inserts")
    func saveAndRetire() async throws {
        _ = try await importBugs(["TIMOB-1"])
        let cached = stack.writerCoordinator.cachedObjectCount
        var importer: ObjectContext? = stack.importerContext()
        try await importer!.perform { context in
            try context.fetch(FetchRequest<Bug>(predicate: Key("key") == "TIMOB-1"))[0].status = "Closed"
            for key in ["TIMOB-2", "TIMOB-3"] {
                let bug = context.insert(Bug.self)
                bug.key = key
                bug.title = "Bug \(key)"
                bug.status = "Open"
            }
        }
        let didSave = try await importer!.saveAndRetire()
        #expect(didSave?.inserted.count == 2)
        #expect(didSave?.updated.count == 1)
        // Only the fetched bug is registered with the writer's row cache, not the inserted ones.
        #expect(stack.writerCoordinator.cachedObjectCount == cached + 1)
        await #expect(throws: GraphError.self) { try await importer!.save() }
        importer = nil
        #expect(stack.writerCoordinator.cachedObjectCount == cached)
        let stored = try await stack.temporaryContext().perform { context in
            try context.fetch(FetchRequest<Bug>(sort: [Key("key").ascending])).map { "\($0.key) \($0.status)" }
        }
        #expect(stored == ["TIMOB-1 Closed", "TIMOB-2 Open", "TIMOB-3 Open"])
    }
}
