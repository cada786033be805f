import Algorithms
import ArgumentParser
import BugSquasherClient
import BugSquasherGraph
import BugSquasherJSON
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Logging
import Synchronization
import UnixSignals

/// `squasherctl watch`: prints the change feed. It follows the daemon across restarts and
/// resyncs, resuming after the last token it printed, so that it prints every save once.
struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch", abstract: "Print every committed save as it happens (Ctrl-C to stop).",
        discussion:
            "When squasherd stops or restarts, or tells a slow watcher to resync, watch reconnects and resumes after the last token it printed: no save is printed twice or skipped, in token order. A watcher that falls behind receives the saves it missed merged into one (printed with the newest token), as docs/PROTOCOL.md describes."
    )

    @OptionGroup var sockets: SocketOptions

    @Option(parsing: .unconditional, help: "Replay the saves after this history token first.")
    var since: Int64?

    @Flag(help: "Print each reply as JSON (one line each).")
    var json = false

    @Flag(help: "Include new values (with --json).")
    var values = false

    @Flag(name: .shortAndLong, help: "List the object IDs of each save.")
    var verbose = false

    func validate() throws {
        try validateToken(since)
        if values && !json {
            throw ValidationError("--values adds the new values to the JSON lines: give it with --json.")
        }
    }

    func run() async throws {
        let (endpoint, since, json, values, verbose) = (sockets.read, since, json, values, verbose)
        let path = endpoint.path
        // A daemon that takes the connection and never answers (stopped, wedged, or another
        // program on the path) ends the command after --timeout, as it ends every other one.
        let firstReply = FirstReplyDeadline(path: path, limit: sockets.read.timeout)
        try await untilSignal {
            var progress = FeedProgress(position: since)
            // The store followed: a squasherd back on another one has tokens of its own.
            var followed: String?
            while true {
                do {
                    let served = try endpoint.connect().call("io.bugsquasher.Store.Info", Empty(), as: StoreInfo.self)
                        .storeIdentifier
                    if let followed, served != followed { throw StoreReplaced(held: followed, served: served) }
                    followed = served
                    try await VarlinkStream.call(
                        path: path, method: "io.bugsquasher.Changes.Subscribe",
                        parameters: SubscribeParameters(since: progress.position, includeValues: values)
                    ) { replies in
                        for try await (event, _) in replies.decoding(SubscribeReply.self) {
                            guard progress.take(event, firstReply: firstReply) else { continue }
                            try Self.print(event, json: json, verbose: verbose)
                        }
                    }
                } catch {
                    if let ending = Self.ending(error, connected: progress.connected, path: path) { throw ending }
                    // squasherd went away, or is not back yet: retry below.
                }
                // Ctrl-C or SIGTERM ended the feed, not squasherd: nothing to resume.
                if Task.isCancelled { return }
                guard progress.connected else {
                    // The feed ended before it began: squasherd closed the connection at once.
                    printError("squasherctl: \(TransportError.closedBeforeAnswering(path).wordedForSquasherd.message)")
                    throw Exit.unreachable
                }
                if progress.resyncReason != nil {
                    // squasherd ended the feed with a resync, printed with its reason and token:
                    // the watch goes on from there at once, with nothing more to say.
                    progress.resyncReason = nil
                    continue
                }
                if !progress.interrupted {
                    FileHandle.standardError.write(
                        Data(
                            "the feed ended (squasherd stopped, or the connection broke); resuming after token \(progress.position ?? 0)\n"
                                .utf8))
                    progress.interrupted = true
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Where a watch is in the feed, across its reconnections.
    private struct FeedProgress {
        /// The token of the last save printed, or of the feed's start.
        var position: Int64?
        /// A feed has begun: a failure before that ends the watch instead of a reconnection.
        var connected = false
        /// The feed ended, and the watch is reconnecting.
        var interrupted = false
        /// Why squasherd ended the last feed with a resync (``ResyncReason``); `nil` when it
        /// ended otherwise.
        var resyncReason: String?

        /// Takes in a reply of the feed; `false` for a save printed already, which a resumed
        /// feed skips.
        mutating func take(_ event: SubscribeReply, firstReply: FirstReplyDeadline) -> Bool {
            switch event.event {
            case "subscribed":
                firstReply.arrived()
                if interrupted {
                    FileHandle.standardError.write(
                        Data("reconnected; resuming after token \(position ?? event.token)\n".utf8))
                }
                connected = true
                interrupted = false
                if position == nil { position = event.token }
            case "resync":
                position = event.resyncFrom ?? position
                resyncReason = event.reason ?? ResyncReason.behind
            default:
                if let save = event.save {
                    // A resumed feed never repeats a save already printed.
                    if let position, save.token <= position { return false }
                    position = save.token
                }
            }
            return true
        }
    }

    /// What ends the watch after its feed failed with `error`, said to the user; `nil` when the
    /// feed is followed again (squasherd went away, or is not back yet).
    private static func ending(_ error: any Error, connected: Bool, path: String) -> (any Error)? {
        switch error {
        case let exit as ExitCode:
            // The output failed (said already): nothing to resume.
            return exit
        case let error as StoreReplaced:
            printError(
                "squasherctl: squasherd now serves another store (\(error.served)) than the one this watch followed (\(error.held)); that store's tokens do not continue these. Run squasherctl watch again (with --since 0 for its whole history)."
            )
            return Exit.failed
        case let error as VarlinkError:
            // Refused (a token ahead of the store, say): said plainly, exit 2.
            return refused(error)
        case let error as TransportError where !connected:
            printError("squasherctl: \(error.wordedForSquasherd.message)")
            return Exit.unreachable
        case let error as JSONReader.Failure where !connected:
            printError(
                "squasherctl: The answer from \(path) is not a Varlink reply (\(error)). Is squasherd listening on this path, or another program?"
            )
            return Exit.unreachable
        case _ where !connected && !Task.isCancelled:
            // Reset by the daemon before it answered (NIO's IOError).
            printError(
                "squasherctl: \(TransportError.closedBeforeAnswering(path).wordedForSquasherd.message) (\(error))")
            return Exit.unreachable
        default:
            return nil
        }
    }

    private static func print(_ event: SubscribeReply, json: Bool, verbose: Bool) throws {
        if json {
            try printJSON(event)
        } else {
            switch event.event {
            case "subscribed": Swift.print("subscribed at token \(event.token)")
            case "resync" where event.reason == ResyncReason.historyExpired:
                Swift.print(
                    "the saves after the last token printed were pruned from the history (retention); resuming after token \(event.resyncFrom ?? event.token)"
                )
            case "resync": Swift.print("fell behind; resuming after token \(event.resyncFrom ?? event.token)")
            default:
                guard let save = event.save else { return }
                Swift.print(
                    "token \(save.token): \(save.inserted.count) inserted, \(save.updated.count) updated, \(save.deleted.count) deleted"
                )
                if verbose {
                    for change in save.inserted { Swift.print("  + \(change.id) v\(change.version)") }
                    for change in save.updated {
                        Swift.print("  ~ \(change.id) v\(change.version) \((change.keys ?? []).joined(separator: ","))")
                    }
                    for change in save.deleted { Swift.print("  - \(change.id)") }
                }
            }
            // Each save is out before the next one is read (a JSON line is written at once);
            // a full disk ends the watch.
            try Squasherctl.flushOutput()
        }
    }
}

/// `squasherctl subscribe KEY...`: holds bugs registered in a subscriber context and prints
/// each refresh.
struct SubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Hold bugs registered and print each refresh (Ctrl-C to stop).",
        discussion:
            "A key no bug has yet is waited for: the bug is held from the save that creates it on (an 'added' event; if squasherd cannot reach its store to fetch it then, the fetch is tried again every few seconds until it can), and a held bug that is deleted is waited for again. With --json, prints one JSON line per event: ready, added, refresh, catch-up, and stats on exit (what the subscriber loaded)."
    )

    @OptionGroup var sockets: SocketOptions

    @Argument(help: "Bug keys to hold.")
    var keys: [String] = []

    @Option(
        name: .customLong("keys-from"),
        help: ArgumentHelp(
            "Also hold the keys in this file, one per line ('-' reads standard input); for thousands of keys, which parse slowly as arguments.",
            valueName: "file"))
    var keysFile: String?

    @Option(
        parsing: .unconditional, help: "Resume from this history token (a restarted subscriber passes its last one).")
    var since: Int64?

    @Flag(help: "Print JSON lines.")
    var json = false

    @Flag(
        help:
            "Receive every change and filter locally, instead of letting squasherd filter to the held bugs (for comparison)."
    )
    var all = false

    struct BugState: Codable, Sendable {
        var id: String
        var key: String
        var version: Int64
        var status: String
        var title: String
    }

    struct Event: Codable, Sendable {
        var event: String
        var token: Int64?
        var bugs: [BugState]?
        var deleted: [String]?
        var loaded: [String]?
        var valueRequests: Int?
        var fetches: Int?
        var bytesReceived: Int?
        /// When the event was printed, in microseconds since 1970.
        var at: Int64 = Int64(Date().timeIntervalSince1970 * 1_000_000)
    }

    func validate() throws {
        try validateToken(since)
        if keys.isEmpty && keysFile == nil {
            throw ValidationError("Give the keys of the bugs to hold, as arguments or with --keys-from FILE.")
        }
        for key in keys { try validateKey(key) }
    }

    /// The keys given as arguments and those of `--keys-from`, in order, each once.
    private func allKeys() throws -> [String] {
        var keys = self.keys
        if let keysFile {
            let data: Data?
            if keysFile == "-" {
                data = try? FileHandle.standardInput.readToEnd() ?? Data()
            } else {
                data = FileManager.default.contents(atPath: keysFile)
            }
            guard let data else {
                var status = stat()
                let reason =
                    stat(keysFile, &status) != 0
                    ? "no such file"
                    : status.st_mode & S_IFMT == S_IFDIR
                        ? "it is a directory"
                        : status.st_mode & S_IFMT != S_IFREG
                            ? "it is not a regular file (a device or a socket?)"
                            : "permission denied"
                throw ValidationError("Cannot read --keys-from \(keysFile): \(reason).")
            }
            // Blank lines and the spaces around a key (a pasted list) are not part of the keys;
            // lines end in LF or CRLF (a list saved on Windows). Split as bytes, and each line
            // checked as it comes: a binary file given by mistake is refused at its first line,
            // not after its whole length was decoded as text.
            // A byte-order mark (a list saved by some Windows editors) is not part of the first key.
            let bytes = data.starts(with: [0xEF, 0xBB, 0xBF]) ? data.dropFirst(3) : data[...]
            for (index, line) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
                guard let text = String(validating: line, as: UTF8.self) else {
                    throw ValidationError(
                        "Line \(index + 1) of --keys-from \(keysFile) is not UTF-8 text (is it the list of keys, one per line?)."
                    )
                }
                let key = text.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\r")))
                guard !key.isEmpty else { continue }
                try validateKey(key, place: " (line \(index + 1) of --keys-from)")
                keys.append(key)
            }
            if keys.isEmpty { throw ValidationError("--keys-from \(keysFile) holds no keys; give one per line.") }
        }
        var seen = Set<String>()
        return keys.filter { seen.insert($0).inserted }
    }

    func run() async throws {
        let keys: [String]
        do { keys = try allKeys() } catch let error as ValidationError {
            printError("squasherctl: \(error.message)")
            throw ExitCode.validationFailure
        }
        let subscriber = try makeSubscriber(keys)
        let (initial, missing) = try await holdInitial(keys, subscriber: subscriber)
        do {
            // Keys waited for, and the held bugs' keys by ID; read and changed in the context's
            // isolation only, where each event is handled as it is merged.
            let held = HeldKeys(
                (
                    missing: missing,
                    keysByID: Dictionary(initial.map { ($0.id, $0.key) }, uniquingKeysWith: { first, _ in first })
                ))
            // Asks for another try at holding the bugs created with keys waited for, after a
            // fetch of them failed (squasherd could not reach its store): their inserts have
            // gone by, so no later event would bring them.
            let (retries, retry) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            try await untilSignal {
                // Said once SIGTERM is trapped: a stop right after "ready" still ends with stats.
                try emit(Event(event: "ready", token: subscriber.lastToken?.rawValue, bugs: initial))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        try await subscriber.run { context, refresh in
                            try handle(refresh, in: context, held: held, retry: retry)
                        }
                    }
                    group.addTask {
                        for await _ in retries { try await retryHoldingWaiting(subscriber: subscriber, held: held) }
                    }
                    try await group.next()
                    group.cancelAll()
                }
            }
        } catch is CancellationError {
        } catch let error as VarlinkError {
            // Refused for good (the keys' predicate past max_message_bytes): retrying would not help.
            throw refused(error)
        } catch let error as StoreReplaced {
            printError(
                "squasherctl: squasherd now serves another store (\(error.served)) than the one these bugs were held in (\(error.held)); run squasherctl subscribe again to hold them there."
            )
            throw Exit.failed
        }
        let stats = subscriber.store.statistics
        try emit(
            Event(
                event: "stats", token: subscriber.lastToken?.rawValue,
                loaded: stats.loadedObjects.map(\.uriString).sorted(), valueRequests: stats.valueRequests,
                fetches: stats.fetches, bytesReceived: subscriber.bytesReceived))
    }

    /// The keys waited for (no bug has them yet), and the held bugs' keys by ID.
    private typealias Held = (missing: Set<String>, keysByID: [String: String])

    /// ``Held``, shared by the feed's handler and the retries of a failed fetch.
    private final class HeldKeys: Sendable {
        let value: Mutex<Held>
        init(_ held: Held) { value = Mutex(held) }
    }

    /// Connects the subscriber that holds the bugs with these keys, and is told of bugs created
    /// with them.
    private func makeSubscriber(_ keys: [String]) throws -> Subscriber {
        var logger = Logger(label: "squasherctl")
        // Notices too: the feed back after an interruption, a resync asked for.
        logger.logLevel = .notice
        do {
            return try Subscriber(
                socketPath: sockets.read.path, since: since.map(HistoryToken.init(rawValue:)), registeredOnly: !all,
                insertsOf: "Bug",
                matching: Key("key").in(keys.map { .string($0) }), timeout: sockets.read.timeout, logger: logger
            )
        } catch let error as GraphError {
            // squasherd could not answer (its store out of reach), or could not be reached.
            printError("squasherctl: \(wording(of: error))")
            throw exitStatus(of: error)
        } catch {
            printError("squasherctl: \(error)")
            throw Exit.unreachable
        }
    }

    /// Holds the bugs that have these keys now; returns them, and the keys no bug has yet (which
    /// it says).
    private func holdInitial(
        _ keys: [String], subscriber: Subscriber
    ) async throws -> (initial: [BugState], missing: Set<String>) {
        // The subscriber's feed starts at the token it connected at, before this fetch: a bug
        // created after it is among the feed's inserts, and is picked up there.
        let initial: [BugState]
        do {
            initial = try await subscriber.context.perform { context in try Self.hold(keys, in: context) }
        } catch let error as GraphError {
            printError("squasherctl: could not fetch the bugs of the \(keys.count) key(s) given: \(wording(of: error))")
            throw exitStatus(of: error)
        }
        let missing = Set(keys).subtracting(initial.map(\.key))
        if !missing.isEmpty {
            let shown =
                missing.sorted().prefix(10).joined(separator: ", ")
                + (missing.count > 10 ? " and \(missing.count - 10) more" : "")
            let others = initial.isEmpty ? "" : "; the other keys are held from now"
            printError(
                "squasherctl: no bug with key \(shown) (yet); \(missing.count == 1 ? "it is" : "they are") held once created\(others)"
            )
        }
        return (initial, missing)
    }

    /// Prints a refresh of the held bugs, and holds the bugs it created (or renamed) with a key
    /// waited for; when they cannot be fetched, asks `retry` to try again.
    private func handle(
        _ refresh: Subscriber.RefreshEvent, in context: isolated ObjectContext, held: HeldKeys,
        retry: AsyncStream<Void>.Continuation
    ) throws {
        let bugs = refresh.refreshed.compactMap {
            (context.registeredObject(for: $0) as? Bug).map { Self.state($0) }
        }
        // A held bug that is deleted is waited for again under its key.
        let waiting = held.value.withLock { held in
            for id in refresh.deleted {
                if let key = held.keysByID.removeValue(forKey: id.uriString) { held.missing.insert(key) }
            }
            return held.missing
        }
        if !bugs.isEmpty || !refresh.deleted.isEmpty {
            try emit(
                Event(
                    event: refresh.isCatchUp ? "catch-up" : "refresh", token: refresh.token.rawValue,
                    bugs: bugs, deleted: refresh.deleted.map(\.uriString)))
        }
        // A bug created, or one renamed, may carry a key waited for.
        guard !waiting.isEmpty,
            refresh.inserted.contains(where: { $0.entityName == "Bug" })
                || !refresh.changedIntoWatch.isEmpty
        else { return }
        if try !holdWaiting(in: context, held: held, token: refresh.token.rawValue, quiet: false) { retry.yield() }
    }

    /// Tries ``holdWaiting(in:held:token:quiet:)`` again after 1 s, 2 s, then every 5 s, until
    /// a fetch works.
    private func retryHoldingWaiting(subscriber: Subscriber, held: HeldKeys) async throws {
        var delay = Duration.seconds(1)
        while true {
            try await Task.sleep(for: delay)
            let token = subscriber.lastToken?.rawValue
            let done = try await subscriber.context.perform { context in
                try holdWaiting(in: context, held: held, token: token, quiet: true)
            }
            if done { return }
            delay = min(delay * 2, .seconds(5))
        }
    }

    /// Fetches the bugs with the keys waited for, holds those that exist and prints them
    /// (`added`); returns whether the fetch worked. A failure is said unless `quiet` (a retry).
    private func holdWaiting(
        in context: isolated ObjectContext, held: HeldKeys, token: Int64?, quiet: Bool
    ) throws -> Bool {
        let waiting = held.value.withLock { $0.missing }
        guard !waiting.isEmpty else { return true }
        let added: [BugState]
        do {
            added = try Self.hold(Array(waiting), in: context)
        } catch {
            if !quiet {
                let keys = waiting.sorted()
                printError(
                    "squasherctl: could not fetch the bugs created for \(keys.prefix(10).joined(separator: ", "))\(keys.count > 10 ? " and \(keys.count - 10) more" : ""): \(error); trying again"
                )
            }
            return false
        }
        held.value.withLock { held in
            for bug in added {
                held.missing.remove(bug.key)
                held.keysByID[bug.id] = bug.key
            }
        }
        if !added.isEmpty { try emit(Event(event: "added", token: token, bugs: added)) }
        return true
    }

    /// Fetches the bugs with these keys into the subscriber's context, which registers them with
    /// squasherd: their changes reach the subscriber from then on.
    private static func hold(_ keys: [String], in context: isolated ObjectContext) throws -> [BugState] {
        // In batches: hundreds of thousands of keys in one IN list are more values than SQLite
        // takes in one statement.
        var held: [BugState] = []
        for batch in keys.chunks(ofCount: holdBatch) {
            var request = FetchRequest<Bug>(predicate: Key("key").in(batch.map { .string($0) }))
            request.returnsObjectsAsFaults = false
            held += try context.fetch(request).map { Self.state($0) }
        }
        // In the store's order of keys (byte by byte), as one fetch sorted by key gave them.
        return held.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
    }

    /// How many keys one fetch of ``hold(_:in:)`` asks for.
    private static let holdBatch = 10_000

    private static func state(_ bug: Bug) -> BugState {
        BugState(
            id: bug.objectID.uriString, key: bug.key, version: bug.snapshotVersion, status: bug.status, title: bug.title
        )
    }

    /// Prints an event, out at once (a JSON line is written straight away, text is flushed); a
    /// full disk ends the command (``Squasherctl/flushOutput()``).
    private func emit(_ event: Event) throws {
        if json {
            try printJSON(event)
        } else {
            switch event.event {
            case "stats":
                print(
                    "loaded \(event.loaded?.count ?? 0) objects in \(event.valueRequests ?? 0) value requests and \(event.fetches ?? 0) fetches; \(event.bytesReceived ?? 0) bytes of change feed; last token \(event.token.map(String.init) ?? "-")"
                )
            default:
                print("\(event.event) at token \(event.token.map(String.init) ?? "-")")
                for bug in event.bugs ?? [] {
                    print(
                        "  \(printable(bug.key, limit: 200)) v\(bug.version) [\(printable(bug.status, limit: 60))] \(printable(bug.title, limit: 200))"
                    )
                }
                for id in event.deleted ?? [] { print("  deleted \(id)") }
            }
            try Squasherctl.flushOutput()
        }
    }
}

/// Runs `body` until it returns or SIGINT/SIGTERM arrives (then cancels it and returns).
func untilSignal(_ body: @escaping @Sendable () async throws -> Void) async throws {
    let signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await body() }
        group.addTask {
            for await _ in signals { return }
        }
        do {
            try await group.next()
        } catch is CancellationError {}
        group.cancelAll()
    }
}

extension SubscribeCommand.Event: JSONWritable {
    /// Keys sorted, as ``printJSON(_:)`` sorts them for other values.
    func write(to writer: inout JSONWriter) {
        writer.object { writer in
            writer.key("at")
            writer.integer(at)
            if let bugs {
                writer.key("bugs")
                writer.array { writer in
                    for bug in bugs {
                        writer.object { writer in
                            writer.key("id")
                            writer.string(bug.id)
                            writer.key("key")
                            writer.string(bug.key)
                            writer.key("status")
                            writer.string(bug.status)
                            writer.key("title")
                            writer.string(bug.title)
                            writer.key("version")
                            writer.integer(bug.version)
                        }
                    }
                }
            }
            if let bytesReceived {
                writer.key("bytesReceived")
                writer.integer(Int64(bytesReceived))
            }
            if let deleted {
                writer.key("deleted")
                writer.array { writer in for id in deleted { writer.string(id) } }
            }
            writer.key("event")
            writer.string(event)
            if let fetches {
                writer.key("fetches")
                writer.integer(Int64(fetches))
            }
            if let loaded {
                writer.key("loaded")
                writer.array { writer in for id in loaded { writer.string(id) } }
            }
            if let token {
                writer.key("token")
                writer.integer(token)
            }
            if let valueRequests {
                writer.key("valueRequests")
                writer.integer(Int64(valueRequests))
            }
        }
    }
}

/// Refuses a `--since` no store issues.
private func validateToken(_ since: Int64?) throws {
    if let since, since < 0 {
        throw ValidationError("--since takes a history token, 0 or more (squasherctl status shows the newest).")
    }
}

/// Ends the process with exit status 4 when the first reply of a feed has not come within the
/// limit: the feed's own waits are for saves, which may take hours, so its connection has no
/// timeout of its own.
final class FirstReplyDeadline: Sendable {
    private let answered = Atomic<Bool>(false)

    /// Starts the clock; `limit` `nil` waits as long as it takes.
    init(path: String, limit: Duration?) {
        guard let limit else { return }
        Task { [self] in
            guard (try? await Task.sleep(for: limit)) != nil, !answered.load(ordering: .acquiring) else { return }
            printError("squasherctl: \(TransportError.noAnswer(path, within: limit).wordedForSquasherd.message)")
            exit(Exit.unreachable.rawValue)
        }
    }

    /// The first reply came: the clock stops mattering.
    func arrived() { answered.store(true, ordering: .releasing) }
}
