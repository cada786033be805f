/// A fetch for objects of one entity, typed by the class of its objects.
///
/// ```swift
/// var request = FetchRequest<Bug>(predicate: Key("status") == "Open", sort: [Key("created").descending])
/// request.limit = 20
/// let bugs = try context.fetch(request)            // faults until a property is read
/// request.returnsObjectsAsFaults = false           // prefetch: values arrive with the fetch
/// ```
public struct FetchRequest<Object: ManagedObject>: Sendable {
    /// The entity to fetch.
    public var entityName: String
    /// The filter; `nil` fetches every object.
    public var predicate: ObjectPredicate?
    /// The order of the results.
    public var sort: [SortKey]
    /// At most this many results.
    public var limit: Int?
    /// Skip this many results first.
    public var offset: Int
    /// Return faults (the default) or objects with their values already loaded.
    public var returnsObjectsAsFaults: Bool
    /// When non-zero, faults are fulfilled this many at a time: touching one object of a batch
    /// loads the whole batch in one store request.
    public var batchSize: Int
    /// Whether unsaved inserts, edits and deletes of the context count (Core Data's default).
    public var includesPendingChanges: Bool

    /// Creates a request for `Object`'s entity (its class's ``ManagedObject/entityName``).
    public init(
        entityName: String = Object.entityName,
        predicate: ObjectPredicate? = nil,
        sort: [SortKey] = [],
        limit: Int? = nil,
        offset: Int = 0
    ) {
        self.entityName = entityName
        self.predicate = predicate
        self.sort = sort
        self.limit = limit
        self.offset = offset
        self.returnsObjectsAsFaults = true
        self.batchSize = 0
        self.includesPendingChanges = true
    }

    /// The store-level description of this request.
    func storeRequest(_ resultType: FetchDescription.ResultType) -> FetchDescription {
        FetchDescription(
            entityName: entityName, predicate: predicate, sort: sort, limit: limit, offset: offset,
            resultType: resultType)
    }
}
