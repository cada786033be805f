public import Foundation
public import Logging
import NIOCore
import Synchronization

/// One Varlink interface implemented by the service.
public protocol VarlinkInterface: Sendable {
    /// The interface's name, `com.example.Changes`.
    var name: String { get }
    /// Whether the interface writes (served only on sockets that may write).
    var writes: Bool { get }
    /// Handles one call of this interface: replies through `replier`, or throws a
    /// ``VarlinkError``. Streaming methods reply with `continues: true` until they end or the
    /// task is cancelled (the peer went away).
    func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws
    /// Whether `method` (its name without the interface) takes the connection over when called
    /// with `upgrade: true`; a call of any other method with it is refused. None by default.
    func upgrades(_ method: String) -> Bool
    /// Whether `method` (its name without the interface) may send several replies to a call with
    /// `more: true`. Another method called so answers once, in order with the calls behind it.
    /// None by default.
    func streams(_ method: String) -> Bool
}

extension VarlinkInterface {
    /// No method upgrades the connection.
    public func upgrades(_ method: String) -> Bool { false }
    /// No method streams.
    public func streams(_ method: String) -> Bool { false }
}

/// The service: the interfaces it implements, `org.varlink.service`, and dispatch.
///
/// ```swift
/// let service = VarlinkService(
///     vendor: "Example", product: "exampled", version: "0.1", url: "https://…", interfaces: [changes, store],
///     internalError: { VarlinkError("com.example.InternalError", ["message": .string("\($0)")]) })
/// try await service.handle(call, context: context, replier: replier)
/// ```
public struct VarlinkService: Sendable {
    /// The vendor `GetInfo` reports.
    public var vendor: String
    /// The product `GetInfo` reports.
    public var product: String
    /// The version `GetInfo` reports.
    public var version: String
    /// The URL `GetInfo` reports.
    public var url: String
    /// The error reply to a call whose handler threw something other than a ``VarlinkError``,
    /// given what it threw: Varlink has no standard error for it, so the owner names one.
    public var internalError: @Sendable (any Error) -> VarlinkError
    private let interfaces: [String: any VarlinkInterface]
    /// The parameters each method declares in its interface's IDL, by `interface.Method`.
    private let declaredParameters: [String: Set<String>]

    /// Creates a service over interfaces; `internalError` is the error reply to a call whose
    /// handler failed with anything but a ``VarlinkError`` (see ``internalError``).
    public init(
        vendor: String, product: String, version: String, url: String, interfaces: [any VarlinkInterface],
        internalError: @escaping @Sendable (any Error) -> VarlinkError
    ) {
        self.vendor = vendor
        self.product = product
        self.version = version
        self.url = url
        self.internalError = internalError
        self.interfaces = Dictionary(interfaces.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        var declared: [String: Set<String>] = [:]
        for name in ["org.varlink.service"] + interfaces.map(\.name) {
            guard let idl = InterfaceDefinitions.text(of: name) else { continue }
            for (method, parameters) in InterfaceDefinitions.methodParameters(in: idl) {
                declared[name + "." + method] = parameters
            }
        }
        self.declaredParameters = declared
    }

    /// The interface names, `org.varlink.service` first.
    public var interfaceNames: [String] { ["org.varlink.service"] + interfaces.keys.sorted() }

    /// Whether `call` asks for several replies from a method that may send them: the transport
    /// serves it beside the connection's reading, which then notices its client leave. Any
    /// other call is answered once, in turn.
    public func streams(_ call: VarlinkCall) -> Bool {
        call.more && !call.upgrade && interfaces[call.interface]?.streams(call.methodName) == true
    }

    /// Handles one call: `org.varlink.service` itself, or the interface's handler. Errors a
    /// handler throws are sent as error replies; only connection failures propagate.
    public func handle(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier) async throws {
        let replier = OnewayFilter(base: replier, oneway: call.oneway)
        do {
            if call.interface == "org.varlink.service" {
                try checkDeclared(call)
                try await handleService(call, context: context, replier: replier)
                return
            }
            guard let interface = interfaces[call.interface], !interface.writes || context.mayWrite else {
                if interfaces[call.interface] != nil {
                    context.logger.notice(
                        "refused a write call on a read-only socket", metadata: ["varlink.method": "\(call.method)"])
                    throw VarlinkError.permissionDenied
                }
                throw VarlinkError.interfaceNotFound(call.interface)
            }
            // A call that asked for an upgrade its method does not make would hold the connection
            // past its reply, unread: a streaming call made so would never notice its client
            // leave, and would keep its subscription for good.
            guard !call.upgrade || interface.upgrades(call.methodName) else {
                throw VarlinkError.invalidParameter("upgrade")
            }
            try checkDeclared(call)
            try await interface.handle(call, context: context, replier: replier)
        } catch is CancellationError {
            throw CancellationError()
        } catch let error as VarlinkPeerGone {
            // The client hung up (a subscriber or watcher that went away): nothing to answer.
            context.logger.debug("client went away during a call", metadata: ["varlink.method": "\(call.method)"])
            throw error
        } catch {
            // A handler's failure answers this call; the connection stays usable.
            try await replier.send(
                try errorReply(error, method: call.method, logger: context.logger), continues: false)
        }
    }

    /// Refuses a call with a parameter its method does not declare, naming it: a misspelt
    /// `sortBy` for `sort` would otherwise be ignored without a word, and the call answered as if
    /// it were not there. (A method without a declaration is the interface's to refuse.)
    private func checkDeclared(_ call: VarlinkCall) throws {
        guard let declared = declaredParameters[call.method],
            let unknown = call.parameterNames.first(where: { !declared.contains($0) })
        else { return }
        throw VarlinkError.invalidParameter(unknown)
    }

    /// The error reply for what a handler threw: a ``VarlinkError`` as it is, anything else as
    /// the service's ``internalError`` (and logged, since it is a bug or a failure of the machine
    /// rather than of the call).
    public func errorReply(_ error: any Error, method: String, logger: Logger) throws -> Data {
        if let error = error as? VarlinkError { return try VarlinkReply.encode(error) }
        logger.error("call failed", metadata: ["varlink.method": "\(method)", "error": "\(error)"])
        return try VarlinkReply.encode(internalError(error))
    }

    private struct InterfaceParameter: Decodable { var interface: String }
    private struct Info: Encodable {
        var vendor, product, version, url: String
        var interfaces: [String]
    }
    private struct Description: Encodable { var description: String }

    /// Whether the socket of `context` serves `interface`: a write interface is no use to a
    /// client of a read-only socket, whose calls to it are refused.
    private func serves(_ interface: String, _ context: VarlinkCallContext) -> Bool {
        interfaces[interface].map { !$0.writes || context.mayWrite } ?? (interface == "org.varlink.service")
    }

    private func handleService(_ call: VarlinkCall, context: VarlinkCallContext, replier: some VarlinkReplier)
        async throws
    {
        switch call.methodName {
        case "GetInfo":
            try await replier.reply(
                Info(
                    vendor: vendor, product: product, version: version, url: url,
                    interfaces: interfaceNames.filter { serves($0, context) }))
        case "GetInterfaceDescription":
            let name = try call.parameters(InterfaceParameter.self).interface
            guard let description = InterfaceDefinitions.text(of: name), serves(name, context) else {
                throw VarlinkError.interfaceNotFound(name)
            }
            try await replier.reply(Description(description: description))
        default:
            throw VarlinkError.methodNotFound(call.method)
        }
    }
}

/// Drops every reply to a `oneway` call.
private struct OnewayFilter<Base: VarlinkReplier>: VarlinkReplier {
    let base: Base
    let oneway: Bool
    func send(_ message: consuming Data, continues: Bool) async throws {
        if !oneway { try await base.send(message, continues: continues) }
    }

    func sendNow(continuing message: Data) -> Bool { oneway || base.sendNow(continuing: message) }
}
