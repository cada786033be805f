import BugSquasherGraph

extension GraphError {
    /// Whether the store cannot be read or written now for a reason outside the call (a full
    /// disk, an I/O error, another program's lock, a database server out of reach): the call is
    /// answered with its interface's `StoreUnavailable`, and the same call succeeds later
    /// (docs/PROTOCOL.md, "Errors and limits").
    var isStoreUnavailable: Bool { code == .storeIO || code == .storeBusy }
}
