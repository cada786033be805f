import ArgumentParser
import BugSquasherGraph
import BugSquasherJSON
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation

/// `squasherctl jobs [JOB] [--rejects]`.
struct JobsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jobs",
        abstract: "List import jobs; show one job and its rejects, or follow it to its end (--wait).")

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "A job ID (default: list recent jobs).")
    var job: String?

    @Flag(help: "Print the job's reject report (line and reason).")
    var rejects = false

    @Flag(help: "Print JSON.")
    var json = false

    @Flag(
        help:
            "Show the job's progress and wait for its summary (exit 0 only if it finished); across a restart of squasherd it reconnects and goes on waiting (for up to 5 minutes without squasherd; exit 4 at once if squasherd cannot be reached at the start)."
    )
    var wait = false

    @Option(help: "How many of the most recent jobs to list (1 to 999).")
    var limit = 20

    /// Rejects asked for per call: the most squasherd answers at once.
    static let rejectsPage = 10_000

    func validate() throws {
        if wait && (job == nil || rejects || json) {
            throw ValidationError("--wait follows one job: give its ID, without --rejects or --json.")
        }
        if job?.trimmingCharacters(in: .whitespaces).isEmpty == true {
            throw ValidationError("The job ID is empty; squasherctl jobs lists the recent ones.")
        }
        if rejects && job == nil {
            throw ValidationError(
                "--rejects prints one job's rejects: give its ID (squasherctl jobs lists the recent ones).")
        }
        guard (1...999).contains(limit) else { throw ValidationError("--limit takes a count from 1 to 999.") }
    }

    func run() throws {
        if wait, let job {
            return try JobFollower(socket: sockets.read, progress: .onStandardError()).follow(job)
        }
        try withClient(sockets.read) { client in
            if let job {
                let reply = try client.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self)
                if rejects {
                    // All of them, a page of up to the most squasherd sends in one reply at a time.
                    var all: [WireReject] = []
                    var shown = 0
                    while true {
                        let reply = try client.call(
                            "io.bugsquasher.Jobs.Rejects",
                            RejectsParameters(job: job, limit: Self.rejectsPage, offset: shown), as: RejectsReply.self)
                        if json {
                            all += reply.rejects
                        } else {
                            for reject in reply.rejects { print("line \(reject.line): \(printable(reject.reason))") }
                        }
                        shown += reply.rejects.count
                        if reply.more != true || reply.rejects.isEmpty { break }
                    }
                    if json { try printJSON(RejectsReply(rejects: all)) }
                } else if json {
                    try printJSON(reply)
                } else {
                    print(describe(reply.job))
                    if let columns = reply.job.columns { print("columns: \(printable(columns))") }
                }
            } else {
                // One more than shown: whether there are older ones to mention.
                var reply = try client.call(
                    "io.bugsquasher.Jobs.List", LimitParameter(limit: limit + 1), as: JobsReply.self)
                let older = reply.jobs.count > limit
                reply.jobs = Array(reply.jobs.prefix(limit))
                if json { try printJSON(reply) } else { for job in reply.jobs { print(describe(job)) } }
                if older {
                    printError(
                        "squasherctl: \(limit == 1 ? "only the most recent job is" : "the \(limit) most recent jobs are") shown; there are older ones (--limit shows more)."
                    )
                }
            }
        }
    }

    private func describe(_ job: WireJob) -> String {
        "\(job.id)  \(job.state.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)) \(printable(job.name, limit: 100))  \(job.format)  read \(job.recordsRead), imported \(job.imported), rejected \(job.rejected)\(took(job))\(job.error.map { "  error: \(printable($0))" } ?? "")"
    }
}

/// `squasherctl status`.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show the daemon's store, health, token, subscribers and running job.",
        discussion:
            "Exits 0 when the daemon is healthy and 5 when it is degraded (a store that does not answer or refused a write in the last 5 minutes, a job that failed in the last hour, subscribers dropped for falling behind in the last 5 minutes), printing the status either way; 4 when it cannot be reached. With --json the shape is StatusReply's (docs/PROTOCOL.md), stable for monitoring checks."
    )

    @OptionGroup var sockets: SocketOptions

    @Flag(help: "Print JSON.")
    var json = false

    func run() throws {
        let status = try withClient(sockets.read) {
            try $0.call("io.bugsquasher.Jobs.Status", Empty(), as: StatusReply.self)
        }
        // Degraded: the status is printed all the same, and the exit status says so.
        let degraded = status.health == "degraded"
        if json {
            try printJSON(status)
            if degraded { throw Exit.degraded }
            return
        }
        print("store \(status.storeIdentifier)\(status.store.map { ": " + $0 } ?? "")")
        if let health = status.health { print("health: \(health)") }
        // The store's problem has a line of its own below, not a second one here.
        for problem in status.problems ?? [] where problem.code != "store-unavailable" || status.storeProblem == nil {
            print("  \(problem.code): \(printable(problem.message, limit: 400))")
        }
        if let problem = status.storeProblem { print("STORE PROBLEM: \(printable(problem, limit: 400))") }
        // With the store out of reach the daemon cannot count them: not zero, unknown.
        let stored =
            status.storeProblem == nil
            ? "bugs \(status.bugs), history token \(status.token)" : "bugs and history token unknown (no store)"
        print(
            "\(stored), subscribers \(status.subscribers), job followers \(status.jobFollowers ?? 0), conflicts resolved \(status.conflictsResolved ?? 0)"
        )
        if let job = status.activeJob {
            print(
                "importing job \(job.id) (\(printable(job.name, limit: 100))): \(job.recordsRead) read, \(job.rejected) rejected, \(job.bytesTotal > 0 ? job.bytesDone * 100 / job.bytesTotal : 0)%"
            )
        } else if let wait = status.waitingJob {
            print(
                "job \(wait.job) waits to resume since \(wait.since): \(printable(wait.reason, limit: 200)); it goes on from its last committed chunk once the store takes writes"
            )
        } else {
            print("idle")
        }
        if let daemons = status.daemons { Self.printDaemons(daemons, this: status.daemon) }
        if degraded { throw Exit.degraded }
    }

    /// The daemons of a shared store, one per line; this one marked, silent ones called gone.
    static func printDaemons(_ daemons: [WireDaemon], this: String?) {
        print("daemons attached to the store: \(daemons.count)")
        for daemon in daemons {
            let seen =
                daemon.silentSeconds > StoreMember.silentAfter
                ? "silent for \(Int(daemon.silentSeconds)) s (stopped or cut off)" : "answering"
            print(
                "  \(daemon.id) on \(printable(daemon.host, limit: 64))\(daemon.id == this ? " (this one)" : ""): token \(daemon.token), \(daemon.behind) behind, \(seen)"
            )
        }
    }
}

/// `squasherctl metrics`: the daemon's metrics, as its endpoint serves them.
struct MetricsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics", abstract: "Print squasherd's metrics in the Prometheus text format.",
        discussion:
            "The same text squasherd's metrics endpoint serves (metrics_listen, or squasherd-metrics.socket), read over the read socket: for a machine without Prometheus. What each metric means: docs/OPERATIONS.md, Monitoring."
    )

    @OptionGroup var sockets: SocketOptions

    func run() throws {
        let reply = try withClient(sockets.read) {
            try $0.call("io.bugsquasher.Jobs.Metrics", Empty(), as: MetricsReply.self)
        }
        print(reply.text, terminator: reply.text.hasSuffix("\n") ? "" : "\n")
    }
}

/// `squasherctl get KEY`.
struct GetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "get", abstract: "Show one bug by key.")

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The bug's key, such as TIMOB-100.")
    var key: String

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws { try validateKey(key) }

    func run() throws {
        let (row, labels) = try withClient(sockets.read) { client -> (WireRow?, [String: String]) in
            let row = try client.fetch(
                FetchParameters(entity: "Bug", predicate: equals("key", key), limit: 1, result: "rows")
            ).rows?.first
            guard let row, !json else { return (row, [:]) }
            return (row, Self.labels(ofToOnesOf: row, client: client))
        }
        guard let row else {
            printError("squasherctl: no bug with key \(printable(key))")
            throw Exit.notFound
        }
        if json {
            try printJSON(row)
            return
        }
        print("\(row.id)  version \(row.version)")
        for (name, value) in row.values.dictionary.sorted(by: { $0.key < $1.key }) where value != .null {
            print("  \(name): \(labels[name] ?? display(value))")
        }
    }

    /// What a person reads for the objects a bug's to-one relationships point to, by
    /// relationship name: a project's key and name, a person's name and display name (`--json`
    /// keeps the IDs). Best effort: an object deleted meanwhile, or a failed call, leaves the ID.
    static func labels(ofToOnesOf row: WireRow, client: BlockingVarlinkClient) -> [String: String] {
        let toOnes = BugModel.model.entity(named: "Bug")?.toOneRelationships.map(\.name) ?? []
        let ids = Dictionary(
            uniqueKeysWithValues: toOnes.compactMap { name in row.values[name]?.stringValue.map { (name, $0) } })
        guard !ids.isEmpty,
            let targets = try? client.call(
                "io.bugsquasher.Store.Values", IDsParameters(ids: Set(ids.values).sorted()), as: RowsReply.self
            ).rows
        else { return [:] }
        var byID: [String: String] = [:]
        for target in targets {
            let text = { (name: String) in target.values[name].flatMap(\.stringValue) }
            guard let label = text("key") ?? text("name") else { continue }
            let detail = (text("key") != nil ? text("name") : text("displayName")).flatMap { $0 == label ? nil : $0 }
            byID[target.id] = printable(label, limit: 200) + (detail.map { " (\(printable($0, limit: 200)))" } ?? "")
        }
        return ids.compactMapValues { byID[$0] }
    }
}

/// `squasherctl list`.
struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List objects matching a predicate.",
        discussion:
            #"Example: squasherctl list --where 'status == "Open" AND project.key == "TIMOB"' --sort -created --limit 20"#
    )

    @OptionGroup var sockets: SocketOptions

    @Option(help: "The entity (\(BugModel.entities.map(\.name).joined(separator: ", "))).")
    var entity = "Bug"

    @Option(
        name: .customLong("where"),
        help:
            "A predicate: key == \"TIMOB-1\", status IN (\"Open\", \"Reopened\"), title CONTAINS[c] \"crash\", AND/OR/NOT."
    )
    var predicate: String?

    // Unconditional: `--sort -created` and `--limit -1` take the value, not an option.
    @Option(parsing: .unconditional, help: "Comma-separated key paths to sort by; prefix - for descending.")
    var sort: String?

    @Option(parsing: .unconditional, help: "At most this many.")
    var limit = 50

    @Option(parsing: .unconditional, help: "Skip this many first.")
    var offset = 0

    @Flag(help: "Print only the number of matching objects after --offset (--limit does not apply).")
    var count = false

    @Flag(help: "Print JSON rows.")
    var json = false

    func validate() throws {
        if limit < 0 || offset < 0 { throw ValidationError("--limit and --offset take a count, 0 or more.") }
        guard BugModel.model.entity(named: entity) != nil else {
            throw ValidationError(
                "There is no entity '\(entity)'; give one of \(BugModel.entities.map(\.name).joined(separator: ", ")).")
        }
        // An empty key path (`--sort ''`, `--sort a,,b`) would sort by nothing without a word.
        if let sortKeys, sortKeys.contains(where: { $0.isEmpty || $0 == "-" }) {
            throw ValidationError(
                "--sort '\(sort ?? "")' has an empty key path; give comma-separated key paths such as -created,key (a - before one sorts it descending)."
            )
        }
    }

    /// The key paths of `--sort`, in order, as given (empty ones too, which validation refuses).
    private var sortKeys: [String]? {
        sort?.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// The rows `list` asks for per call.
    static let pageSize = 1_000

    func run() throws {
        let sortKeys = self.sortKeys
        if count {
            let reply = try withClient(sockets.read) { client in
                try client.fetch(
                    FetchParameters(
                        entity: entity, predicate: predicate, sort: sortKeys, offset: offset, result: "count"))
            }
            print(reply.count ?? 0)
            return
        }
        // Pages are fetched, and printed, until `--limit` or the end: a page ends the result
        // when it is short of what was asked and squasherd did not say `more` (it returns at
        // most 10,000 rows a call and says `more` when its cap cut a page).
        var rows: [WireRow] = []
        var printed = 0
        try withClient(sockets.read) { client in
            while printed < limit {
                // At most 1,000 rows a call, so that a page of long descriptions stays well
                // inside the 64 MiB a reply may have (BlockingVarlinkClient.maximumReplySize).
                let asked = min(limit - printed, Self.pageSize)
                let page = try client.fetch(
                    FetchParameters(
                        entity: entity, predicate: predicate, sort: sortKeys, limit: asked, offset: offset + printed,
                        result: "rows"))
                let pageRows = page.rows ?? []
                if json { rows.append(contentsOf: pageRows) } else { pageRows.forEach(printLine) }
                printed += pageRows.count
                guard page.more == true || pageRows.count == asked, !pageRows.isEmpty else { break }
            }
        }
        if json { try printJSON(rows) }
    }

    /// One row on one line: its key (or name, job ID, comment ID), its status, and a title (or
    /// state, the start of a comment's body, a display name, a project's name).
    private func printLine(_ row: WireRow) {
        let text = { (name: String) in row.values[name].flatMap(\.stringValue) }
        let labelName = ["key", "name", "jobID", "jiraID"].first { text($0) != nil }
        let label = labelName.flatMap(text) ?? row.id
        let title =
            text("title") ?? text("state") ?? text("body").map { String($0.prefix(60)) } ?? text("displayName")
            ?? (labelName == "name" ? nil : text("name")) ?? ""
        let status = text("status").map { "[\($0)] " } ?? ""
        let rest = printable(status, limit: 60) + printable(title, limit: 200)
        print(rest.isEmpty ? printable(label, limit: 200) : "\(printable(label, limit: 200))  \(rest)")
    }
}

/// Prints a value that writes itself, such as the events `watch` and `subscribe` print for every
/// save: written by hand, keys sorted, without `JSONEncoder` or a dynamic cast, and straight to
/// standard output (see ``Squasherctl/writeOutput(_:)``).
func printJSON<T: Encodable & JSONWritable>(_ value: T) throws {
    var writer = JSONWriter()
    value.write(to: &writer)
    try Squasherctl.writeOutput(writer.line())
}

/// Prints a value as JSON on one line.
func printJSON<T: Encodable>(_ value: T) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

/// A JSON value for people.
func display(_ value: JSONValue) -> String {
    switch value {
    case .null: "nil"
    case .bool(let b): String(b)
    case .int(let i): String(i)
    case .double(let d): String(d)
    case .string(let s): printable(s, limit: 200)
    case .array(let a): "[" + a.map(display).joined(separator: ", ") + "]"
    case .object(let o): "{" + o.map { "\($0.key): \(display($0.value))" }.joined(separator: ", ") + "}"
    }
}

/// `squasherctl update KEY field=value…`: edits a bug through the daemon's editor context.
struct UpdateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Change attributes of one bug (needs the write socket).",
        discussion: """
            Example: squasherctl update TIMOB-100 status=Closed priority=High

            Prints the version that holds the values. With --if-version, the change applies only to the bug at \
            that version (the one `get --json` read): at another, nothing changes and squasherctl exits 6 with the \
            version it is at, so that a script can read it again and retry (a compare-and-set).
            """
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The bug's key.")
    var key: String

    @Argument(
        help:
            "Assignments name=value (strings; dates as ISO 8601; 'nil' clears an optional attribute or relationship; project, reporter and assignee take a project key, a person's name, or an object ID)."
    )
    var assignments: [String]

    @Option(help: "Change the bug only if it is at this version (`get --json` gives it); exit 6 if not.")
    var ifVersion: Int64?

    func validate() throws {
        try validateKey(key)
        if let ifVersion, ifVersion < 1 {
            throw ValidationError("--if-version takes a version of the bug, 1 or more (get --json gives it).")
        }
    }

    func run() throws {
        var values: [String: JSONValue] = [:]
        for assignment in assignments {
            let parts = assignment.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(
                String.init)
            guard parts.count == 2, !parts[0].isEmpty else {
                printError("squasherctl: '\(assignment)' is not name=value")
                throw ExitCode.validationFailure
            }
            guard values[parts[0]] == nil else {
                printError("squasherctl: '\(parts[0])' is given twice; give each name once")
                throw ExitCode.validationFailure
            }
            values[parts[0]] = parts[1] == "nil" ? .null : .string(parts[1])
        }
        let id = try withClient(sockets.read) { client in
            // A to-one relationship named by its destination's unique key (project=TIMOB)
            // becomes that object's ID; an object ID goes as it is.
            for (name, value) in values {
                guard case .string(let text) = value, !text.hasPrefix("x-bugsquasher://"),
                    let relationship = BugModel.model.entity(named: "Bug")?.relationship(named: name),
                    !relationship.isToMany,
                    let destination = BugModel.model.entity(named: relationship.destination),
                    let unique = destination.uniqueKey
                else { continue }
                guard
                    let target = try client.fetch(
                        FetchParameters(entity: destination.name, predicate: equals(unique, text), limit: 1)
                    ).ids?.first
                else {
                    printError(
                        "squasherctl: no \(destination.name) with \(unique) \(printable(text)); '\(name)' takes the \(unique) of an existing \(destination.name), its object ID, or nil to clear it"
                    )
                    throw Exit.notFound
                }
                values[name] = .string(target)
            }
            return try bugID(withKey: key, from: client)
        }
        let reply = try withClient(sockets.write) { client in
            do {
                return try client.call(
                    "io.bugsquasher.Import.Update", UpdateParameters(id: id, values: values, ifVersion: ifVersion),
                    as: UpdateReply.self)
            } catch let error as VarlinkError where error.name == "io.bugsquasher.Import.ObjectNotFound" {
                printError("squasherctl: no bug with key \(printable(key)) any more: it was deleted as it was updated")
                throw Exit.notFound
            } catch let error as VarlinkError where exitStatus(of: error) == Exit.changed {
                let now = error.parameters["version"]?.intValue.map(String.init) ?? "?"
                printError(
                    "squasherctl: \(printable(key)) is at version \(now), not \(ifVersion ?? 0): it changed since that version was read, and nothing was changed. Read it again (get --json), then update it with --if-version \(now)."
                )
                throw Exit.changed
            }
        }
        print("\(key) is now version \(reply.version) (token \(reply.token))")
    }
}

struct DeleteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete one bug and its comments (needs the write socket).",
        discussion: """
            Example: squasherctl delete TIMOB-100

            Subscribers holding the bug see it deleted. A bug edited all the while it was being deleted (for 3 s) is \
            left as it is, with exit status 75: try again.
            """
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "The bug's key.")
    var key: String

    func validate() throws { try validateKey(key) }

    func run() throws {
        let id = try withClient(sockets.read) { client in try bugID(withKey: key, from: client) }
        let reply = try withClient(sockets.write) { client in
            do {
                return try client.call("io.bugsquasher.Import.Delete", DeleteParameters(id: id), as: DeleteReply.self)
            } catch let error as VarlinkError where error.name == "io.bugsquasher.Import.ObjectNotFound" {
                printError("squasherctl: no bug with key \(printable(key)) any more: it was deleted meanwhile")
                throw Exit.notFound
            }
        }
        print("\(key) deleted (token \(reply.token))")
    }
}

/// The ID of the bug with `key`, asked of `client`; says so and exits 3 when there is none.
func bugID(withKey key: String, from client: BlockingVarlinkClient) throws -> String {
    guard let id = try client.fetch(FetchParameters(entity: "Bug", predicate: equals("key", key), limit: 1)).ids?.first
    else {
        printError("squasherctl: no bug with key \(printable(key))")
        throw Exit.notFound
    }
    return id
}

/// Refuses a bug key no bug can have, which "no bug with key …" (or a subscriber waiting for it
/// for good) would not explain: empty or blank, or with spaces around it or a control character
/// in it (imports and `update` refuse such keys). `place` says where the key came from.
func validateKey(_ key: String, place: String = "") throws {
    if key.allSatisfy(\.isWhitespace) {
        throw ValidationError("The bug key is empty\(place); give one such as TIMOB-100.")
    }
    if EntityDescription.hasStrayCharacters(inKey: key) {
        let shown = key.count > 80 ? String(key.prefix(80)) + "…" : key
        throw ValidationError(
            "The key \(String(reflecting: shown))\(place) has spaces around it or a control character in it, which no bug's key has; give it without them."
        )
    }
}

/// The predicate `attribute == "value"` in the text syntax, the value quoted as the parser
/// reads it back (any character, a newline or a quote included).
func equals(_ attribute: String, _ value: String) -> String {
    (Key(attribute) == .string(value)).text
}

extension BlockingVarlinkClient {
    /// Calls `io.bugsquasher.Store.Fetch`. A reply without the result asked for (`ids`, `rows`
    /// or `count`) is not squasherd's: read as an empty result, it would print "no bug" or 0
    /// for a program that answers anything, so it fails as an unreachable daemon does.
    func fetch(_ parameters: FetchParameters) throws -> FetchReply {
        let reply = try call("io.bugsquasher.Store.Fetch", parameters, as: FetchReply.self)
        let result = parameters.result ?? "ids"
        let present =
            switch result {
            case "rows": reply.rows != nil
            case "count": reply.count != nil
            default: reply.ids != nil
            }
        guard present else {
            throw TransportError(
                .unexpectedReply,
                "The answer from \(path) to io.bugsquasher.Store.Fetch has no '\(result)', which squasherd always sends: another program may be listening there.",
                advice: "Pass the path of squasherd's socket.", path: path)
        }
        return reply
    }
}
