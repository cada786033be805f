/// The store protocol, with the duties of Core Data's `NSIncrementalStore`: open and check the
/// store (``loadMetadata(for:)``), fetch and save (``execute(_:)``), fulfil faults
/// (``newValues(for:)``), issue permanent IDs, count registrations, and keep persistent history
/// (``changes(after:limit:)``).
///
/// A coordinator calls a store synchronously, from any thread: implementations are `Sendable` and
/// serialize internally. Nothing in it assumes SQLite (keys are opaque, tokens only ordered), so
/// that a PostgreSQL store or a remote daemon can implement it: docs/OBJECT-GRAPH.md, "The store protocol".
public protocol IncrementalStore: AnyObject, Sendable {
    /// A name for the kind of store, recorded in its metadata (`"SQLite"`).
    var storeType: String { get }

    /// Opens the store for `model`, creating it when new, and returns its metadata.
    ///
    /// - Throws: ``GraphError/Code/incompatibleModel`` when the store was written with a model
    ///   that does not migrate automatically; ``GraphError/Code/invalidStore`` when the file is
    ///   not a store of this type.
    func loadMetadata(for model: ManagedObjectModel) throws -> StoreMetadata

    /// Executes a fetch or a save.
    func execute(_ request: any StoreRequest) throws -> StoreResult

    /// The current values of these objects; IDs without a row are absent from the result.
    func newValues(for objectIDs: [ObjectID]) throws -> [ObjectID: RowSnapshot]

    /// The destinations of a to-many relationship of one object.
    func newValue(forRelationship name: String, of objectID: ObjectID) throws -> [ObjectID]

    /// Permanent IDs for these temporary IDs, in the same order.
    func obtainPermanentIDs(for objectIDs: [ObjectID]) throws -> [ObjectID]

    /// A context registered these objects (each call adds one reference per ID).
    func didRegister(_ objectIDs: [ObjectID])

    /// A context dropped these objects (each call removes one reference per ID).
    func didUnregister(_ objectIDs: [ObjectID])

    /// The did-saves committed after `token`, oldest first, at most `limit`.
    func changes(after token: HistoryToken, limit: Int) throws -> [DidSave]

    /// The token of the newest committed save (``HistoryToken/zero`` before the first).
    func currentHistoryToken() throws -> HistoryToken
}

/// A store that hands every committed did-save to observers, in commit order, right after the
/// commit: the fan-out point of a daemon (no I/O may happen in the observer; it runs on the
/// store's writer).
public protocol CommitObservable: Sendable {
    /// Calls `handler` after each commit, serially, in commit (token) order.
    func observeCommits(_ handler: @escaping @Sendable (DidSave) -> Void)
}

/// A store that edits the attributes of one object in a single write transaction, without a
/// context: the short path for one edit (`Import.Update` in squasherd).
public protocol AttributeEditable: Sendable {
    /// Reads the object's row, applies the request's attributes (by name) and writes it with its
    /// version bumped and a history row, in one write transaction, as a save would (commit
    /// observers see a save): nothing can come between, so there is no conflict, unless the
    /// request names the version it expects and the row has another. An edit that changes
    /// nothing writes nothing and answers the version that already held its values, read in
    /// that transaction; relationships are left to contexts, which keep both sides.
    ///
    /// - Throws: ``GraphError``: ``GraphError/Code/objectNotFound``, ``GraphError/Code/validation`` (a nil
    ///   in a required attribute, a value of another type), ``GraphError/Code/constraintViolation``,
    ///   or ``GraphError/Code/mergeConflict`` when the row is not at the request's
    ///   ``AttributeEditRequest/expectedVersion`` (``AttributeEdit/versionMismatch(_:)``).
    func edit(_ request: AttributeEditRequest) throws -> AttributeEditOutcome
}

/// What an ``AttributeEditable/edit(_:)`` came to.
public enum AttributeEditOutcome: Sendable {
    /// The edit changed the object, in this save.
    case saved(DidSave)
    /// The object already held the edit's values, at this version: nothing was written.
    case unchanged(version: Int64)

    /// The save the edit made; `nil` when nothing changed.
    public var didSave: DidSave? {
        if case .saved(let didSave) = self { didSave } else { nil }
    }

    /// The version of `id` that holds the edit's values: the save's, or the one found.
    public func version(of id: ObjectID) -> Int64 {
        switch self {
        case .saved(let didSave): didSave.updated.first { $0.objectID == id }?.version ?? 0
        case .unchanged(let version): version
        }
    }
}

extension AttributeEditable {
    /// Sets `attributes` on `id` (``edit(_:)`` without an expected version): the save it made,
    /// or `nil` when the object already held them.
    public func edit(_ id: ObjectID, attributes: [String: Value]) throws -> DidSave? {
        try edit(AttributeEditRequest(id, attributes: attributes)).didSave
    }
}

/// An ``AttributeEditable`` store whose edits each wait on a round trip to a server, so that
/// edits arriving together are worth committing together: squasherd hands it the edits that
/// queue up while one commits, and they cost one transaction, one history token and one round
/// trip instead of one each. Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit
/// together".
public protocol BatchEditable: AttributeEditable {
    /// Applies each edit as ``AttributeEditable/edit(_:)`` does and returns each one's outcome,
    /// in the order given. The edits that apply to the rows as last seen commit as one save
    /// (one token; each of them gets that save); the others go one by one, each with its own
    /// outcome. The objects must be distinct.
    func edit(batch: [AttributeEditRequest]) -> [Result<AttributeEditOutcome, any Error>]
}

/// One edit of an ``AttributeEditable/edit(_:)``: the object, its attributes to set by name,
/// and the version it must be at, if any.
public struct AttributeEditRequest: Sendable {
    /// The object edited.
    public var objectID: ObjectID
    /// The attributes set, by name.
    public var attributes: [String: Value]
    /// The version the object must be at for the edit to apply (the one its client read: a
    /// compare-and-set); `nil` applies it to whatever the row holds.
    public var expectedVersion: Int64?

    /// An edit setting `attributes` on `objectID`, at `expectedVersion` when given.
    public init(_ objectID: ObjectID, attributes: [String: Value], expectedVersion: Int64? = nil) {
        self.objectID = objectID
        self.attributes = attributes
        self.expectedVersion = expectedVersion
    }
}

/// The attributes an ``AttributeEditable/edit(_:)`` sets, checked against the entity before the
/// store reads the row, and applied to the row it reads: the part of an edit that is the same in
/// every store.
public struct AttributeEdit: Sendable {
    /// The object edited, and its entity.
    public let objectID: ObjectID
    public let entity: EntityDescription
    /// Each attribute's index in the entity and its new value, by name.
    public let changes: [(index: Int, value: Value)]
    /// The version the row must be at, when the request names one.
    public let expectedVersion: Int64?

    /// Checks `request`'s attributes for an edit of its object, an object of `store`.
    ///
    /// - Throws: ``GraphError``: ``GraphError/Code/invalidArgument`` for an object of another
    ///   store or an attribute the entity lacks, ``GraphError/Code/validation`` for a value the
    ///   attribute cannot hold.
    public init(_ request: AttributeEditRequest, model: ManagedObjectModel, store: String) throws {
        let (id, attributes) = (request.objectID, request.attributes)
        guard !id.isTemporary, id.storeIdentifier == store else {
            throw GraphError(.invalidArgument, "\(id) is not an object of this store.")
        }
        let entity = try model.requireEntity(id.entityName)
        var changes: [(index: Int, value: Value)] = []
        for (name, value) in attributes.sorted(by: { $0.key < $1.key }) {
            guard let index = entity.attributeIndex[name] else {
                throw GraphError(.invalidArgument, "\(entity.name) has no attribute '\(name)'.")
            }
            if let problem = entity.attributes[index].problem(storing: value, in: entity.name, of: id) {
                throw GraphError(.validation, "The save was refused: \(problem).")
            }
            changes.append((index, value))
        }
        self.objectID = id
        self.entity = entity
        self.changes = changes
        self.expectedVersion = request.expectedVersion
    }

    /// The save of the edit applied to `current`, the row as read: only the attributes whose
    /// value changes, checked against `current`'s version; `nil` when nothing changes.
    ///
    /// - Throws: ``GraphError/Code/objectNotFound`` when there is no row (`current` is `nil`),
    ///   and ``versionMismatch(_:)`` when the row is not at ``expectedVersion``.
    public func save(from current: RowSnapshot?) throws -> SaveChanges? {
        guard let current else {
            throw GraphError(.objectNotFound, "\(objectID) has no row in the store: it was deleted, or never saved.")
        }
        if let expectedVersion, current.version != expectedVersion { throw versionMismatch(current) }
        var row = SaveChanges.Row(
            objectID: objectID, expectedVersion: current.version, attributes: current.attributes,
            toOne: current.toOne, changedKeys: [])
        for (index, value) in changes where row.attributes[index] != value {
            row.attributes[index] = value
            row.changedKeys.append(entity.attributes[index].name)
        }
        guard !row.changedKeys.isEmpty else { return nil }
        var save = SaveChanges()
        save.updated = [row]
        return save
    }

    /// The conflict of an edit that expected another version than `current`'s
    /// (``GraphError/versionMismatch(of:expected:found:)``).
    public func versionMismatch(_ current: RowSnapshot) -> GraphError {
        .versionMismatch(of: objectID, expected: expectedVersion ?? 0, found: current.version)
    }
}

extension GraphError {
    /// The ``GraphError/Code/mergeConflict`` of an edit that expected `id` at version `expected`
    /// (the one its client read) and found it at `found`: nothing was saved. Its one conflict
    /// carries both versions.
    public static func versionMismatch(of id: ObjectID, expected: Int64, found: Int64) -> GraphError {
        GraphError(
            .mergeConflict,
            "\(id) is at version \(found), not \(expected): it changed since that version was read, and nothing was saved.",
            advice: "Read it again, and make the change to what it holds now.",
            conflicts: [MergeConflict(objectID: id, cachedVersion: expected, persistedVersion: found)])
    }
}

extension IncrementalStore {
    /// The current values of one object, or `nil` when it has no row.
    public func newValues(for objectID: ObjectID) throws -> RowSnapshot? {
        try newValues(for: [objectID])[objectID]
    }

    /// Throws the error a store gives for a request kind it does not know.
    public func unsupported(_ request: any StoreRequest) -> GraphError {
        GraphError(
            .unsupportedRequest,
            "\(storeType) store cannot execute a \(type(of: request)); it executes FetchDescription and SaveChanges.")
    }
}
