import BugSquasherGraph
public import BugSquasherModel
public import BugSquasherVarlink

/// The Varlink interface names.
public enum InterfaceName {
    /// The change feed.
    public static let changes = "io.bugsquasher.Changes"
    /// Reads.
    public static let store = "io.bugsquasher.Store"
    /// Import jobs (read-only).
    public static let jobs = "io.bugsquasher.Jobs"
    /// Imports and edits (write socket only).
    public static let importing = "io.bugsquasher.Import"
}

/// `io.bugsquasher.Changes.ObjectChange`.
public struct WireObjectChange: Codable, Sendable, Hashable {
    /// The object ID URI.
    public var id: String
    /// The version after the save.
    public var version: Int64
    /// Changed keys (updates only).
    public var keys: [String]?
    /// New values, when asked for.
    public var values: [String: JSONValue]?
    /// A run of IDs (only for a subscriber that asked for `idRuns`): this change stands for
    /// `count` objects of one entity, all at `version`, whose primary keys follow `id`'s one by
    /// one (`…/Bug/p1001`, `…/Bug/p1002`, …). ``WireSave``'s JSON reader expands runs.
    public var count: Int64?

    /// The most IDs one run stands for: longer runs are split by the writer, refused by the reader.
    public static let maximumRunLength: Int64 = 1_000_000

    /// Creates a change.
    public init(
        id: String, version: Int64, keys: [String]? = nil, values: [String: JSONValue]? = nil, count: Int64? = nil
    ) {
        self.id = id
        self.version = version
        self.keys = keys
        self.values = values
        self.count = count
    }
}

/// `io.bugsquasher.Changes.Save`.
public struct WireSave: Codable, Sendable, Hashable {
    /// The save's history token.
    public var token: Int64
    /// Inserted objects.
    public var inserted: [WireObjectChange]
    /// Updated objects.
    public var updated: [WireObjectChange]
    /// Deleted objects.
    public var deleted: [WireObjectChange]

    /// Creates a save.
    public init(token: Int64, inserted: [WireObjectChange], updated: [WireObjectChange], deleted: [WireObjectChange]) {
        self.token = token
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }
}

/// The parameters of `io.bugsquasher.Changes.Subscribe`.
public struct SubscribeParameters: Codable, Sendable {
    /// Replay history after this token first.
    public var since: Int64?
    /// Only changes to registered IDs, and the inserts `insertsOf` names.
    public var registeredOnly: Bool?
    /// Include new values.
    public var includeValues: Bool?
    /// IDs to register before any history is replayed.
    public var register: [String]?
    /// The versions held, parallel to `register`; 0 marks a fault (only its deletion is sent).
    /// Without them, every change to a registered object is sent.
    public var versions: [Int64]?
    /// Inserted and deleted objects without values whose primary keys follow one another (one
    /// entity, one version) are sent as one change with a `count`: an import's chunk of 1,000
    /// new bugs is one element instead of 1,000.
    public var idRuns: Bool?
    /// With `registeredOnly`: inserted objects of this entity pass the filter when they match
    /// ``insertsMatching`` (a subscriber waiting for objects that do not exist yet).
    public var insertsOf: String?
    /// The predicate an inserted object of ``insertsOf`` must match, on its own attributes
    /// (`key IN ("TIMOB-7", "TIMOB-9")`); every insert of that entity passes without it.
    public var insertsMatching: String?

    /// Creates parameters.
    public init(
        since: Int64? = nil, registeredOnly: Bool? = nil, includeValues: Bool? = nil, register: [String]? = nil,
        versions: [Int64]? = nil, idRuns: Bool? = nil, insertsOf: String? = nil, insertsMatching: String? = nil
    ) {
        self.since = since
        self.registeredOnly = registeredOnly
        self.includeValues = includeValues
        self.register = register
        self.versions = versions
        self.idRuns = idRuns
        self.insertsOf = insertsOf
        self.insertsMatching = insertsMatching
    }
}

/// One reply of `io.bugsquasher.Changes.Subscribe`.
public struct SubscribeReply: Codable, Sendable {
    /// `subscribed`, `save`, `refresh` (an object a Register found stale) or `resync`.
    public var event: String
    /// The subscription ID (first reply).
    public var subscription: String?
    /// The newest token delivered.
    public var token: Int64
    /// The save, for `save` and `refresh`.
    public var save: WireSave?
    /// Where to resume after `resync`.
    public var resyncFrom: Int64?

    /// Creates a reply.
    public init(
        event: String, subscription: String? = nil, token: Int64, save: WireSave? = nil, resyncFrom: Int64? = nil
    ) {
        self.event = event
        self.subscription = subscription
        self.token = token
        self.save = save
        self.resyncFrom = resyncFrom
    }
}

/// The parameters of Register / Unregister.
public struct RegisterParameters: Codable, Sendable {
    /// The subscription.
    public var subscription: String
    /// The IDs.
    public var ids: [String]
    /// The versions held, parallel to `ids` (Register only): newer stored versions are sent at
    /// once as a refresh; 0 marks a fault, whose updates are not sent (its deletion is). Without
    /// them, every change to the IDs is sent.
    public var versions: [Int64]?

    /// Creates parameters.
    public init(subscription: String, ids: [String], versions: [Int64]? = nil) {
        self.subscription = subscription
        self.ids = ids
        self.versions = versions
    }
}

/// The reply of Register / Unregister.
public struct RegisterReply: Codable, Sendable {
    /// How many IDs the subscription holds now.
    public var registered: Int
    /// Creates a reply.
    public init(registered: Int) { self.registered = registered }
}

/// `io.bugsquasher.Store.Row`.
public struct WireRow: Codable, Sendable, Hashable {
    /// The ID URI.
    public var id: String
    /// The version.
    public var version: Int64
    /// Attributes by name, to-one relationships as URIs.
    public var values: [String: JSONValue]

    /// Creates a row.
    public init(id: String, version: Int64, values: [String: JSONValue]) {
        self.id = id
        self.version = version
        self.values = values
    }
}

/// The parameters of `io.bugsquasher.Store.Fetch`.
public struct FetchParameters: Codable, Sendable {
    /// The entity.
    public var entity: String
    /// A predicate in the text syntax.
    public var predicate: String?
    /// Sort key paths, `-` first for descending.
    public var sort: [String]?
    /// Limit.
    public var limit: Int?
    /// Offset.
    public var offset: Int?
    /// `ids`, `rows` or `count`.
    public var result: String?

    /// Creates parameters.
    public init(
        entity: String, predicate: String? = nil, sort: [String]? = nil, limit: Int? = nil, offset: Int? = nil,
        result: String? = nil
    ) {
        self.entity = entity
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
        self.result = result
    }
}

/// The reply of `io.bugsquasher.Store.Fetch`.
public struct FetchReply: Codable, Sendable {
    /// IDs, for `ids`.
    public var ids: [String]?
    /// Rows, for `rows`.
    public var rows: [WireRow]?
    /// The count, for `count`.
    public var count: Int?
    /// `true` when the daemon's per-call cap cut `ids` or `rows` short of the limit asked for
    /// (or of the whole result, when no limit was given): call again with `offset` advanced by
    /// what this reply holds. Absent otherwise.
    public var more: Bool?

    /// Creates a reply.
    public init(ids: [String]? = nil, rows: [WireRow]? = nil, count: Int? = nil, more: Bool? = nil) {
        self.ids = ids
        self.rows = rows
        self.count = count
        self.more = more
    }
}

/// IDs in, rows out (`Values`).
public struct IDsParameters: Codable, Sendable {
    /// The IDs.
    public var ids: [String]
    /// Creates parameters.
    public init(ids: [String]) { self.ids = ids }
}

/// The reply of `Values`.
public struct RowsReply: Codable, Sendable {
    /// The rows.
    public var rows: [WireRow]
    /// Creates a reply.
    public init(rows: [WireRow]) { self.rows = rows }
}

/// The parameters of `Related`.
public struct RelatedParameters: Codable, Sendable {
    /// The object.
    public var id: String
    /// The to-many relationship.
    public var relationship: String
    /// Skip this many of the related IDs (for the next page of a reply that had `more`).
    public var offset: Int?
    /// Creates parameters.
    public init(id: String, relationship: String, offset: Int? = nil) {
        self.id = id
        self.relationship = relationship
        self.offset = offset
    }
}

/// An ID list reply.
public struct IDsReply: Codable, Sendable {
    /// The IDs.
    public var ids: [String]
    /// `true` when the daemon's per-call cap cut the list: call again with `offset` advanced by
    /// the IDs received.
    public var more: Bool?
    /// Creates a reply.
    public init(ids: [String], more: Bool? = nil) {
        self.ids = ids
        self.more = more
    }
}

/// The reply of `io.bugsquasher.Store.Info`.
public struct StoreInfo: Codable, Sendable {
    /// The store UUID.
    public var storeIdentifier: String
    /// The store type.
    public var storeType: String
    /// The model hash.
    public var modelVersionHash: String
    /// The newest history token.
    public var token: Int64
    /// The entity names.
    public var entities: [String]

    /// Creates info.
    public init(storeIdentifier: String, storeType: String, modelVersionHash: String, token: Int64, entities: [String])
    {
        self.storeIdentifier = storeIdentifier
        self.storeType = storeType
        self.modelVersionHash = modelVersionHash
        self.token = token
        self.entities = entities
    }
}

/// `io.bugsquasher.Jobs.Job`.
public struct WireJob: Codable, Sendable, Hashable {
    /// The job ID.
    public var id: String
    /// The name the submitter gave (the file name).
    public var name: String
    /// The input format.
    public var format: String
    /// Where the job is in its life (on the wire, its raw value: `running`).
    public var state: JobState
    /// Records read so far.
    public var recordsRead: Int64
    /// Records imported so far.
    public var imported: Int64
    /// Records rejected so far.
    public var rejected: Int64
    /// Bytes of the (decompressed) input processed.
    public var bytesDone: Int64
    /// Bytes of the (decompressed) input in all.
    public var bytesTotal: Int64
    /// When the job was created (ISO 8601).
    public var created: String
    /// When it finished (ISO 8601).
    public var finished: String?
    /// Why it failed.
    public var error: String?
    /// For a CSV export: the column each field was read from, and the columns not imported.
    public var columns: String?

    /// Creates a job description.
    public init(
        id: String, name: String, format: String, state: JobState, recordsRead: Int64, imported: Int64, rejected: Int64,
        bytesDone: Int64, bytesTotal: Int64, created: String, finished: String?, error: String?, columns: String? = nil
    ) {
        self.id = id
        self.name = name
        self.format = format
        self.state = state
        self.recordsRead = recordsRead
        self.imported = imported
        self.rejected = rejected
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.created = created
        self.finished = finished
        self.error = error
        self.columns = columns
    }

    /// Whether the job will not change any more.
    public var isFinal: Bool { state.isFinal }
}

/// `io.bugsquasher.Jobs.Reject`.
public struct WireReject: Codable, Sendable, Hashable {
    /// The line (or record number) in the input.
    public var line: Int64
    /// Why it was rejected.
    public var reason: String
    /// Creates a reject.
    public init(line: Int64, reason: String) {
        self.line = line
        self.reason = reason
    }
}

/// A parameter object with one `job` field.
public struct JobParameter: Codable, Sendable {
    /// The job ID.
    public var job: String
    /// Creates the parameter.
    public init(job: String) { self.job = job }
}

/// A parameter object with an optional `limit`.
public struct LimitParameter: Codable, Sendable {
    /// At most this many.
    public var limit: Int?
    /// Creates the parameter.
    public init(limit: Int? = nil) { self.limit = limit }
}

/// An empty parameter or reply object.
public struct Empty: Codable, Sendable {
    /// Creates it.
    public init() {}
}

/// The parameters of `io.bugsquasher.Import.Begin`.
public struct BeginImportParameters: Codable, Sendable {
    /// The job's name (the file name).
    public var name: String
    /// The format, or `nil` to detect it.
    public var format: String?
    /// Records per chunk, or `nil` for the daemon's default.
    public var chunkSize: Int?
    /// For a CSV export: the column each field is read from, by field name (`key`, `created`, …).
    public var columns: [String: String]?
    /// For a CSV export: the key of every bug's project, which makes numeric IDs keys.
    public var project: String?
    /// Creates parameters.
    public init(
        name: String, format: String? = nil, chunkSize: Int? = nil, columns: [String: String]? = nil,
        project: String? = nil
    ) {
        self.name = name
        self.format = format
        self.chunkSize = chunkSize
        self.columns = columns
        self.project = project
    }
}

/// The parameters of `io.bugsquasher.Import.Append`.
public struct AppendParameters: Codable, Sendable {
    /// The job.
    public var job: String
    /// Base64-encoded bytes.
    public var data: String
    /// Creates parameters.
    public init(job: String, data: String) {
        self.job = job
        self.data = data
    }
}

/// The reply of `io.bugsquasher.Import.Append`.
public struct BytesReply: Codable, Sendable {
    /// Bytes received.
    public var bytes: Int
    /// Creates a reply.
    public init(bytes: Int) { self.bytes = bytes }
}

/// The parameters of `io.bugsquasher.Import.Update`.
public struct UpdateParameters: Codable, Sendable {
    /// The object ID URI.
    public var id: String
    /// New values by attribute (or to-one relationship) name.
    public var values: [String: JSONValue]
    /// Creates parameters.
    public init(id: String, values: [String: JSONValue]) {
        self.id = id
        self.values = values
    }
}

/// The reply of `io.bugsquasher.Import.Update`.
public struct UpdateReply: Codable, Sendable {
    /// The object's version after the save.
    public var version: Int64
    /// The save's history token.
    public var token: Int64
    /// Creates a reply.
    public init(version: Int64, token: Int64) {
        self.version = version
        self.token = token
    }
}

/// A reply with one job (`Get`, `Watch`).
public struct JobReply: Codable, Sendable {
    /// The job.
    public var job: WireJob
    /// Creates a reply.
    public init(job: WireJob) { self.job = job }
}

/// The reply of `io.bugsquasher.Jobs.List`.
public struct JobsReply: Codable, Sendable {
    /// The jobs, newest first.
    public var jobs: [WireJob]
    /// Creates a reply.
    public init(jobs: [WireJob]) { self.jobs = jobs }
}

/// The parameters of `io.bugsquasher.Jobs.Rejects`.
public struct RejectsParameters: Codable, Sendable {
    /// The job.
    public var job: String
    /// At most this many.
    public var limit: Int?
    /// Skip this many first (in input order), for the next page.
    public var offset: Int?
    /// Creates parameters.
    public init(job: String, limit: Int? = nil, offset: Int? = nil) {
        self.job = job
        self.limit = limit
        self.offset = offset
    }
}

/// The reply of `io.bugsquasher.Jobs.Rejects`.
public struct RejectsReply: Codable, Sendable {
    /// The rejects, in input order.
    public var rejects: [WireReject]
    /// `true` when more rejects follow this page (ask again with `offset` past it); absent
    /// after the last page.
    public var more: Bool?
    /// Creates a reply.
    public init(rejects: [WireReject], more: Bool? = nil) {
        self.rejects = rejects
        self.more = more
    }
}

/// The reply of `io.bugsquasher.Jobs.Status`.
public struct StatusReply: Codable, Sendable {
    /// The store's UUID.
    public var storeIdentifier: String
    /// The newest history token.
    public var token: Int64
    /// How many bugs the store holds.
    public var bugs: Int
    /// How many change-feed subscribers are connected.
    public var subscribers: Int
    /// How many clients follow an import job with `Jobs.Watch` (`squasherctl import --wait`);
    /// not counted in ``subscribers``.
    public var jobFollowers: Int?
    /// The running job, if any.
    public var activeJob: WireJob?
    /// Save conflicts the daemon's contexts resolved with their merge policy since it started
    /// (an edit and an import chunk that changed the same bug at the same time).
    public var conflictsResolved: Int?
    /// Creates a reply.
    public init(
        storeIdentifier: String, token: Int64, bugs: Int, subscribers: Int, jobFollowers: Int? = nil,
        activeJob: WireJob?, conflictsResolved: Int? = nil
    ) {
        self.storeIdentifier = storeIdentifier
        self.token = token
        self.bugs = bugs
        self.subscribers = subscribers
        self.jobFollowers = jobFollowers
        self.activeJob = activeJob
        self.conflictsResolved = conflictsResolved
    }
}

/// The last message of an upgraded `Upload`: the job, queued, and the file's bytes received.
public struct UploadReply: Codable, Sendable {
    /// The job.
    public var job: String
    /// The bytes of the file received (without the chunk headers).
    public var bytes: Int64
    /// Creates a reply.
    public init(job: String, bytes: Int64) {
        self.job = job
        self.bytes = bytes
    }
}
