import BugSquasherGraph
import BugSquasherModel
import BugSquasherPostgres
import BugSquasherTesting
import Foundation
import Synchronization
import Testing

@testable import BugSquasherDaemon

/// The bug model's Bug (swift-testing has a `Bug` trait too).
private typealias Bug = BugSquasherModel.Bug

/// The edit queue on a real PostgreSQL store (scripts/test.sh starts one; without it the test
/// says so and passes): on which thread its edits commit, and that each is answered with the
/// save it went out in.
@Suite("Edit queue", .dropsPostgresSchemas)
struct EditQueueTests {
    /// The name of the calling thread as the kernel has it (``ThreadExecutor`` names its threads
    /// there: `caller-0`, `edit-0`, …).
    private static func threadName() -> String {
        let name = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
        return name?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
    }

    /// An edit after a quiet spell commits on the thread that sent it, without a hop to the
    /// queue's thread; edits sent together from several threads meanwhile wait for it, and each
    /// is answered with a save that holds its object, committed on one thread or the other.
    @Test("a lone edit commits on its caller's thread; edits sent together are each answered", .timeLimit(.minutes(1)))
    func quietAndTogether() async throws {
        guard let url = TestPostgres.url(schemaPrefix: "eq") else { return }
        let store = PostgresStore(configuration: try PostgresStoreConfiguration(url: url))
        let coordinator = try StoreCoordinator(model: BugModel.model, store: store)
        // A save of this process is handed to the observers on the thread that committed it.
        let committedOn = Mutex<[Int64: String]>([:])
        store.observeCommits { didSave in
            let name = Self.threadName()
            committedOn.withLock { $0[didSave.token.rawValue] = name }
        }
        let ids = try await ObjectContext(coordinator: coordinator, name: "seed").perform { context in
            let bugs = (1...8).map { n in
                let bug = context.insert(Bug.self)
                (bug.key, bug.title, bug.status) = ("Q-\(n)", "t", "Open")
                return bug
            }
            try context.saveToStore()
            return bugs.map(\.objectID)
        }
        let queue = EditQueue(store: store)
        let callers = ThreadExecutor(name: "caller", threads: 4)

        try await Task.sleep(for: .milliseconds(20))
        let alone = try await Task(executorPreference: callers) {
            try await queue.edit(AttributeEditRequest(ids[0], attributes: ["status": "A"])).didSave
        }.value
        let token = try #require(alone).token.rawValue
        #expect(committedOn.withLock { $0[token] }?.hasPrefix("caller-") == true, "\(committedOn.withLock { $0 })")

        let answers = try await withThrowingTaskGroup(of: (Int, DidSave?).self) { group in
            for n in 0..<16 {
                group.addTask(executorPreference: callers) {
                    (
                        n,
                        try await queue.edit(
                            AttributeEditRequest(ids[n % 8], attributes: ["title": .string("burst \(n)")])
                        ).didSave
                    )
                }
            }
            return try await group.reduce(into: [Int: DidSave?]()) { $0[$1.0] = $1.1 }
        }
        #expect(answers.count == 16)
        for (n, answer) in answers {
            let save = try #require(answer, "edit \(n) changed nothing")
            #expect(save.updated.contains { $0.objectID == ids[n % 8] }, "edit \(n)")
            let thread = committedOn.withLock { $0[save.token.rawValue] } ?? ""
            #expect(thread.hasPrefix("caller-") || thread.hasPrefix("edit-"), "edit \(n) committed on \(thread)")
        }
        #expect(answers.values.allSatisfy { ($0?.token.rawValue ?? 0) > token })
        // Every bug holds one of its two burst titles.
        let title = try #require(BugModel.model.entity(named: "Bug")?.attributeIndex["title"])
        let titles = try store.newValues(for: ids).values.map { $0.attributes[title] }
        #expect(
            titles.count == 8
                && titles.allSatisfy {
                    if case .string(let text) = $0 { text.hasPrefix("burst ") } else { false }
                }, "\(titles)")
    }
}
