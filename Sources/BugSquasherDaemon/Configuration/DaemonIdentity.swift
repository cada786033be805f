import BugSquasherModel
import Foundation

/// Who this daemon is among the daemons of a shared store: an ID kept in its state directory
/// (`daemon-id`, made at the first start), and its host. A job belongs to the daemon that
/// spooled its input, and only that daemon runs or resumes it (docs/DESIGN-NOTES.md, "Jobs belong
/// to the daemon that spooled them").
struct DaemonIdentity: Sendable {
    /// Eight hex digits, the same at every start on this state directory.
    let id: String
    /// The host name, for people.
    let host: String
    /// Whether other daemons use the store too; on a store of its own, every job is this daemon's.
    let sharesStore: Bool

    /// The identity kept in `stateDirectory`, made and written there when it has none.
    static func load(stateDirectory: String, sharesStore: Bool) throws -> DaemonIdentity {
        let path = stateDirectory + "/daemon-id"
        let host = ProcessInfo.processInfo.hostName
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if id.count == 8, id.allSatisfy(\.isHexDigit) {
                return DaemonIdentity(id: id, host: host, sharesStore: sharesStore)
            }
        }
        let id = String(UUID().uuidString.prefix(8)).lowercased()
        do {
            try Data((id + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw DaemonError(
                "Cannot write the daemon's ID to \(path): \(error.localizedDescription).",
                advice: "Make the state directory writable by squasherd's user.")
        }
        return DaemonIdentity(id: id, host: host, sharesStore: sharesStore)
    }

    /// Whether this daemon runs `job`: its own, or one recorded before jobs had owners.
    func runs(_ job: ImportJob) -> Bool {
        !sharesStore || job.owner == nil || job.owner == id
    }
}
