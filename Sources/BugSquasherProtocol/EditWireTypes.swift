public import BugSquasherVarlink

// The parameters and replies of `io.bugsquasher.Import.Update` and `Delete`.

/// The parameters of `io.bugsquasher.Import.Update`.
public struct UpdateParameters: Codable, Sendable {
    /// The object ID URI.
    public var id: String
    /// New values by attribute (or to-one relationship) name.
    public var values: [String: JSONValue]
    /// The version the object must be at for the update to apply (the one the client read);
    /// `nil` updates whatever it holds. Another version is refused with `Conflict`.
    public var ifVersion: Int64?
    /// Creates parameters.
    public init(id: String, values: [String: JSONValue], ifVersion: Int64? = nil) {
        self.id = id
        self.values = values
        self.ifVersion = ifVersion
    }
}

/// The reply of `io.bugsquasher.Import.Update`.
public struct UpdateReply: Codable, Sendable {
    /// The object's version that holds the values: the save's, or the one that already held
    /// them when nothing changed.
    public var version: Int64
    /// The save's history token (the newest when nothing changed).
    public var token: Int64
    /// Creates a reply.
    public init(version: Int64, token: Int64) {
        self.version = version
        self.token = token
    }
}

/// The parameters of `io.bugsquasher.Import.Delete`.
public struct DeleteParameters: Codable, Sendable {
    /// The object ID URI.
    public var id: String
    /// Creates parameters.
    public init(id: String) { self.id = id }
}

/// The reply of `io.bugsquasher.Import.Delete`.
public struct DeleteReply: Codable, Sendable {
    /// The save's history token (0 when nothing was saved).
    public var token: Int64
    /// Creates a reply.
    public init(token: Int64) { self.token = token }
}
