import BugSquasherGraph
import BugSquasherModel
import BugSquasherSQLite
import Foundation
import Testing

private typealias Bug = BugSquasherModel.Bug
private typealias Comment = BugSquasherModel.Comment

@Suite("Bug model")
struct BugModelTests {
    @Test("every entity maps to its class and declares a unique key")
    func entities() {
        let model = BugModel.model
        #expect(
            model.entities.map(\.name) == [
                "Bug", "Comment", "Component", "Person", "Project", "ImportJob", "ImportReject",
            ])
        #expect(model.entities.filter { $0.name != "ImportReject" }.allSatisfy { $0.uniqueKey != nil })
        #expect(model.entity(named: "Bug")?.objectType == Bug.self)
        #expect(Bug.entityName == "Bug" && Comment.entityName == "Comment" && Person.entityName == "Person")
        #expect(model.entity(named: "Bug")?.relationship(named: "comments")?.deleteRule == .cascade)
        #expect(model.entity(named: "Project")?.relationship(named: "bugs")?.deleteRule == .deny)
    }

    @Test("a job's states are written as the strings the wire documents; three of them are final")
    func jobStates() {
        #expect(
            JobState.allCases.map(\.rawValue) == ["uploading", "queued", "running", "finished", "failed", "aborted"])
        #expect(JobState.allCases.filter(\.isFinal) == [.finished, .failed, .aborted])
    }

    @Test("typed properties round-trip through an SQLite store")
    func typedProperties() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bs-model-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let coordinator = try StoreCoordinator(
            model: BugModel.model, store: SQLiteStore(url: directory.appendingPathComponent("bugs.sqlite")))
        let created = Date(timeIntervalSince1970: 1_302_834_219)
        let id = try await ObjectContext(coordinator: coordinator).perform { context -> ObjectID in
            let project = context.insert(Project.self)
            project.key = "TIMOB"
            let reporter = context.insert(Person.self)
            reporter.name = "user-1a2b3c4d"
            reporter.displayName = "Reporter"
            let component = context.insert(Component.self)
            component.name = "Android"
            let bug = context.insert(Bug.self)
            bug.key = "TIMOB-100"
            bug.title = "Crash on launch"
            bug.details = "{html}<b>boom</b>{html}"
            bug.status = "Open"
            bug.priority = "High"
            bug.labels = ["crash", "regression"]
            bug.created = created
            bug.project = project
            bug.reporter = reporter
            component.add(bug, to: "bugs")
            let comment = context.insert(Comment.self)
            comment.jiraID = "194980"
            comment.body = "Fixed in master"
            comment.author = reporter
            comment.bug = bug
            try context.saveToStore()
            return bug.objectID
        }
        let values = try await ObjectContext(coordinator: coordinator).perform { context in
            let bug = try context.existingObject(with: id) as! Bug
            return [
                bug.key, bug.title, bug.details ?? "", bug.priority ?? "", bug.labels.joined(separator: ","),
                "\(bug.created == created)", bug.project?.key ?? "", bug.reporter?.displayName ?? "",
                bug.components.map(\.name).joined(), bug.comments.map(\.body).joined(),
                bug.comments.first?.author?.name ?? "",
            ]
        }
        #expect(
            values == [
                "TIMOB-100", "Crash on launch", "{html}<b>boom</b>{html}", "High", "crash,regression", "true", "TIMOB",
                "Reporter", "Android", "Fixed in master", "user-1a2b3c4d",
            ])
    }
}
