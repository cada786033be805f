/// A Varlink error reply: a qualified error name and its parameters.
///
/// Method handlers throw it to answer a call with an error; the standard errors of
/// `org.varlink.service` have constructors.
///
/// ```swift
/// throw VarlinkError("com.example.Jobs.JobNotFound", ["job": .string(id)])
/// ```
public struct VarlinkError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The fully qualified error name, `interface.ErrorName`.
    public var name: String
    /// The error's parameters.
    public var parameters: [String: JSONValue]

    /// Creates an error reply.
    public init(_ name: String, _ parameters: [String: JSONValue] = [:]) {
        self.name = name
        self.parameters = parameters
    }

    /// No interface of that name on this service.
    public static func interfaceNotFound(_ interface: String) -> Self {
        .init("org.varlink.service.InterfaceNotFound", ["interface": .string(interface)])
    }
    /// No method of that name in the interface.
    public static func methodNotFound(_ method: String) -> Self {
        .init("org.varlink.service.MethodNotFound", ["method": .string(method)])
    }
    /// A parameter is missing or has the wrong type.
    public static func invalidParameter(_ parameter: String) -> Self {
        .init("org.varlink.service.InvalidParameter", ["parameter": .string(parameter)])
    }
    /// The caller may not call this method on this socket.
    public static var permissionDenied: Self { .init("org.varlink.service.PermissionDenied") }
    /// The method streams and must be called with `more`.
    public static var expectedMore: Self { .init("org.varlink.service.ExpectedMore") }

    public var description: String {
        parameters.isEmpty
            ? name
            : "\(name) \(parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))"
    }
}

/// Why a connection's byte stream could not be read as Varlink messages; the connection is
/// closed.
public enum VarlinkFramingError: Error, Sendable, Hashable {
    /// A message grew past the limit without a NUL terminator.
    case messageTooLarge(limit: Int)
    /// Incomplete messages over all connections would hold more than the server's budget of
    /// bytes (see ``IncomingMessageBudget``): the connection whose message grew is closed.
    case incomingBudgetExceeded(limit: Int)
}
