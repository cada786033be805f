public import BugSquasherGraph
import BugSquasherSQLite
public import Foundation
public import Logging
import Synchronization

/// The Core Data stack of RTCoreDataStack, fixed and extended: a **main coordinator** for reads
/// and a **writer coordinator** for writes over one store, and the contexts built on them.
///
/// - ``mainContext``: main coordinator, store-trump. Writer-side saves are merged into it before they
///   return, refreshing only what it holds; its own saves are refused while ``isMainContextReadOnly``.
/// - ``importerContext(name:bulk:)``: on the writer coordinator, object-trump, for background imports.
/// - ``temporaryContext(name:)``: on the main coordinator, rollback policy, never saved.
/// - ``editorContext(name:)``: a child of ``mainContext``, object-trump; refused while read-only.
public final class PersistentStack: Sendable {
    /// The model.
    public let model: ManagedObjectModel
    /// The store both coordinators share (one database pool per file per process).
    public let store: any IncrementalStore
    /// The coordinator of the main, temporary and editor contexts.
    public let mainCoordinator: StoreCoordinator
    /// The coordinator of importer contexts.
    public let writerCoordinator: StoreCoordinator
    /// The context that reads for the program: store-trump, merged into automatically.
    public let mainContext: ObjectContext

    private struct Settings {
        var shouldMergeIncomingSavedObjects = true
        var isMainContextReadOnly = false
        var observers: [@Sendable (DidSave) async -> Void] = []
        var mergeObservers: [@Sendable (MergeResult) async -> Void] = []
    }

    private let settings = Mutex(Settings())
    private let logger: Logger
    /// The other processes' saves of a ``SharedStore``, merged into ``mainContext`` in order.
    private let othersSaves: AsyncStream<OthersEvent>.Continuation?

    /// Opens a stack over an SQLite store file (created when missing or empty).
    ///
    /// - Throws: `GraphError` when the file cannot be opened, is not a store, or was written
    ///   with an incompatible model.
    public convenience init(
        model: ManagedObjectModel, storeURL: URL, logger: Logger = Logger(label: "bugsquasher.stack")
    ) throws {
        try self.init(model: model, store: SQLiteStore(url: storeURL, logger: logger), logger: logger)
    }

    /// Opens a stack over any incremental store.
    public init(
        model: ManagedObjectModel, store: any IncrementalStore, logger: Logger = Logger(label: "bugsquasher.stack")
    ) throws {
        self.model = model
        self.store = store
        self.logger = logger
        mainCoordinator = try StoreCoordinator(model: model, store: store)
        writerCoordinator = try StoreCoordinator(model: model, store: store)
        let box = WeakBox()
        mainContext = ObjectContext(
            coordinator: mainCoordinator, mergePolicy: .mergeByPropertyStoreTrump, name: "main", logger: logger,
            didSave: { didSave in await box.stack?.notifyObservers(didSave) }
        )
        if let shared = store as? any SharedStore {
            // Merged one after the other, in the order the store hands them over.
            let (events, continuation) = AsyncStream.makeStream(of: OthersEvent.self)
            othersSaves = continuation
            shared.observeCommitsOfOthers { continuation.yield(.save($0)) }
            shared.observeHistoryGaps { _ in continuation.yield(.historyGap) }
            Task { [box] in
                for await event in events {
                    switch event {
                    case .save(let didSave): await box.stack?.mergeSaveOfAnotherProcess(didSave)
                    case .historyGap: await box.stack?.refetchRegisteredObjects()
                    }
                }
            }
        } else {
            othersSaves = nil
        }
        box.stack = self
    }

    deinit { othersSaves?.finish() }

    // MARK: Settings

    /// Whether saves of writer-side contexts are merged into ``mainContext`` (default `true`).
    public var shouldMergeIncomingSavedObjects: Bool {
        get { settings.withLock { $0.shouldMergeIncomingSavedObjects } }
        set { settings.withLock { $0.shouldMergeIncomingSavedObjects = newValue } }
    }

    /// Whether ``mainContext`` refuses saves and ``editorContext(name:)`` refuses to create
    /// editors (default `false`).
    public var isMainContextReadOnly: Bool {
        get { settings.withLock { $0.isMainContextReadOnly } }
        set {
            settings.withLock { $0.isMainContextReadOnly = newValue }
            mainContext.refuseSaves(
                because: newValue
                    ? "the stack's main context is read-only (isMainContextReadOnly); save through an importer context instead"
                    : nil)
        }
    }

    /// Calls `handler` after every save that reaches the store through this stack, with its
    /// did-save (after the smart merge into ``mainContext``).
    public func observeDidSaves(_ handler: @escaping @Sendable (DidSave) async -> Void) {
        settings.withLock { $0.observers.append(handler) }
    }

    /// Calls `handler` after each automatic smart merge into ``mainContext``, with what it
    /// refreshed and deleted (only objects the main context had registered).
    public func observeMainContextMerges(_ handler: @escaping @Sendable (MergeResult) async -> Void) {
        settings.withLock { $0.mergeObservers.append(handler) }
    }

    // MARK: Contexts

    /// A new context on the writer coordinator for a background import (object-trump). Its saves
    /// are merged into ``mainContext``.
    ///
    /// - Parameters:
    ///   - name: a name for logs and messages.
    ///   - bulk: whether its saves are bulk work, which a store with an `EditsFirst` holds back
    ///     for a moment after an interactive save (an import's chunks; not an edit).
    public func importerContext(name: String = "importer", bulk: Bool = false) -> ObjectContext {
        ObjectContext(
            coordinator: writerCoordinator, mergePolicy: .mergeByPropertyObjectTrump, name: name, logger: logger,
            savesAreBulk: bulk,
            didSave: { [weak self] didSave in await self?.writerDidSave(didSave) }
        )
    }

    /// A new context on the main coordinator for throw-away work (rollback policy); it refuses
    /// every save.
    public func temporaryContext(name: String = "temporary") -> ObjectContext {
        let context = ObjectContext(coordinator: mainCoordinator, mergePolicy: .rollback, name: name, logger: logger)
        context.refuseSaves(because: "temporary contexts are never saved; use an importer or editor context")
        return context
    }

    /// A new child of ``mainContext`` for editing (object-trump). Save it with
    /// `ObjectContext.saveToPersistentStore()` to push the edit through the main context to
    /// the store.
    ///
    /// - Throws: `GraphError` (`readOnly`) while ``isMainContextReadOnly`` is set.
    public func editorContext(name: String = "editor") async throws -> ObjectContext {
        if isMainContextReadOnly {
            throw GraphError(
                .readOnly,
                "The main context is read-only (isMainContextReadOnly), so editor contexts, which save through it, are refused.",
                advice: "Use an importer context, or clear isMainContextReadOnly."
            )
        }
        return await mainContext.newChildContext(mergePolicy: .mergeByPropertyObjectTrump, name: name)
    }

    // MARK: Notifications

    /// A save another process committed to a shared store: merged into ``mainContext`` as a
    /// writer save is (it did not reach the store through this stack, so the did-save observers
    /// are not told).
    private func mergeSaveOfAnotherProcess(_ didSave: DidSave) async {
        guard shouldMergeIncomingSavedObjects else {
            mainCoordinator.absorb(didSave)
            return
        }
        let result = await mainContext.merge(didSave)
        for observer in settings.withLock({ $0.mergeObservers }) { await observer(result) }
    }

    /// Saves of other processes were pruned from the history before this stack read them: the
    /// main context's registered objects are read again and merged as a save of them would be.
    private func refetchRegisteredObjects() async {
        let ids = await mainContext.perform { context in
            context.registeredObjects.map(\.objectID).filter { !$0.isTemporary }
        }
        guard !ids.isEmpty else { return }
        let rows: [ObjectID: RowSnapshot]
        do {
            rows = try store.newValues(for: ids)
        } catch {
            logger.error(
                "could not refetch the objects held after saves were pruned unread; they may be stale",
                metadata: ["error": "\(error)"])
            return
        }
        var didSave = DidSave(token: .zero, storeIdentifier: mainCoordinator.storeIdentifier)
        didSave.updated = rows.map {
            ObjectChange(objectID: $0.key, version: $0.value.version, changedKeys: [], values: $0.value)
        }
        didSave.deleted = ids.filter { rows[$0] == nil }.map { ObjectChange(objectID: $0, version: 0, changedKeys: []) }
        await mergeSaveOfAnotherProcess(didSave)
    }

    private func writerDidSave(_ didSave: DidSave) async {
        if shouldMergeIncomingSavedObjects {
            let result = await mainContext.merge(didSave)
            for observer in settings.withLock({ $0.mergeObservers }) { await observer(result) }
        } else {
            mainCoordinator.absorb(didSave)
        }
        await notifyObservers(didSave)
    }

    private func notifyObservers(_ didSave: DidSave) async {
        let observers = settings.withLock { $0.observers }
        for observer in observers { await observer(didSave) }
    }
}

/// What the store tells a stack of the other processes: a save, or saves pruned unread.
private enum OthersEvent: Sendable {
    case save(DidSave)
    case historyGap
}

/// Lets the main context's save handler reach the stack that owns it without a retain cycle.
private final class WeakBox: Sendable {
    private let reference = Mutex<WeakReference?>(nil)
    private struct WeakReference { weak var stack: PersistentStack? }

    var stack: PersistentStack? {
        get { reference.withLock { $0?.stack } }
        set { reference.withLock { $0 = WeakReference(stack: newValue) } }
    }
}
