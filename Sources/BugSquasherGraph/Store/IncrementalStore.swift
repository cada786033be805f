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
    /// Reads the object's row, applies `attributes` (by name) and writes it with its version bumped
    /// and a history row, in one write transaction, as a save would (commit observers see a save):
    /// nothing can come between, so there is no conflict. An edit that changes nothing writes
    /// nothing and returns `nil`; relationships are left to contexts, which keep both sides.
    ///
    /// - Throws: ``GraphError``: ``GraphError/Code/objectNotFound``, ``GraphError/Code/validation`` (a nil
    ///   in a required attribute, a value of another type) or ``GraphError/Code/constraintViolation``.
    func edit(_ id: ObjectID, attributes: [String: Value]) throws -> DidSave?
}

/// An ``AttributeEditable`` store whose edits each wait on a round trip to a server, so that
/// edits arriving together are worth committing together: squasherd hands it the edits that
/// queue up while one commits, and they cost one transaction, one history token and one round
/// trip instead of one each. Why: docs/DESIGN-NOTES.md, "Edits that arrive together commit
/// together".
public protocol BatchEditable: AttributeEditable {
    /// Applies each edit as ``AttributeEditable/edit(_:attributes:)`` does and returns each
    /// one's result, in the order given. The edits that apply to the rows as last seen commit as
    /// one save (one token; each of them gets that save); the others go one by one, each with
    /// its own result. The objects must be distinct.
    func edit(batch: [AttributeEditRequest]) -> [Result<DidSave?, any Error>]
}

/// One edit of a ``BatchEditable/edit(batch:)``: the object, and its attributes to set by name.
public struct AttributeEditRequest: Sendable {
    /// The object edited.
    public var objectID: ObjectID
    /// The attributes set, by name, as ``AttributeEditable/edit(_:attributes:)`` takes them.
    public var attributes: [String: Value]

    /// An edit setting `attributes` on `objectID`.
    public init(_ objectID: ObjectID, attributes: [String: Value]) {
        self.objectID = objectID
        self.attributes = attributes
    }
}

/// The attributes an ``AttributeEditable/edit(_:attributes:)`` sets, checked against the entity
/// before the store reads the row, and applied to the row it reads: the part of an edit that is
/// the same in every store.
public struct AttributeEdit: Sendable {
    /// The object edited, and its entity.
    public let objectID: ObjectID
    public let entity: EntityDescription
    /// Each attribute's index in the entity and its new value, by name.
    public let changes: [(index: Int, value: Value)]

    /// Checks `attributes` for an edit of `id`, an object of `store`.
    ///
    /// - Throws: ``GraphError``: ``GraphError/Code/invalidArgument`` for an object of another
    ///   store or an attribute the entity lacks, ``GraphError/Code/validation`` for a value the
    ///   attribute cannot hold.
    public init(_ id: ObjectID, attributes: [String: Value], model: ManagedObjectModel, store: String) throws {
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
    }

    /// The save of the edit applied to `current`, the row as read: only the attributes whose
    /// value changes, checked against `current`'s version; `nil` when nothing changes.
    ///
    /// - Throws: ``GraphError/Code/objectNotFound`` when there is no row (`current` is `nil`).
    public func save(from current: RowSnapshot?) throws -> SaveChanges? {
        guard let current else { throw GraphError(.objectNotFound, "\(objectID) does not exist (it was deleted).") }
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
