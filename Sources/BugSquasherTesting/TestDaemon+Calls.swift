public import BugSquasherProtocol
import BugSquasherTransport
public import BugSquasherVarlink

/// Which of squasherd's two sockets a call goes to.
public enum DaemonSocket: Sendable {
    /// The read-only socket: `io.bugsquasher.Store`, `Changes` and `Jobs`.
    case read
    /// The write socket: `io.bugsquasher.Import`.
    case write
}

extension TestDaemon {
    /// Calls `method` with typed parameters on a connection of its own and decodes the reply;
    /// an error reply is thrown as a `VarlinkError`.
    public func call<P: Encodable, R: Decodable>(
        _ method: String, _ parameters: P, as type: R.Type = R.self, on socket: DaemonSocket = .read
    ) throws -> R {
        try BlockingVarlinkClient(path: path(of: socket)).call(method, parameters, as: R.self)
    }

    /// Calls `method`, which must answer with an error reply; returns it. Throws when the call
    /// succeeded, so that a test of a refusal cannot pass on an accepted call.
    public func refusal<P: Encodable>(_ method: String, _ parameters: P, on socket: DaemonSocket = .read) throws
        -> VarlinkError
    {
        do {
            let reply = try call(method, parameters, as: JSONValue.self, on: socket)
            throw HarnessError("\(method) was expected to fail, and answered \(reply)")
        } catch let error as VarlinkError {
            return error
        }
    }

    /// `io.bugsquasher.Jobs.Status`.
    public func status() throws -> StatusReply {
        try call("io.bugsquasher.Jobs.Status", Empty())
    }

    /// The IDs of `entity`'s objects that match `predicate` (text syntax), through
    /// `io.bugsquasher.Store.Fetch`.
    public func ids(of entity: String, where predicate: String? = nil) throws -> [String] {
        let reply = try call(
            "io.bugsquasher.Store.Fetch", FetchParameters(entity: entity, predicate: predicate, result: "ids"),
            as: FetchReply.self)
        return reply.ids ?? []
    }

    /// The rows of `entity`'s objects that match `predicate`, through `io.bugsquasher.Store.Fetch`.
    public func rows(of entity: String, where predicate: String? = nil) throws -> [WireRow] {
        let reply = try call(
            "io.bugsquasher.Store.Fetch", FetchParameters(entity: entity, predicate: predicate, result: "rows"),
            as: FetchReply.self)
        return reply.rows ?? []
    }

    /// The socket path for `socket`.
    public func path(of socket: DaemonSocket) -> String {
        switch socket {
        case .read: readSocket
        case .write: writeSocket
        }
    }
}

extension VarlinkError {
    /// The error's `message` and `advice` parameters, joined as squasherctl prints them; empty
    /// for an error that has neither (such as `org.varlink.service.InvalidParameter`).
    public var explanation: String { statementAndAdvice ?? "" }
}
