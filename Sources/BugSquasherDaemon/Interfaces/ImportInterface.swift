import BugSquasherErrors
import BugSquasherGraph
import BugSquasherImport
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherStack
import BugSquasherTransport
import BugSquasherVarlink
import CoreMetrics
import Foundation
import Logging
import NIOCore
import Synchronization

/// `io.bugsquasher.Import`: uploads, job submission, edits, backups, and forgetting a daemon whose
/// host is lost (with its jobs). Served on the write socket only,
/// whose connections run on that socket's own thread (an `EventLoopExecutor`): its edits and
/// deletes save there (on PostgreSQL, attribute edits wait in an ``EditQueue`` to commit
/// together, but for one after a quiet spell), while import chunks save on the write threads
/// (``ThreadExecutor/writers()``).
struct ImportInterface: VarlinkInterface {
    let name = InterfaceName.importing
    let writes = true
    let stack: PersistentStack
    let runner: ImportRunner
    let configuration: DaemonConfiguration
    let uploads: UploadRegistry
    /// Calls whose edit or job record the store could not write (a full disk, an I/O error,
    /// another program's write lock): each client is told, and the operator in the log at most
    /// every ten seconds.
    private let unsavedWrites = WarningThrottle()
    /// Where refused writes are noted, for the daemon's health.
    var health = HealthRecord()
    /// Edits and their conflicts, counted.
    var metrics = SquasherdMetrics()
    /// Where attribute edits wait to commit together, for a store that takes them in batches
    /// (PostgreSQL); `nil` to save each one on the calling thread (SQLite).
    var edits: EditQueue? = nil

    /// `Upload` takes the connection over for the file's bytes; `Backup` sends the copy's bytes
    /// over it after its reply.
    func upgrades(_ method: String) -> Bool { method == "Upload" || method == "Backup" }

    func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        let isEdit = ["Update", "Delete"].contains(call.methodName)
        if isEdit { metrics.edits.increment() }
        do {
            try await dispatch(call, context: context, replier: replier)
        } catch let error as VarlinkError where isEdit && error.name == "io.bugsquasher.Import.Conflict" {
            metrics.editConflicts.increment()
            throw error
        } catch let error as GraphError where error.isStoreUnavailable {
            // What the call had to write (an edit, a job's record) the store could not: not the
            // client's doing, and not for it alone to know, since the next calls fail the same
            // way until the operator frees the disk, mends the file system or ends the other
            // program's transaction.
            let what =
                ["Update", "Delete"].contains(call.methodName)
                ? "an edit could not be saved" : "\(call.methodName) could not be carried out"
            unsavedWrites.warn(context.logger) { "\(what): \(error.message)\($0)" }
            health.refusedWrite()
            throw VarlinkError(Self.storeUnavailableName, explaining: error)
        }
    }

    private func dispatch(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        switch call.methodName {
        case "Begin": try await handleBegin(call, context: context, replier: replier)
        case "Append": try await handleAppend(call, context: context, replier: replier)
        case "Upload": try await handleUpload(call, context: context, replier: replier)
        case "Commit": try await handleCommit(call, context: context, replier: replier)
        case "Abort": try await handleAbort(call, context: context, replier: replier)
        case "Update": try await handleUpdate(call, context: context, replier: replier)
        case "Delete": try await handleDelete(call, context: context, replier: replier)
        case "Backup": try await handleBackup(call, context: context, replier: replier)
        case "Forget": try await handleForget(call, context: context, replier: replier)
        default: throw VarlinkError.methodNotFound(call.method)
        }
    }

    /// `Begin`'s parameters checked: the format, the column mapping, the chunk size and the
    /// name; and whether squasherd takes one more upload now.
    private func checkedBegin(
        _ parameters: BeginImportParameters
    ) throws -> (name: String, format: ImportFormat?, chunkSize: Int, columns: CSVColumnMapping) {
        var format: ImportFormat?
        if let name = parameters.format, name != "auto" {
            guard let known = ImportFormat(rawValue: name) else {
                throw invalidInput(
                    "unknown format '\(name)'; use one of \(ImportFormat.names), or leave it out to detect it")
            }
            format = known
        }
        let columns: CSVColumnMapping
        do {
            columns = try CSVColumnMapping(
                named: (parameters.columns ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
                project: parameters.project)
        } catch let error as ImportError {
            throw VarlinkError(Self.invalidInputName, explaining: error)
        }
        if !columns.isEmpty, let format, !format.isCSV {
            throw invalidInput(
                "columns and project describe a CSV export's columns, and this upload is declared \(format.rawValue); leave them out, or declare the CSV format"
            )
        }
        let chunkSize = parameters.chunkSize ?? configuration.chunkSize
        let sizes = ImportChunkSize.allowed
        guard sizes.contains(chunkSize) else {
            throw invalidInput("chunkSize must be between \(sizes.lowerBound) and \(sizes.upperBound)")
        }
        guard uploads.count < UploadRegistry.maximumUploads else {
            throw VarlinkError(
                Self.busyName,
                statement:
                    "\(UploadRegistry.maximumUploads) uploads are in progress, as many as squasherd takes at once.",
                advice: "Begin this one again once one of them is committed or aborted.")
        }
        // A job's name is for people: kept (and logged) to its first 500 characters, and on
        // one line (a newline in it would forge a line of the log).
        guard !parameters.name.allSatisfy(\.isWhitespace) else {
            throw invalidInput(
                "the job name is empty; give the job a name people will know it by (squasherctl uses the file's name)"
            )
        }
        guard !parameters.name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw invalidInput(
                "the job name holds control characters (a newline, an escape…); give a name of printable characters"
            )
        }
        return (String(parameters.name.prefix(500)), format, chunkSize, columns)
    }

    /// `Begin`: begins an upload: creates the job, and opens its spool for this connection.
    private func handleBegin(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let book = runner.book
        let (name, format, chunkSize, columns) = try checkedBegin(try call.parameters(BeginImportParameters.self))
        let job = try await book.create(name: name, format: format, chunkSize: chunkSize, columns: columns)
        do {
            uploads.add(
                try Spooler(
                    jobID: job, directory: configuration.spoolDirectory, format: format, columns: columns,
                    maximumRecordBytes: configuration.maximumRecordBytes), owner: context.connection)
            // An upload lives as long as the connection that began it: a client that goes
            // away without Commit leaves no open spool file and no job stuck "uploading".
            let logger = context.logger
            await context.connection.onClose { [uploads, book] in
                guard let spooler = uploads.remove(job) else { return }
                let stopping = uploads.isStopping
                let reason =
                    stopping
                    ? "squasherd stopped before the upload was committed; submit the file again once squasherd is back."
                    : "The client disconnected before committing the upload; submit the file again."
                await spooler.discard(reason: reason)
                logger.notice(
                    stopping
                        ? "upload abandoned: squasherd is stopping"
                        : "upload abandoned: the client disconnected before Commit", metadata: ["job.id": "\(job)"])
                try? await book.end(job, as: .aborted, error: reason)
            }
        } catch let error as DaemonError {
            context.logger.error(
                "upload failed to start", metadata: ["job.id": "\(job)", "error": "\(error.message)"])
            try await book.end(job, as: .failed, error: error.message)
            throw refusal(error)
        }
        context.logger.info("upload started", metadata: ["job.id": "\(job)", "job.name": "\(name)"])
        try await replier.reply(JobParameter(job: job))
    }

    /// `Append`: Appends base64-encoded bytes to the upload this connection began.
    private func handleAppend(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let book = runner.book
        let parameters = try call.parameters(AppendParameters.self)
        let spooler = try await upload(parameters.job, book: book, on: context.connection)
        guard let data = Data(base64Encoded: parameters.data) else { throw invalidInput("data is not base64") }
        try await append([UInt8](data), to: spooler, book: book, logger: context.logger)
        try await replier.reply(BytesReply(bytes: data.count))
    }

    /// `Upload`: Takes the connection over for the file's bytes (`upgrade`).
    private func handleUpload(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let book = runner.book
        guard call.upgrade else {
            throw invalidInput(
                "Upload sends the file over the connection itself: call it with \"upgrade\": true, or send the file with Append"
            )
        }
        let job = try call.parameters(JobParameter.self).job
        let spooler = try await upload(job, book: book, on: context.connection)
        context.connection.upgrade(
            to: UploadReceiver(spooler: spooler, interface: self, book: book, logger: context.logger))
        try await replier.reply(Empty())
    }

    /// `Commit`: Ends the upload and queues its job.
    private func handleCommit(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let book = runner.book
        let job = try call.parameters(JobParameter.self).job
        try await commit(
            try await upload(job, book: book, on: context.connection), book: book, logger: context.logger)
        try await replier.reply(JobParameter(job: job))
    }

    /// `Abort`: Abandons an upload, or stops a queued or running job (a running one after its chunk in flight).
    private func handleAbort(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let book = runner.book
        let job = try call.parameters(JobParameter.self).job
        if let spooler = uploads.remove(job) {
            context.logger.notice(
                "upload aborted on request; its spool file is removed", metadata: ["job.id": "\(job)"])
            await spooler.discard(reason: "The upload was aborted on request.")
        }
        guard let current = try await book.job(job) else { throw Self.jobNotFound(job) }
        if book.identity.sharesStore, let owner = current.daemon, owner != book.identity.id, !current.isFinal {
            throw VarlinkError(
                Self.invalidInputName,
                statement:
                    "Job \(job) runs on daemon \(owner), not on this one (\(book.identity.id)); only the daemon that runs a job can stop it.",
                advice:
                    "Abort it through that daemon's socket; `squasherctl status` lists the daemons and their hosts. If that daemon is gone for good (its host lost), `squasherctl forget \(owner)` aborts its jobs."
            )
        }
        guard JobLifecycle.canMove(from: current.state, to: .aborted) else {
            throw invalidInput(
                "job \(job) is \(current.state.rawValue) already; only jobs that are uploading, queued or running can be aborted"
            )
        }
        if await runner.abort(job) {
            // Stopped after its chunk in flight; what it committed stays.
            guard let ended = try await book.job(job), ended.state == .aborted else {
                throw invalidInput("job \(job) ended before it could be aborted")
            }
            try await replier.reply(Empty())
            return
        }
        // The runner had not taken it up, and now never will.
        if current.state == .queued {
            context.logger.notice(
                "queued job aborted on request; nothing was imported", metadata: ["job.id": "\(job)"])
        }
        try await book.end(job, as: .aborted, error: "Aborted on request before it started; nothing was imported.")
        // A queued job's upload is spooled already; nothing reads it any more.
        try? FileManager.default.removeItem(atPath: Spooler.path(job: job, in: configuration.spoolDirectory))
        try await replier.reply(Empty())
    }

    /// `Forget`: takes another daemon of a shared store, gone for good, off the store's list, and
    /// aborts its jobs that had not ended: their input was spooled on its host, so no other
    /// daemon can run them. A daemon that answers is refused.
    private func handleForget(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let book = runner.book
        let daemon = try call.parameters(ForgetParameters.self).daemon
        guard let membership = stack.store as? any StoreMembership, book.identity.sharesStore else {
            throw invalidInput(
                "squasherd runs alone on its store (SQLite): there is no other daemon to forget; daemons are forgotten on a shared (PostgreSQL) store"
            )
        }
        guard daemon != book.identity.id else {
            throw invalidInput("daemon \(daemon) is this one; forget a daemon through another daemon's socket")
        }
        let member = try membership.members().first { $0.id == daemon }
        if let member, member.isAnswering {
            throw VarlinkError(
                Self.invalidInputName,
                statement:
                    "Daemon \(daemon) on \(member.host) answers (its last heartbeat \(String(format: "%.1f", member.silentFor)) s ago); only a daemon that stopped or was cut off can be forgotten.",
                advice:
                    "Stop it first (systemctl stop squasherd on \(member.host)); a daemon stopped cleanly leaves the list by itself, and one that is only restarting resumes its jobs."
            )
        }
        let jobs = try await book.unfinished(ownedBy: daemon)
        guard member != nil || !jobs.isEmpty else {
            throw invalidInput(
                "no daemon \(daemon) is attached to the store, and no unfinished job belongs to it; `squasherctl status` lists the daemons"
            )
        }
        // Silent still? A heartbeat that came since keeps the daemon listed, and its jobs.
        if member != nil, try !membership.forget(daemon) {
            throw invalidInput("daemon \(daemon) answered again while it was being forgotten; it stays, with its jobs")
        }
        let host = member.map { " (\($0.host))" } ?? ""
        for job in jobs {
            try await book.end(
                job, as: .aborted,
                error:
                    "Aborted when its daemon, \(daemon)\(host), was forgotten through daemon \(book.identity.id): its input was spooled on that daemon's host. The records it committed stay; submit the file again for the rest."
            )
            book.outcomes.nudgeWatches(of: job)
        }
        context.logger.notice(
            "forgot a daemon of the store on request; its unfinished jobs are aborted",
            metadata: [
                "daemon.forgotten": "\(daemon)", "daemon.host": "\(member?.host ?? "")",
                "jobs.aborted": "\(jobs.joined(separator: ","))",
            ])
        try await replier.reply(ForgetReply(daemon: daemon, host: member?.host, abortedJobs: jobs))
    }

    /// `Update`: Changes one object.
    private func handleUpdate(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let parameters = try call.parameters(UpdateParameters.self)
        try await replier.reply(
            try await update(parameters.id, values: parameters.values, ifVersion: parameters.ifVersion))
    }

    /// `Delete`: Deletes one object (its delete rules apply).
    private func handleDelete(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        let id = try editableObjectID(try call.parameters(DeleteParameters.self).id)
        // A deleted comment's bug no longer holds what its source bytes made it.
        if id.entityName == "Comment" { try await mapGraphErrors { try await forgetSourceDigest(ofBugOf: id) } }
        let didSave = try await mapGraphErrors { try await delete(id) }
        try await replier.reply(DeleteReply(token: didSave?.token.rawValue ?? 0))
    }

    /// How long a delete tries again while other edits of its object keep coming first.
    static let deleteRetries = Duration.seconds(3)

    /// Deletes `id` in a fresh editor context. The context loads the object, and its save
    /// conflicts when another save changed the object since: the delete then starts again
    /// from a fresh load, after a short random pause, for up to ``deleteRetries``. An object
    /// edited all the while is answered `Busy`: nothing was deleted, and the same call may
    /// succeed later.
    private func delete(_ id: ObjectID) async throws -> DidSave? {
        let deadline = ContinuousClock.now + Self.deleteRetries
        var attempts = 0
        while true {
            attempts += 1
            let editor = newEditor("varlink-delete")
            do {
                try await editor.perform { context in context.delete(try context.existingObject(with: id)) }
                return try await editor.save()
            } catch let error as GraphError where error.code == .mergeConflict {
                guard ContinuousClock.now < deadline else {
                    throw VarlinkError(
                        Self.busyName,
                        statement:
                            "\(id) was changed by other edits each of the \(attempts) times it was about to be deleted, for \(Self.deleteRetries); nothing was deleted.",
                        advice: "Try again, or pause what keeps editing it.")
                }
                // Out of step with the edits that keep coming: up to 1 ms more at each try.
                try await Task.sleep(for: .microseconds(Int.random(in: 0...(1_000 * min(attempts, 20)))))
            }
        }
    }

    /// Sets `values` on the object `uri` names, at version `ifVersion` when given; answers the
    /// version that holds them and a token from which the feed has them.
    private func update(_ uri: String, values: [String: JSONValue], ifVersion: Int64?) async throws -> UpdateReply {
        let id = try editableObjectID(uri)
        guard let entity = stack.model.entity(named: id.entityName) else {
            throw invalidInput("unknown entity in \(uri)")
        }
        for key in values.keys where entity.attribute(named: key) == nil && entity.toOneIndex[key] == nil {
            throw invalidInput("\(entity.name) has no attribute or to-one relationship '\(key)'")
        }
        for (key, value) in values where value == .null && entity.attribute(named: key)?.isOptional == false {
            throw invalidInput("'\(key)' is required on a \(entity.name) and cannot be cleared (nil); give it a value")
        }
        // A unique key or another required text left blank (`status=`) is as good as none.
        for (key, value) in values {
            guard let attribute = entity.attribute(named: key), !attribute.isOptional || key == entity.uniqueKey,
                case .string(let text) = value, text.allSatisfy(\.isWhitespace)
            else { continue }
            throw invalidInput(
                key == entity.uniqueKey
                    ? "'\(key)' is the unique key of a \(entity.name) and cannot be empty or blank; give it a real value"
                    : "'\(key)' is required on a \(entity.name) and cannot be empty or blank; give it a value")
        }
        if let key = entity.uniqueKey, case .string(let text)? = values[key],
            EntityDescription.hasStrayCharacters(inKey: text)
        {
            throw invalidInput(
                "'\(key)' is the unique key of a \(entity.name); \(String(reflecting: text)) has spaces around it or a control character in it, and no lookup by key would find it. Give it without them"
            )
        }
        let outcome: AttributeEditOutcome
        let attributes = values.keys.compactMap { entity.attribute(named: $0) }
        if entity.name == "Comment" { try await mapGraphErrors { try await forgetSourceDigest(ofBugOf: id) } }
        if let store = stack.store as? any AttributeEditable, attributes.count == values.count {
            // Attributes only: read, changed and written in one write transaction of the store,
            // without a context.
            var changes = try await mapGraphErrors {
                try Dictionary(
                    uniqueKeysWithValues: attributes.map { ($0.name, try WireCoding.decode(values[$0.name]!, as: $0)) })
            }
            // An edited bug is no longer what its source bytes made it: the next import of those
            // bytes applies them again.
            if entity.name == "Bug", changes["sourceDigest"] == nil { changes["sourceDigest"] = .null }
            let request = AttributeEditRequest(id, attributes: changes, expectedVersion: ifVersion)
            outcome = try await mapGraphErrors(versionInConflict: ifVersion != nil) {
                if let edits { return try await edits.edit(request) }
                return try store.edit(request)
            }
        } else {
            outcome = try await editInContext(id, entity: entity, values: values, ifVersion: ifVersion)
        }
        switch outcome {
        case .saved(let didSave):
            return UpdateReply(version: outcome.version(of: id), token: didSave.token.rawValue)
        case .unchanged(let version):
            // The values were already the stored ones, at `version`: nothing was saved, and the
            // feed holds them from the newest token on.
            return UpdateReply(version: version, token: try stack.store.currentHistoryToken().rawValue)
        }
    }

    /// Applies `values` (attributes and to-one relationships) to one object in a fresh editor
    /// context and saves it, which also updates the other side of each relationship changed.
    /// With `ifVersion`, the object must be at that version when loaded, and the save fails
    /// rather than merge with a change made since.
    private func editInContext(
        _ id: ObjectID, entity: EntityDescription, values: [String: JSONValue], ifVersion: Int64?
    ) async throws -> AttributeEditOutcome {
        let editor = newEditor("varlink-update")
        if ifVersion != nil { await editor.setMergePolicy(.error) }
        let loaded = try await mapGraphErrors(versionInConflict: ifVersion != nil) {
            try await editor.perform { context -> Int64 in
                let object = try context.existingObject(with: id)
                if let ifVersion, object.snapshotVersion != ifVersion {
                    throw GraphError.versionMismatch(of: id, expected: ifVersion, found: object.snapshotVersion)
                }
                if entity.name == "Bug", values["sourceDigest"] == nil { object.setValue(.null, for: "sourceDigest") }
                for (key, json) in values {
                    if let attribute = entity.attribute(named: key) {
                        object.setValue(try WireCoding.decode(json, as: attribute), for: key)
                    } else if case .string(let target) = json, ObjectID(uri: target) != nil {
                        // An ID of another store (or of this one before it was recreated) is refused
                        // as one for `id` is.
                        let targetID = try objectID(target)
                        let destination = entity.relationship(named: key)?.destination
                        guard targetID.entityName == destination else {
                            throw GraphError(
                                .invalidArgument,
                                "'\(key)' points to \(destination ?? "?") objects; \(target) is a \(targetID.entityName)."
                            )
                        }
                        let related: ManagedObject
                        do { related = try context.existingObject(with: targetID) } catch let error as GraphError
                            where error.code == .objectNotFound
                        {
                            throw GraphError(
                                .invalidArgument,
                                "'\(key)' names \(target), and no \(targetID.entityName) has that ID (deleted, or never saved).",
                                advice: "Give the ID of one that exists."
                            )
                        }
                        object.setRelated(related, for: key)
                    } else if json == .null {
                        object.setRelated(nil, for: key)
                    } else {
                        throw GraphError(
                            .invalidArgument,
                            "'\(key)' is a relationship.",
                            advice: "Pass an object ID URI, or null to clear it (nil with squasherctl update)."
                        )
                    }
                }
                return object.snapshotVersion
            }
        }
        let didSave = try await mapGraphErrors(versionInConflict: ifVersion != nil) {
            do {
                return try await editor.save()
            } catch let error as GraphError where error.code == .mergeConflict && ifVersion != nil {
                // Changed since the load, at `ifVersion`: the save did not merge with it.
                let found = error.conflicts.first?.persistedVersion
                guard let ifVersion, let found else { throw error }
                throw GraphError.versionMismatch(of: id, expected: ifVersion, found: found)
            }
        }
        // Nothing to save: the object held the values at the version loaded.
        guard let didSave else { return .unchanged(version: loaded) }
        return .saved(didSave)
    }

    /// Clears the source digest of the bug that `id` is (a `Bug`) or belongs to (a `Comment`),
    /// when it has one: the bug no longer holds what its source bytes made it, so that the next
    /// import of those bytes applies them again instead of skipping them (docs/DESIGN-NOTES.md,
    /// "Unchanged records are skipped").
    private func forgetSourceDigest(ofBugOf id: ObjectID) async throws {
        guard ["Bug", "Comment"].contains(id.entityName), let bug = stack.model.entity(named: "Bug"),
            let digest = bug.attributeIndex["sourceDigest"]
        else { return }
        var bugID = id
        if id.entityName == "Comment" {
            guard let comment = stack.model.entity(named: "Comment"), let link = comment.toOneIndex["bug"],
                let owner = try stack.store.newValues(for: id)?.toOne[link]
            else { return }
            bugID = owner
        }
        guard let row = try stack.store.newValues(for: bugID), row.attributes[digest] != .null else { return }
        if let store = stack.store as? any AttributeEditable {
            _ = try store.edit(AttributeEditRequest(bugID, attributes: ["sourceDigest": .null]))
            return
        }
        let editor = newEditor("varlink-update")
        try await editor.perform { [bugID] context in
            try context.existingObject(with: bugID).setValue(.null, for: "sourceDigest")
        }
        _ = try await editor.save()
    }

    /// A fresh writer-side context (object-trump, like an editor) for one edit: an edit that
    /// fails leaves nothing pending behind it, and no context grows with the edits made. Its
    /// save goes straight to the writer coordinator (a child context in between only added a
    /// hop and a second fetch of the object).
    private func newEditor(_ name: String) -> ObjectContext {
        stack.importerContext(name: name)
    }

    /// Runs an edit's step, answering its graph errors as this interface's Varlink errors:
    /// `Conflict` for a unique key or a merge, `ObjectNotFound` for an object without a row,
    /// `InvalidInput` for the rest but a store that cannot write now, which
    /// ``handle(_:context:replier:)`` answers and logs for every call. With `versionInConflict`
    /// (an update with `ifVersion`), a `Conflict` of one object carries its version now.
    private func mapGraphErrors<T>(versionInConflict: Bool = false, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as GraphError {
            switch error.code {
            case .storeIO, .storeBusy: throw error
            case .mergeConflict, .constraintViolation:
                var conflict = VarlinkError("io.bugsquasher.Import.Conflict", explaining: error)
                if versionInConflict, error.conflicts.count == 1, let version = error.conflicts[0].persistedVersion {
                    conflict.parameters["version"] = .int(version)
                }
                throw conflict
            case .objectNotFound: throw VarlinkError("io.bugsquasher.Import.ObjectNotFound", explaining: error)
            case .validation where !error.problems.isEmpty:
                // Without the context's advice (roll back), which means nothing to a client.
                throw invalidInput(
                    "The change was refused, and nothing was saved: \(error.problems.prefix(20).joined(separator: "; "))."
                )
            default: throw VarlinkError(Self.invalidInputName, explaining: error)
            }
        }
    }

    /// This interface's error for an unknown job (the Jobs interface has its own of that name).
    static func jobNotFound(_ job: String) -> VarlinkError {
        VarlinkError("io.bugsquasher.Import.JobNotFound", ["job": .string(job)])
    }

    /// The entities only the daemon writes: its record of import jobs and their rejects.
    private static let bookkeeping: Set<String> = [ImportJob.entityName, ImportReject.entityName]

    /// An object `Update` and `Delete` may change: not one of the daemon's own records of import
    /// jobs, which a write client could otherwise set to states and counts that never were
    /// (or delete under a running import).
    private func editableObjectID(_ uri: String) throws -> ObjectID {
        let id = try objectID(uri)
        guard !Self.bookkeeping.contains(id.entityName) else {
            throw invalidInput(
                "\(id.entityName) objects are squasherd's record of import jobs and change only through the import; stop a job with Abort"
            )
        }
        return id
    }

    private func objectID(_ uri: String) throws -> ObjectID {
        guard let id = stack.mainCoordinator.managedObjectID(forURIRepresentation: uri) else {
            throw invalidInput("'\(uri)' is not an object ID of this store")
        }
        return id
    }

    /// The upload in progress of `job`, for the connection that began it: another connection may
    /// abort it (as `squasherctl abort` does), but not send its bytes or commit it. A job whose
    /// upload has ended is named as such.
    private func upload(_ job: String, book: JobBook, on connection: VarlinkConnection) async throws -> Spooler {
        if let (spooler, owner) = uploads.get(job) {
            guard owner === connection else {
                throw invalidInput(
                    "job \(job)'s upload was begun on another connection; only that connection sends its bytes and commits it (a client that lost its connection begins a new upload)"
                )
            }
            return spooler
        }
        if let ended = try await book.job(job) {
            throw invalidInput(
                "job \(job) is \(ended.state.rawValue): its upload has ended\(ended.error.map { " (\($0))" } ?? ""); begin a new one to send more"
            )
        }
        throw Self.jobNotFound(job)
    }

    /// Spools the next bytes of an upload; input the spooler refuses fails the job.
    fileprivate func append(_ bytes: [UInt8], to spooler: Spooler, book: JobBook, logger: Logger) async throws {
        uploads.touch(spooler.jobID)
        do {
            try await spooler.append(bytes)
        } catch let error as UploadAbandoned {
            throw invalidInput(error.message)
        } catch let error as DaemonError {
            await fail(spooler.jobID, spooler, error.message, book: book, logger: logger)
            throw refusal(error)
        }
    }

    /// Ends an upload and queues its job.
    fileprivate func commit(_ spooler: Spooler, book: JobBook, logger: Logger) async throws {
        let job = spooler.jobID
        let format: ImportFormat
        let bytes: Int64
        do {
            (format, bytes) = try await spooler.finish()
        } catch let error as UploadAbandoned {
            throw invalidInput(error.message)
        } catch let error as DaemonError {
            await fail(job, spooler, error.message, book: book, logger: logger)
            throw refusal(error)
        }
        let columns = await spooler.columnsRead
        // Out of the uploads first, so that the idle timeout cannot abandon it while the write
        // waits for the store.
        uploads.remove(job)
        do {
            try await book.update(job) { record in
                record.format = format.rawValue
                record.bytesTotal = bytes
                if let columns { record.columns = columns }
                record.state = .queued
            }
        } catch {
            // The store refused the write (locked by another program past the busy timeout,
            // full, failing): the job cannot be queued, and left as it was it would read
            // `uploading` for good, its spool on disk and its waiters waiting.
            let refusal = error as? GraphError
            let statement =
                "The upload arrived whole, but the job could not be queued: \(refusal?.statement ?? "\(error)")"
            let advice = DaemonError.joined(
                refusal?.advice ?? "", "Submit the file again once the store can be written.")
            // Not waiting for the store a second time: the client is answered, and the job shows
            // failed, now; the record follows once the store can be written.
            await fail(
                job, spooler, DaemonError.joined(statement, advice), book: book, logger: logger, recordLater: true)
            throw VarlinkError(Self.storeUnavailableName, statement: statement, advice: advice)
        }
        runner.enqueue()
        logger.info(
            "import queued",
            metadata: ["job.id": "\(job)", "job.format": "\(format.rawValue)", "job.bytes": "\(bytes)"])
    }

    /// Ends an upload's job before it was queued: the upload slot is freed, the spool file goes,
    /// and the job ends `state` with `message`. When the store cannot record that either, the
    /// job shows failed until the daemon restarts (which records every upload it finds
    /// unfinished as interrupted), so that nobody waits on it for good.
    ///
    /// - Parameter recordLater: show the job failed at once and write the record in the
    ///   background, for a store that just refused a write (which may refuse this one too,
    ///   after its busy timeout).
    fileprivate func fail(
        _ job: String, _ spooler: Spooler, _ message: String, as state: JobState = .failed, book: JobBook,
        logger: Logger, recordLater: Bool = false
    ) async {
        uploads.remove(job)
        await spooler.discard(reason: message)
        if state == .failed { logger.warning("import failed", metadata: ["job.id": "\(job)", "error": "\(message)"]) }
        let record = { @Sendable in
            do {
                try await book.end(job, as: state, error: message)
            } catch {
                logger.critical(
                    "an upload's job ended and the store cannot record it; it shows as failed until squasherd restarts",
                    metadata: ["job.id": "\(job)", "error": "\(error)"])
                book.outcomes.fail(
                    job,
                    "\(message) This could not be recorded in the store either (\((error as? GraphError)?.message ?? "\(error)")); at its next start squasherd records the job as interrupted."
                )
            }
        }
        guard recordLater else { return await record() }
        book.outcomes.fail(job, message)
        Task { await record() }
    }

    /// Abandons the uploads that received nothing for ``DaemonConfiguration/uploadIdleTimeout``:
    /// their jobs end aborted and their spool files go, and the slots are free again.
    func abandonIdleUploads(logger: Logger) async {
        let timeout = configuration.uploadIdleTimeout
        let seconds = timeout.components.seconds
        for (spooler, owner) in uploads.removeIdle(longerThan: timeout) {
            let reason =
                "No bytes arrived for \(seconds) s, so the upload was abandoned (upload_idle_timeout); submit the file again."
            logger.notice(
                "upload abandoned: idle too long",
                metadata: ["job.id": "\(spooler.jobID)", "upload.idle_timeout": "\(seconds)"])
            await fail(spooler.jobID, spooler, reason, as: .aborted, book: runner.book, logger: logger)
            // A client sending the file over an upgraded connection waits on its input, and
            // would otherwise learn nothing until it sends again.
            owner.endUpgrade(lastReply: try VarlinkReply.encode(invalidInput(reason)))
        }
    }

    /// Tells the clients sending files over upgraded connections that squasherd is stopping,
    /// and closes their connections (the others close as the servers stop): each upload then
    /// ends aborted, as one whose client left, with the stop as its reason.
    func stopUploads() {
        uploads.noteStopping()
        let stopping = VarlinkError(
            Self.busyName, statement: "squasherd is stopping, so the upload was abandoned before it was committed.",
            advice: "Submit the file again once squasherd is back.")
        for owner in uploads.owners { owner.endUpgrade(lastReply: try VarlinkReply.encode(stopping)) }
    }

    fileprivate func invalidInput(_ message: String) -> VarlinkError {
        VarlinkError(Self.invalidInputName, statement: message)
    }

    /// The error for input or a request squasherd refuses: its `message` says what is wrong.
    fileprivate static let invalidInputName = "io.bugsquasher.Import.InvalidInput"

    /// The error for a call the store (or an upload's spool) cannot write now, for a reason on
    /// squasherd's side: the same call succeeds once the operator has dealt with its `message`.
    private static let storeUnavailableName = "io.bugsquasher.Import.StoreUnavailable"

    /// The error for a call squasherd does not take now (as many uploads as it takes are in
    /// progress, or it is stopping): nothing was changed, and the same call succeeds later.
    private static let busyName = "io.bugsquasher.Import.Busy"

    /// How an upload's failure is answered: `StoreUnavailable` for one on squasherd's side (a
    /// full or failing disk under the spool), `InvalidInput` for one in the file or the request;
    /// either with the error's statement and advice.
    private func refusal(_ error: DaemonError) -> VarlinkError {
        VarlinkError(error.isUnavailable ? Self.storeUnavailableName : Self.invalidInputName, explaining: error)
    }
}

/// Receives an upload over a connection upgraded by `Upload`: the file's bytes in
/// ``UploadFraming`` chunks go to the spooler as they arrive; the zero length commits the upload
/// and answers with what `Commit` would, plus the bytes received. A connection that ends before
/// it is an abandoned upload (the clean-up `Begin` registered runs).
private final class UploadReceiver: VarlinkUpgradeHandler {
    private let spooler: Spooler
    private let interface: ImportInterface
    private let book: JobBook
    private let logger: Logger
    private let framing = Mutex(UploadFraming())

    init(spooler: Spooler, interface: ImportInterface, book: JobBook, logger: Logger) {
        self.spooler = spooler
        self.interface = interface
        self.book = book
        self.logger = logger
    }

    func receive(_ bytes: ByteBuffer) async throws -> Data? {
        let (payload, ended, total): ([UInt8], Bool, Int64)
        do {
            (payload, ended, total) = try framing.withLock { framing in
                let payload = try bytes.withUnsafeReadableBytes { try framing.payload(of: $0) }
                return (payload, framing.ended, framing.payloadBytes)
            }
        } catch let error as UploadFramingError {
            await interface.fail(
                spooler.jobID, spooler, "The upload broke off. \(error.statement)", book: book, logger: logger)
            throw VarlinkError(ImportInterface.invalidInputName, explaining: error)
        } catch {
            await interface.fail(spooler.jobID, spooler, "The upload broke off: \(error).", book: book, logger: logger)
            throw interface.invalidInput("\(error)")
        }
        if !payload.isEmpty { try await interface.append(payload, to: spooler, book: book, logger: logger) }
        guard ended else { return nil }
        try await interface.commit(spooler, book: book, logger: logger)
        return try VarlinkReply.encode(UploadReply(job: spooler.jobID, bytes: total), continues: false)
    }
}

/// Uploads in progress, by job ID, with when each last received bytes.
final class UploadRegistry: Sendable {
    /// How many uploads may be in progress at once.
    static let maximumUploads = 64

    private struct Upload {
        var spooler: Spooler
        /// The connection that began it, the only one that may send its bytes and commit it.
        var owner: VarlinkConnection
        var lastActivity: ContinuousClock.Instant
    }

    private let uploads = Mutex<[String: Upload]>([:])
    private let stopping = Atomic<Bool>(false)

    /// Whether squasherd is stopping: uploads cut off now were cut off by the stop, not by
    /// their clients.
    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Notes that squasherd is stopping (before it closes connections).
    func noteStopping() { stopping.store(true, ordering: .releasing) }

    /// How many uploads are in progress.
    var count: Int { uploads.withLock { $0.count } }

    func add(_ spooler: Spooler, owner: VarlinkConnection) {
        uploads.withLock { $0[spooler.jobID] = Upload(spooler: spooler, owner: owner, lastActivity: .now) }
    }
    func get(_ job: String) -> (Spooler, owner: VarlinkConnection)? {
        uploads.withLock { $0[job].map { ($0.spooler, $0.owner) } }
    }
    @discardableResult func remove(_ job: String) -> Spooler? {
        uploads.withLock { $0.removeValue(forKey: job)?.spooler }
    }

    /// Notes that `job`'s upload received bytes.
    func touch(_ job: String) { uploads.withLock { $0[job]?.lastActivity = .now } }

    /// The connections that began the uploads in progress.
    var owners: [VarlinkConnection] { uploads.withLock { $0.values.map(\.owner) } }

    /// Removes and returns the uploads that received nothing for longer than `timeout`, with the
    /// connections that began them.
    func removeIdle(longerThan timeout: Duration) -> [(Spooler, owner: VarlinkConnection)] {
        let deadline = ContinuousClock.now - timeout
        return uploads.withLock { uploads in
            let idle = uploads.filter { $0.value.lastActivity < deadline }
            for job in idle.keys { uploads[job] = nil }
            return idle.values.map { ($0.spooler, $0.owner) }
        }
    }
}
