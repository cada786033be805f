import BugSquasherJSON
public import Foundation

/// One Varlink method call as received: the method name, the flags, and the raw message from
/// which a handler decodes its typed parameters.
public struct VarlinkCall: Sendable {
    /// The fully qualified method name, `interface.Method`.
    public var method: String
    /// The caller accepts several replies (`continues: true` until the last).
    public var more: Bool
    /// The caller wants no reply.
    public var oneway: Bool
    /// The caller asks to leave the Varlink protocol after the reply: the bytes it sends next
    /// belong to the method's own protocol (see ``VarlinkUpgradeHandler``).
    public var upgrade: Bool
    /// The whole message, JSON.
    public var message: Data
    /// The names of the parameters given, in the order sent (none when `parameters` is absent
    /// or not an object): what ``VarlinkService`` checks against the method's declaration.
    public var parameterNames: [String] = []

    private struct Parameters<P: Decodable>: Decodable {
        var parameters: P?
    }

    private struct Empty: Codable {}

    /// Reads a call from one message, after checking all of it with ``JSONReader/validate()``.
    /// Why it is built this way: docs/DESIGN-NOTES.md, "A call is checked whole before it is read".
    ///
    /// - Throws: ``VarlinkError`` `org.varlink.service.InvalidParameter` naming the parameter
    ///   whose value is not valid JSON (a lone surrogate, invalid UTF-8, a key twice, `1e400`),
    ///   or `method` when the message is not a JSON object with a string `method`.
    public init(message: Data) throws {
        var method: String?
        var more = false
        var oneway = false
        var upgrade = false
        var parameterNames: [String] = []
        do {
            try JSONReader.read(message) { reader in
                try reader.uniqueKeysObject { reader, key in
                    switch key {
                    case "method": method = try reader.field("method") { try $0.string() }
                    case "more": more = try Self.flag(&reader, key)
                    case "oneway": oneway = try Self.flag(&reader, key)
                    case "upgrade": upgrade = try Self.flag(&reader, key)
                    case "parameters": parameterNames = try Self.validateParameters(&reader)
                    default: try reader.validate()
                    }
                }
            }
        } catch let failure as JSONReader.Failure {
            throw VarlinkError.invalidParameter(failure.field ?? "method")
        }
        guard let method else { throw VarlinkError.invalidParameter("method") }
        self.method = method
        self.more = more
        self.oneway = oneway
        self.upgrade = upgrade
        self.message = message
        self.parameterNames = parameterNames
    }

    /// Reads one of the call's flags (`more`, `oneway`, `upgrade`): a boolean or null; a value of
    /// another type is refused naming the flag.
    private static func flag(_ reader: inout JSONReader, _ name: String) throws -> Bool {
        reader.null() ? false : try reader.field(name) { try $0.bool() }
    }

    /// Checks the `parameters` value and returns its keys: a failure names the parameter it is
    /// in (`values` for a key given twice inside `values`), or `parameters` when it is not an
    /// object.
    private static func validateParameters(_ reader: inout JSONReader) throws -> [String] {
        guard try reader.peek() == .object else {
            try validate(&reader, naming: "parameters")
            return []
        }
        var names: [String] = []
        try reader.uniqueKeysObject { reader, key in
            names.append(key)
            try validate(&reader, naming: key)
        }
        return names
    }

    /// Checks one value; a failure inside it names `parameter`, whatever field inside it named.
    private static func validate(_ reader: inout JSONReader, naming parameter: String) throws {
        do {
            try reader.validate()
        } catch var failure as JSONReader.Failure {
            failure.field = parameter
            throw failure
        }
    }

    /// The interface part of the method name.
    public var interface: String {
        guard let dot = method.lastIndex(of: ".") else { return "" }
        return String(method[..<dot])
    }

    /// The method part of the method name.
    public var methodName: String {
        guard let dot = method.lastIndex(of: ".") else { return method }
        return String(method[method.index(after: dot)...])
    }

    /// Decodes the parameters; a missing `parameters` object decodes as `{}`.
    ///
    /// - Throws: ``VarlinkError`` `org.varlink.service.InvalidParameter` naming the parameter
    ///   that is missing or has the wrong type.
    public func parameters<P: Decodable>(_ type: P.Type = P.self) throws -> P {
        if let readable = P.self as? any JSONReadable.Type {
            do {
                return try readParameters(readable, from: message) as! P
            } catch let failure as JSONReader.Failure {
                throw VarlinkError.invalidParameter(failure.field ?? "parameters")
            }
        }
        do {
            if let parameters = try JSONDecoder().decode(Parameters<P>.self, from: message).parameters {
                return parameters
            }
            return try JSONDecoder().decode(P.self, from: Data("{}".utf8))
        } catch let error as DecodingError {
            throw VarlinkError.invalidParameter(Self.parameterName(error, in: message))
        }
    }

    /// ``parameterName(_:)``, or, for a number that fits no integer (`1.5`, `1e30`, 20 digits),
    /// whose error names no parameter, the first parameter of the message that holds one.
    static func parameterName(_ error: DecodingError, in message: Data) -> String {
        let name = parameterName(error)
        guard name == "parameters", case .dataCorrupted = error,
            let envelope = try? JSONReader.read(message, { try JSONValue(reading: &$0) }),
            case .object(let fields) = envelope, case .object(let parameters)? = fields["parameters"]
        else { return name }
        return parameters.sorted { $0.key < $1.key }.first { if case .double = $0.value { true } else { false } }?.key
            ?? name
    }

    /// The parameter a decoding error is about: the first key of its path below `parameters`.
    public static func parameterName(_ error: DecodingError) -> String {
        let path: [any CodingKey]
        switch error {
        case .keyNotFound(let key, let context): path = context.codingPath + [key]
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            path = context.codingPath
        @unknown default: path = []
        }
        let names = path.map(\.stringValue).filter { $0 != "parameters" }
        return names.first ?? "parameters"
    }

    /// Encodes a call (for clients).
    public static func encode<P: Encodable>(
        method: String, parameters: P, more: Bool = false, oneway: Bool = false, upgrade: Bool = false
    ) throws -> Data {
        if let writable = parameters as? any JSONWritable {
            var writer = JSONWriter()
            writer.object { writer in
                writer.key("method")
                writer.string(method)
                writer.key("parameters")
                writable.write(to: &writer)
                if more {
                    writer.key("more")
                    writer.bool(true)
                }
                if oneway {
                    writer.key("oneway")
                    writer.bool(true)
                }
                if upgrade {
                    writer.key("upgrade")
                    writer.bool(true)
                }
            }
            return Data(writer.bytes)
        }
        return try JSONEncoder().encode(
            CallEnvelope(
                method: method, parameters: parameters, more: more ? true : nil, oneway: oneway ? true : nil,
                upgrade: upgrade ? true : nil))
    }
}

/// One reply as a client receives it.
public struct VarlinkReply: Sendable {
    /// The raw message.
    public var message: Data
    /// Whether more replies follow.
    public var continues: Bool
    /// The error, for an error reply.
    public var error: VarlinkError?

    private struct Parameters<P: Decodable>: Decodable {
        var parameters: P?
    }

    /// Reads a reply from one message. Only the envelope is decoded here (the parameters of a
    /// successful reply are decoded once, by ``parameters(_:)``).
    public init(message: Data) throws {
        var continues = false
        var name: String?
        try JSONReader.read(message) { reader in
            try reader.object { reader, key in
                switch key {
                case "continues": continues = reader.null() ? false : try reader.bool()
                case "error": name = try reader.optionalString()
                default: try reader.skip()
                }
            }
        }
        self.message = message
        self.continues = continues
        // An error's parameters are read here (errors are rare); a successful reply's once, by
        // ``parameters(_:)``, into their type.
        error = try name.map { VarlinkError($0, try readParameters([String: JSONValue].self, from: message)) }
    }

    /// Decodes the parameters of a successful reply.
    public func parameters<P: Decodable>(_ type: P.Type = P.self) throws -> P {
        if let error { throw error }
        if let readable = P.self as? any JSONReadable.Type {
            return try readParameters(readable, from: message) as! P
        }
        if let parameters = try JSONDecoder().decode(Parameters<P>.self, from: message).parameters { return parameters }
        return try JSONDecoder().decode(P.self, from: Data("{}".utf8))
    }

    /// Reads a reply and its parameters as `P` in one walk over the message, for a stream of
    /// replies read one after another (a change feed): ``init(message:)`` followed by
    /// ``parameters(_:)`` walks it twice. An error reply is thrown as its ``VarlinkError``.
    package static func decode<P: JSONReadable>(_ type: P.Type, from message: Data) throws -> (
        parameters: P, continues: Bool
    ) {
        var continues = false
        var parameters: P?
        var isError = false
        do {
            try JSONReader.read(message) { reader in
                try reader.object { reader, key in
                    switch key {
                    case "continues": continues = reader.null() ? false : try reader.bool()
                    case "error": isError = try reader.optionalString() != nil
                    case "parameters" where !isError && !reader.null():
                        parameters = try reader.field("parameters") { try P(reading: &$0) }
                    default: try reader.skip()
                    }
                }
            }
        } catch {
            // An error reply whose parameters came first, and are not P's; or a reply that is
            // not one.
            if let error = try VarlinkReply(message: message).error { throw error }
            throw error
        }
        if isError, let error = try VarlinkReply(message: message).error { throw error }
        return (try parameters ?? JSONReader.read(Data("{}".utf8)) { try P(reading: &$0) }, continues)
    }

    /// Encodes a successful reply (for servers).
    public static func encode<P: Encodable>(_ parameters: P, continues: Bool) throws -> Data {
        if let writable = parameters as? any JSONWritable {
            var writer = JSONWriter()
            writer.object { writer in
                writer.key("parameters")
                writable.write(to: &writer)
                if continues {
                    writer.key("continues")
                    writer.bool(true)
                }
            }
            return Data(writer.bytes)
        }
        return try JSONEncoder().encode(ReplyEnvelope(parameters: parameters, continues: continues ? true : nil))
    }

    /// Encodes an error reply (for servers).
    public static func encode(_ error: VarlinkError) throws -> Data {
        struct Envelope: Encodable {
            var error: String
            var parameters: [String: JSONValue]
        }
        return try JSONEncoder().encode(Envelope(error: error.name, parameters: error.parameters))
    }
}

private struct CallEnvelope<P: Encodable>: Encodable {
    var method: String
    var parameters: P
    var more: Bool?
    var oneway: Bool?
    var upgrade: Bool?
}

private struct ReplyEnvelope<P: Encodable>: Encodable {
    var parameters: P
    var continues: Bool?
}

/// Reads the `parameters` of a call or reply message with a ``JSONReadable`` type; a missing or
/// `null` `parameters` reads as `{}`. A failure inside names the field at fault, or `parameters`.
private func readParameters<R: JSONReadable>(_ type: R.Type, from message: Data) throws -> R {
    let found = try JSONReader.read(message) { reader -> R? in
        var parameters: R?
        try reader.object { reader, key in
            if key == "parameters", !reader.null() {
                parameters = try reader.field("parameters") { try R(reading: &$0) }
            } else {
                try reader.skip()
            }
        }
        return parameters
    }
    if let found { return found }
    return try JSONReader.read(Data("{}".utf8)) { try R(reading: &$0) }
}
