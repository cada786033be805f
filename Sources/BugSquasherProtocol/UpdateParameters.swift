public import BugSquasherVarlink

// The parameters and reply of `io.bugsquasher.Import.Update`.

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
