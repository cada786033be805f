public import Foundation
public import Logging
public import NIOCore
import Synchronization

/// Thrown by a ``VarlinkReplier`` when the connection is gone: the peer closed it or it broke.
/// Handlers let it pass; the service ends the call without an error reply or an error log.
public struct VarlinkPeerGone: Error, Sendable, CustomStringConvertible {
    /// What the transport reported.
    public var reason: String
    /// Creates the error.
    public init(reason: String) { self.reason = reason }
    public var description: String { "the client closed the connection (\(reason))" }
}

/// Sends replies to the call being handled. Writes wait while the peer is slow to read
/// (backpressure); they throw once the connection is gone.
public protocol VarlinkReplier: Sendable {
    /// Sends one encoded reply message (without its NUL terminator). `continues` is what the
    /// message says: whether more replies to the same `more` call follow it. After a reply that
    /// does not continue, the client may send its next call. The message is consumed: a
    /// replier that copies it into its own buffer frees it before waiting for its peer.
    func send(_ message: consuming Data, continues: Bool) async throws

    /// Sends one encoded reply message that continues (without its NUL terminator) at once,
    /// from any thread, without waiting: for a fan-out that must not wake a task per
    /// connection. Returns `false`, sending nothing, when the connection cannot take it now
    /// (its peer reads slowly, it is closing) or the replier has no such path; the caller then
    /// sends it with ``send(_:continues:)``, which waits. Messages sent either way arrive in
    /// the order they were sent. A replier that wraps another forwards it (no default, so that
    /// none forgets to).
    func sendNow(continuing message: Data) -> Bool
}

extension VarlinkReplier {
    /// Sends a successful reply; `continues` tells a `more` caller that others follow.
    public func reply<P: Encodable>(_ parameters: P, continues: Bool = false) async throws {
        try await send(try VarlinkReply.encode(parameters, continues: continues), continues: continues)
    }
}

/// What a handler knows about the connection a call arrived on.
public struct VarlinkCallContext: Sendable {
    /// The name of the socket (`read`, `write`, …): the access level the socket's file
    /// permissions grant.
    public var socket: String
    /// Whether calls on this socket may write.
    public var mayWrite: Bool
    /// A logger with the connection's metadata.
    public var logger: Logger
    /// The connection: register work to do when it closes.
    public var connection: VarlinkConnection

    /// Creates a context.
    public init(socket: String, mayWrite: Bool, logger: Logger, connection: VarlinkConnection = VarlinkConnection()) {
        self.socket = socket
        self.mayWrite = mayWrite
        self.logger = logger
        self.connection = connection
    }
}

/// Takes over a connection after a call with `upgrade: true` was answered: the transport hands
/// it every byte the client sends next, until it returns the last message.
public protocol VarlinkUpgradeHandler: Sendable {
    /// The next bytes the client sent, as they arrived. Returns the message to send last (the
    /// transport adds the NUL terminator and closes the connection) once the handler's protocol
    /// has ended, `nil` to read on. A thrown ``VarlinkError`` is sent as an error reply, and the
    /// connection closed. Should the client close the connection first, the handler is not
    /// called again, and what it registered with ``VarlinkConnection/onClose(_:)`` runs.
    func receive(_ bytes: ByteBuffer) async throws -> Data?
}

/// One client connection, as handlers see it: state that must not outlive the connection (an
/// upload that was never committed) registers its clean-up here.
public final class VarlinkConnection: Sendable {
    private let state = Mutex<(closed: Bool, actions: [@Sendable () async -> Void])>((false, []))
    private let upgradeHandler = Mutex<(any VarlinkUpgradeHandler)?>(nil)
    private let upgraded = Atomic<Bool>(false)
    private let ender = Mutex<(@Sendable (Data) -> Void)?>(nil)

    /// Creates a connection handle; the transport calls ``close()`` when the peer is gone.
    public init() {}

    /// Hands the connection to `handler` once the reply to the current call (which asked for an
    /// upgrade) has been sent. A call with `upgrade: true` whose handler does not call this ends
    /// the connection after its reply.
    public func upgrade(to handler: any VarlinkUpgradeHandler) {
        upgraded.store(true, ordering: .releasing)
        upgradeHandler.withLock { $0 = handler }
    }

    /// Installs how ``endUpgrade(lastReply:)`` sends a last message and closes the connection
    /// (for the transport).
    public func onEnd(_ end: @escaping @Sendable (_ lastMessage: Data) -> Void) {
        ender.withLock { $0 = end }
    }

    /// Ends a connection an upgrade handler took over, from outside it — an upload left idle, a
    /// daemon stopping — sending `lastReply` first: its client sends bytes and reads nothing
    /// but that last message, so without it the client would wait, or find the connection
    /// closed without a reason. A connection that was not upgraded is left as it is: its
    /// client is between calls, and its next call is answered.
    public func endUpgrade(lastReply: @autoclosure () throws -> Data) {
        guard upgraded.load(ordering: .acquiring), let message = try? lastReply() else { return }
        ender.withLock { $0 }?(message)
    }

    /// The handler an upgraded call installed, once (for the transport).
    public func takeUpgradeHandler() -> (any VarlinkUpgradeHandler)? {
        upgradeHandler.withLock { handler in
            defer { handler = nil }
            return handler
        }
    }

    /// Runs `action` when the connection closes (at once if it already has).
    public func onClose(_ action: @escaping @Sendable () async -> Void) async {
        let closed = state.withLock { state in
            if !state.closed { state.actions.append(action) }
            return state.closed
        }
        if closed { await action() }
    }

    /// Marks the connection closed and runs the registered clean-ups, in order.
    public func close() async {
        let actions = state.withLock { state in
            state.closed = true
            defer { state.actions = [] }
            return state.actions
        }
        for action in actions { await action() }
    }
}

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

/// The interface definitions shipped with the module (`Interfaces/*.varlink`).
public enum InterfaceDefinitions {
    /// The IDL text of an interface, or `nil` when none is shipped.
    public static func text(of interface: String) -> String? {
        guard let url = Bundle.module.url(forResource: interface, withExtension: "varlink", subdirectory: "Interfaces")
        else { return nil }
        return try? String(contentsOf: url, encoding: .utf8)
    }

    /// The names of the input parameters of each method an IDL text declares, by method name:
    /// `method Fetch(entity: string, sort: ?[]string) -> (…)` gives `Fetch: [entity, sort]`.
    public static func methodParameters(in idl: String) -> [String: Set<String>] {
        // Comments run from `#` to the end of the line (none is inside a declaration's names).
        let text = idl.split(separator: "\n", omittingEmptySubsequences: false)
            .map { line in line.firstIndex(of: "#").map { line[..<$0] } ?? line }
            .joined(separator: "\n")
        var methods: [String: Set<String>] = [:]
        var rest = Substring(text)
        while let keyword = rest.range(of: "method ") {
            rest = rest[keyword.upperBound...]
            guard let open = rest.firstIndex(of: "(") else { break }
            let name = rest[..<open].trimmingCharacters(in: .whitespacesAndNewlines)
            // The input struct: up to the parenthesis that closes this one; a parameter's name
            // is what comes before the colon in each field at its top level.
            var depth = 0
            var field = ""
            var names: Set<String> = []
            var index = open
            scan: while index < rest.endIndex {
                let character = rest[index]
                switch character {
                case "(":
                    depth += 1
                    if depth > 1 { field.append(character) }
                case ")":
                    depth -= 1
                    if depth == 0 { break scan }
                    field.append(character)
                case "," where depth == 1:
                    names.insert(Self.fieldName(field))
                    field = ""
                default:
                    field.append(character)
                }
                index = rest.index(after: index)
            }
            names.insert(Self.fieldName(field))
            names.remove("")
            methods[name] = names
            rest = index < rest.endIndex ? rest[rest.index(after: index)...] : ""
        }
        return methods
    }

    /// The name of one `name: type` field of a struct.
    private static func fieldName(_ field: String) -> String {
        String(field.prefix { $0 != ":" }).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
