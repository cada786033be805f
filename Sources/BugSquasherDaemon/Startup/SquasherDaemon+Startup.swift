import BugSquasherGraph
import BugSquasherModel
import BugSquasherPostgres
import BugSquasherSQLite
import BugSquasherStack
import BugSquasherTransport
import Foundation
import Logging

/// The store a daemon opened and checked, with what must live as long as it serves.
struct OpenedStore {
    /// The stack over the store.
    let stack: PersistentStack
    /// What imports give way to.
    let editsFirst: EditsFirst
    /// The record of the last save, kept up to date with every commit (the SQLite store's).
    let watermark: SaveWatermark?
    /// The lock on the store file, held while the daemon runs.
    let lock: StoreFileLock?
    /// This daemon among the store's daemons.
    var identity = DaemonIdentity(id: "", host: "", sharesStore: false)
}

extension SquasherDaemon {
    /// Creates the state, spool and runtime directories, refusing what cannot be one (a file,
    /// a dangling link) and a state directory this user cannot write, with the reason.
    func prepareDirectories() throws {
        // A socket path that cannot be bound is refused before the store is created.
        do {
            for path in [readAddress.path, writeAddress.path].compactMap(\.self) {
                try VarlinkServer.checkSocketPath(path)
            }
        } catch let error as TransportError {
            throw error.wordedForSquasherdOperator
        }
        for directory in [configuration.stateDirectory, configuration.spoolDirectory, configuration.runtimeDirectory] {
            do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), !isDirectory.boolValue
                {
                    throw DaemonError(
                        "Cannot use \(directory) as a directory: a file is there.",
                        advice: "Move it away, or point --state-directory/--runtime-directory elsewhere."
                    )
                }
                if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: directory) {
                    // The system's "file exists" would send the operator looking for a file.
                    throw DaemonError(
                        "Cannot use \(directory) as a directory: it is a symbolic link to \(target), which leads to no directory (a missing place, or a loop of links).",
                        advice: "Mend the link, or point --state-directory/--runtime-directory elsewhere."
                    )
                }
                let reason = error.localizedDescription.trimmingCharacters(in: CharacterSet(charactersIn: ". "))
                throw DaemonError(
                    "Cannot create \(directory): \(reason).",
                    advice: "Create it, or point --state-directory/--runtime-directory elsewhere."
                )
            }
        }
        guard FileManager.default.isWritableFile(atPath: configuration.stateDirectory) else {
            if SQLiteStore.isOnReadOnlyFileSystem(configuration.stateDirectory) {
                throw DaemonError(
                    "The state directory \(configuration.stateDirectory) is on a file system mounted read-only.",
                    advice: "Remount it read-write, or choose another --state-directory."
                )
            }
            if let marked = SQLiteStore.markedFile(of: [configuration.stateDirectory]) {
                throw DaemonError("The state directory cannot be written: \(marked.problem).", advice: marked.advice)
            }
            throw DaemonError(
                "The state directory \(configuration.stateDirectory) is not writable by this user.",
                advice: "Fix its permissions or choose another one."
            )
        }
    }

    /// Opens the store, the SQLite file or the PostgreSQL database the configuration names.
    /// Uploads cut off by the last exit are failed, and the spools of ended jobs removed.
    func openStore() async throws -> OpenedStore {
        // Imports give way to edits for a moment after each commits (decoding and upserting
        // between records, and the store's chunk saves).
        let editsFirst = EditsFirst(window: configuration.importYield)
        var opened: OpenedStore
        if let postgres = configuration.postgres {
            opened = try await openPostgresStore(postgres, editsFirst: editsFirst)
        } else {
            opened = try openSQLiteStore(editsFirst: editsFirst)
        }
        opened.identity = try await settledIdentity(
            try DaemonIdentity.load(
                stateDirectory: configuration.stateDirectory, sharesStore: opened.stack.store is any SharedStore),
            membership: opened.stack.store as? any StoreMembership)
        if let membership = opened.stack.store as? any StoreMembership {
            membership.attach(as: opened.identity.id, host: opened.identity.host)
        }
        try await failInterruptedUploads(opened.stack, identity: opened.identity)
        try await removeSpoolsOfEndedJobs(opened.stack)
        return opened
    }

    /// `identity`, or a new one when its state directory is a copy of a daemon that runs on the
    /// same store (``SharedIdentityCheck`` decides; this carries it out).
    private func settledIdentity(_ identity: DaemonIdentity, membership: (any StoreMembership)?) async throws
        -> DaemonIdentity
    {
        let directory = configuration.stateDirectory
        var check = SharedIdentityCheck()
        var action = SharedIdentityCheck.start(
            recorded: identity.origin, here: identity.here, sharesStore: membership != nil)
        while true {
            switch action {
            case .keep(let record):
                guard record else { return identity }
                if let origin = identity.origin {
                    logger.notice(
                        "the state directory was made elsewhere, and no running daemon uses its ID; this daemon keeps it",
                        metadata: [
                            "daemon.id": "\(identity.id)", "origin.machine": "\(origin.machine)",
                            "origin.directory": "\(origin.directory)",
                        ])
                }
                return try identity.recordingOrigin(stateDirectory: directory)
            case .lookAgain(let delay):
                try await Task.sleep(for: delay)
                // Listing fails only with the server gone since the store opened: the ID is kept,
                // as before the check.
                action = check.looked(at: (try? membership?.members())?.first { $0.id == identity.id })
            case .renew(let member):
                let renewed = try identity.renewed(stateDirectory: directory)
                logger.warning(
                    "this state directory is a copy of a running daemon's, which uses its ID; this daemon takes an ID of its own",
                    metadata: [
                        "daemon.id": "\(renewed.id)", "daemon.id.copied": "\(identity.id)",
                        "copied.host": "\(member.host)", "origin.directory": "\(identity.origin?.directory ?? "")",
                    ])
                return renewed
            }
        }
    }

    /// Opens the store in a PostgreSQL database: the server checks and keeps it. A server that
    /// cannot be reached (one still booting, or restarting) is waited for, up to `store_wait`
    /// (``StoreWait``), so that a daemon started before its database, under systemd at boot,
    /// does not spend its restarts and stay down; a SIGTERM meanwhile ends the wait
    /// (``StopBeforeStart``).
    private func openPostgresStore(_ postgres: PostgresStoreConfiguration, editsFirst: EditsFirst) async throws
        -> OpenedStore
    {
        var wait = StoreWait(limit: configuration.storeWait)
        let start = ContinuousClock.now
        var waited = false
        while true {
            let failure: GraphError
            do {
                let store = PostgresStore(configuration: postgres, logger: logger, editsFirst: editsFirst)
                let stack = try PersistentStack(model: BugModel.model, store: store, logger: logger)
                if waited { logger.notice("PostgreSQL at \(postgres.address) answers; starting") }
                return OpenedStore(stack: stack, editsFirst: editsFirst, watermark: nil, lock: nil)
            } catch let error as GraphError {
                failure = error
            }
            let refusal = DaemonError(
                "Refusing to start: the store in \(configuration.storeDescription) cannot be used. \(failure.statement)",
                advice: failure.advice)
            guard failure.isServerUnreachable else { throw refusal }
            switch wait.failed(after: ContinuousClock.now - start) {
            case .giveUp:
                guard waited else { throw refusal }
                throw DaemonError(
                    "Refusing to start: PostgreSQL at \(postgres.address) could not be reached for \(Self.seconds(configuration.storeWait)) (store_wait). \(failure.statement)",
                    advice: failure.advice)
            case .retry(let delay, let log):
                waited = true
                if log {
                    logger.warning(
                        "waiting for PostgreSQL, which cannot be reached; trying again every few seconds for up to \(Self.seconds(configuration.storeWait)) in all (store_wait); SIGTERM or Ctrl-C stops",
                        metadata: ["error": "\(failure.statement)"])
                }
                onWaitingForStore("Waiting for PostgreSQL at \(postgres.address)", delay + .seconds(30))
                // Checked a few times a second: a stop asked for meanwhile ends the wait at once.
                let until = ContinuousClock.now + delay
                while startupSignals?.caughtSignal == nil {
                    let left = until - ContinuousClock.now
                    guard left > .zero else { break }
                    try await Task.sleep(for: min(.milliseconds(100), left))
                }
                if startupSignals?.caughtSignal != nil { throw StopBeforeStart() }
            }
        }
    }

    /// `N s`, for messages.
    private static func seconds(_ duration: Duration) -> String { "\(duration.components.seconds) s" }

    /// Opens the SQLite store file, after refusing one that was emptied or replaced by a rescue
    /// copy, and checks it: sound, and the one last saved to here.
    private func openSQLiteStore(editsFirst: EditsFirst) throws -> OpenedStore {
        try Self.refuseEmptiedStore(at: configuration.storePath)
        try Self.refuseStoreReplacedByRescue(at: configuration.storePath)
        // The store file too, before it is opened when it exists (or right after it is created).
        var storeLock =
            FileManager.default.fileExists(atPath: configuration.storePath)
            ? try StoreFileLock(path: configuration.storePath) : nil
        let stack: PersistentStack
        do {
            let store = try SQLiteStore(
                url: URL(filePath: configuration.storePath), logger: logger, editsFirst: editsFirst)
            stack = try PersistentStack(model: BugModel.model, store: store, logger: logger)
        } catch let error as GraphError {
            throw DaemonError(
                "Refusing to start: the store \(configuration.storePath) cannot be used. \(error.statement)",
                advice: error.advice)
        }
        if storeLock == nil { storeLock = try StoreFileLock(path: configuration.storePath) }
        try checkSoundness(of: stack)
        let watermark = try checkWatermark(of: stack)
        return OpenedStore(stack: stack, editsFirst: editsFirst, watermark: watermark, lock: storeLock)
    }

    /// Refuses a store whose structure is damaged, when the store can tell.
    private func checkSoundness(of stack: PersistentStack) throws {
        if let store = stack.store as? any SelfChecking {
            let findings: [String]
            do { findings = try store.quickCheck() } catch let error as GraphError {
                throw DaemonError(
                    "Refusing to start: the store \(configuration.storePath) cannot be read. \(error.statement)",
                    advice: error.advice)
            }
            guard findings == ["ok"] else {
                throw DaemonError(
                    "Refusing to start: the store \(configuration.storePath) is damaged (\(findings.prefix(3).joined(separator: "; "))).",
                    advice: "Restore it from a backup, or move it away to start with an empty store and re-import."
                )
            }
        }
    }

    /// Checks that the store is the one last saved to here, with every save committed (see
    /// ``SaveWatermark``); a store without saves (created now, or again) starts the record over.
    private func checkWatermark(of stack: PersistentStack) throws -> SaveWatermark {
        let watermark = try SaveWatermark(directory: configuration.stateDirectory)
        let storeIdentifier = stack.mainCoordinator.storeIdentifier
        let newestToken = try stack.store.currentHistoryToken()
        if let content = watermark.unreadableContent() {
            logger.warning(
                "\(watermark.path) holds no record of the last save (it begins \(content.debugDescription)), so this start could not check that the store kept every save and is the one squasherd saved to here; the record is written anew from the store. If the store's files were not replaced or restored, nothing is lost.",
                metadata: ["store.path": "\(configuration.storePath)"])
        }
        if newestToken.rawValue > 0 {
            try watermark.check(
                storeIdentifier: storeIdentifier, token: newestToken.rawValue, storePath: configuration.storePath)
        } else if let (previous, token) = watermark.recorded(), previous != storeIdentifier {
            logger.notice(
                "a new store: the one squasherd last saved to here is gone",
                metadata: [
                    "store.path": "\(configuration.storePath)", "store.previous": "\(previous)",
                    "store.previous.token": "\(token)",
                ])
        }
        watermark.record(storeIdentifier: storeIdentifier, token: newestToken)
        return watermark
    }

    /// The suffix of the copy squasherd writes of a store whose file was deleted while it ran.
    static let rescueSuffix = ".rescued-"

    /// A copy squasherd rescued when the store file or its write-ahead log was deleted while it
    /// ran, beside a store that is missing or older than the copy: starting would serve an empty
    /// store, or one without the saves the copy holds (and systemd restarts squasherd at once).
    private static func refuseStoreReplacedByRescue(at path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let prefix = (path as NSString).lastPathComponent + rescueSuffix
        guard
            let rescued = (try? FileManager.default.contentsOfDirectory(atPath: directory))?.filter({
                $0.hasPrefix(prefix)
            }).max()
        else { return }
        func modified(_ file: String) -> Date? {
            (try? FileManager.default.attributesOfItem(atPath: file))?[.modificationDate] as? Date
        }
        guard FileManager.default.fileExists(atPath: path) else {
            throw DaemonError(
                "Refusing to start: the store \(path) is missing, and \(directory)/\(rescued) is the copy squasherd wrote when the store file was deleted while it ran.",
                advice:
                    "Move that copy to \(path) to go on with it; or, to start over with an empty store, move it out of \(directory)."
            )
        }
        if let copy = modified(directory + "/" + rescued), let store = modified(path), copy > store {
            throw DaemonError(
                "Refusing to start: \(directory)/\(rescued) is the copy squasherd wrote when the store or its write-ahead log was deleted while it ran, and it is newer than the store \(path), which may lack the saves since.",
                advice:
                    "Move the copy to \(path) to go on with it (keep the old file elsewhere until you are sure); or, to go on with the store as it is, move the copy out of \(directory)."
            )
        }
    }

    /// squasherd creates its store file when it is missing, and SQLite writes the file's header
    /// as it does; SQLite would read an existing file of 0 bytes as a new, empty store. Such a
    /// file is a store truncated to nothing (a failed copy, `> bugs.sqlite`), so it is refused
    /// rather than quietly replaced by an empty store.
    private static func refuseEmptiedStore(at configuredPath: String) throws {
        // Through a symlink, the file it points to, with its -wal beside it, as SQLite sees it.
        let path = SQLiteStore.resolvedPath(configuredPath)
        // Before the store lock opens the file, which would block on a FIFO (SQLiteStore checks
        // again for its other users).
        if let why = SQLiteStore.notFilesProblem(path) {
            throw DaemonError("Refusing to start: \(why.problem).", advice: why.advice)
        }
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int, size == 0,
            // A log with commits rebuilds the store; an empty one left beside it does not.
            !SQLiteStore.logMayHoldCommits(path),
            // squasherd was stopped while it created the store: it creates it again.
            !FileManager.default.fileExists(atPath: SQLiteStore.creationMarkerPath(for: path))
        else { return }
        throw DaemonError(
            "Refusing to start: the store \(path) is an empty file (0 bytes). squasherd creates the store itself when the file is missing, so an empty one is a store that was truncated or replaced; starting on it would serve an empty store in its place.",
            advice: "Restore the file from a backup; or, to start over with an empty store, delete it."
        )
    }

    /// A job that ended (finished, failed, aborted) or that the store does not know never reads
    /// its spool file again; one may be left by a failure the daemon could not clean up after
    /// (a disk that went read-only), or by an older version.
    private func removeSpoolsOfEndedJobs(_ stack: PersistentStack) async throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: configuration.spoolDirectory)) ?? []
        let spooled = names.filter { $0.hasSuffix(Spooler.fileExtension) }.map {
            String($0.dropLast(Spooler.fileExtension.count))
        }
        guard !spooled.isEmpty else { return }
        let pending = try await stack.temporaryContext(name: "startup").perform { context in
            Set(
                try context.fetch(
                    FetchRequest<ImportJob>(
                        predicate: Key("state") == .string(JobState.queued.rawValue)
                            || Key("state") == .string(JobState.running.rawValue))
                ).map(\.jobID))
        }
        for job in spooled where !pending.contains(job) {
            let path = Spooler.path(job: job, in: configuration.spoolDirectory)
            do {
                try FileManager.default.removeItem(atPath: path)
                logger.notice(
                    "removed the spool file of a job that ended", metadata: ["job.id": "\(job)", "path": "\(path)"])
            } catch {
                logger.warning(
                    "cannot remove the spool file of a job that ended",
                    metadata: ["job.id": "\(job)", "path": "\(path)", "error": "\(error)"])
            }
        }
    }

    /// This daemon's uploads cut off by its previous exit cannot resume (their bytes came from a
    /// client); other daemons' uploads go on.
    private func failInterruptedUploads(_ stack: PersistentStack, identity: DaemonIdentity) async throws {
        let importer = stack.importerContext(name: "startup")
        try await importer.perform { context in
            for job in try context.fetch(
                FetchRequest<ImportJob>(predicate: Key("state") == .string(JobState.uploading.rawValue)))
            where identity.runs(job) {
                job.state = .failed
                job.error = "The upload was interrupted when the daemon stopped; submit the file again."
                job.finished = Date()
            }
        }
        try await importer.save()
    }
}
