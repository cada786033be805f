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
    /// Where the ID was made, as `daemon-id.origin` says; `nil` when the file is missing (made
    /// by a squasherd that did not write it).
    var origin: IdentityOrigin? = nil
    /// Where the ID is now: the state directory it was read from, on this machine.
    var here = IdentityOrigin(machine: "", directory: "")

    /// The identity kept in `stateDirectory`, made and written there when it has none.
    static func load(stateDirectory: String, sharesStore: Bool) throws -> DaemonIdentity {
        let path = stateDirectory + "/daemon-id"
        let host = ProcessInfo.processInfo.hostName
        let here = IdentityOrigin.here(stateDirectory: stateDirectory)
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if id.count == 8, id.allSatisfy(\.isHexDigit) {
                let origin = (try? String(contentsOfFile: path + ".origin", encoding: .utf8)).flatMap(
                    IdentityOrigin.init(text:))
                return DaemonIdentity(id: id, host: host, sharesStore: sharesStore, origin: origin, here: here)
            }
        }
        return try DaemonIdentity(id: "", host: host, sharesStore: sharesStore, here: here)
            .renewed(stateDirectory: stateDirectory)
    }

    /// A new ID, written to `stateDirectory` with this place as its origin: at the first start,
    /// and when the state directory turns out to be a copy of a daemon that runs.
    func renewed(stateDirectory: String) throws -> DaemonIdentity {
        let id = String(UUID().uuidString.prefix(8)).lowercased()
        let path = stateDirectory + "/daemon-id"
        do {
            try Data((id + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw DaemonError(
                "Cannot write the daemon's ID to \(path): \(error.localizedDescription).",
                advice: "Make the state directory writable by squasherd's user.")
        }
        let renewed = DaemonIdentity(id: id, host: host, sharesStore: sharesStore, origin: nil, here: here)
        return try renewed.recordingOrigin(stateDirectory: stateDirectory)
    }

    /// This identity with this place written as its origin (`daemon-id.origin`).
    func recordingOrigin(stateDirectory: String) throws -> DaemonIdentity {
        let path = stateDirectory + "/daemon-id.origin"
        do {
            try Data(here.text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw DaemonError(
                "Cannot write where the daemon's ID was made to \(path): \(error.localizedDescription).",
                advice: "Make the state directory writable by squasherd's user.")
        }
        var recorded = self
        recorded.origin = here
        return recorded
    }

    /// Whether this daemon runs `job`: its own, or one recorded before jobs had owners.
    func runs(_ job: ImportJob) -> Bool {
        !sharesStore || job.owner == nil || job.owner == id
    }
}

/// Where a daemon ID was made: the machine (`/etc/machine-id`, or the host name where there is
/// none) and the state directory's path. A state directory copied to another machine or path (a
/// cloned VM, a restored backup, a copied directory) carries its ID along; the origin tells
/// squasherd to check that no running daemon still uses it (``SharedIdentityCheck``).
struct IdentityOrigin: Equatable, Sendable {
    /// The machine's ID, or its host name.
    var machine: String
    /// The state directory's absolute path.
    var directory: String

    /// This machine, and `stateDirectory` made absolute.
    static func here(stateDirectory: String) -> IdentityOrigin {
        let machineID = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return IdentityOrigin(
            machine: machineID.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.hostName,
            directory: URL(fileURLWithPath: stateDirectory).standardizedFileURL.path)
    }

    /// Reads the two lines ``text`` writes; `nil` when either is missing.
    init?(text: String) {
        var fields: [Substring: Substring] = [:]
        for line in text.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            fields[line[..<equals]] = line[line.index(after: equals)...]
        }
        guard let machine = fields["machine"], let directory = fields["directory"] else { return nil }
        (self.machine, self.directory) = (String(machine), String(directory))
    }

    init(machine: String, directory: String) {
        (self.machine, self.directory) = (machine, directory)
    }

    /// `machine=…` and `directory=…`, a line each.
    var text: String { "machine=\(machine)\ndirectory=\(directory)\n" }
}
