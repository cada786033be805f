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
    /// The whole message, JSON.
    public var message: Data

    private struct Head: Decodable {
        var method: String
        var more: Bool?
        var oneway: Bool?
    }

    private struct Parameters<P: Decodable>: Decodable {
        var parameters: P?
    }

    private struct Empty: Codable {}

    /// Reads a call from one message.
    ///
    /// - Throws: ``VarlinkError`` `org.varlink.service.InvalidParameter` naming `method` when
    ///   the message is not a JSON object with a string `method`.
    public init(message: Data) throws {
        let head: Head
        do {
            head = try JSONDecoder().decode(Head.self, from: message)
        } catch {
            throw VarlinkError.invalidParameter("method")
        }
        method = head.method
        more = head.more ?? false
        oneway = head.oneway ?? false
        self.message = message
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
        do {
            if let parameters = try JSONDecoder().decode(Parameters<P>.self, from: message).parameters { return parameters }
            return try JSONDecoder().decode(P.self, from: Data("{}".utf8))
        } catch let error as DecodingError {
            throw VarlinkError.invalidParameter(Self.parameterName(error))
        }
    }

    static func parameterName(_ error: DecodingError) -> String {
        let path: [any CodingKey]
        switch error {
        case .keyNotFound(let key, let context): path = context.codingPath + [key]
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context): path = context.codingPath
        @unknown default: path = []
        }
        let names = path.map(\.stringValue).filter { $0 != "parameters" }
        return names.first ?? "parameters"
    }

    /// Encodes a call (for clients).
    public static func encode<P: Encodable>(method: String, parameters: P, more: Bool = false, oneway: Bool = false) throws -> Data {
        try JSONEncoder().encode(CallEnvelope(method: method, parameters: parameters, more: more ? true : nil, oneway: oneway ? true : nil))
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

    private struct Head: Decodable {
        var continues: Bool?
        var error: String?
    }

    private struct Parameters<P: Decodable>: Decodable {
        var parameters: P?
    }

    /// Reads a reply from one message. Only the envelope is decoded here (the parameters of a
    /// successful reply are decoded once, by ``parameters(_:)``).
    public init(message: Data) throws {
        let head = try JSONDecoder().decode(Head.self, from: message)
        self.message = message
        continues = head.continues ?? false
        if let name = head.error {
            let parameters = (try? JSONDecoder().decode(Parameters<[String: JSONValue]>.self, from: message).parameters) ?? nil
            error = VarlinkError(name, parameters ?? [:])
        } else {
            error = nil
        }
    }

    /// Decodes the parameters of a successful reply.
    public func parameters<P: Decodable>(_ type: P.Type = P.self) throws -> P {
        if let error { throw error }
        if let parameters = try JSONDecoder().decode(Parameters<P>.self, from: message).parameters { return parameters }
        return try JSONDecoder().decode(P.self, from: Data("{}".utf8))
    }

    /// Encodes a successful reply (for servers).
    public static func encode<P: Encodable>(_ parameters: P, continues: Bool) throws -> Data {
        try JSONEncoder().encode(ReplyEnvelope(parameters: parameters, continues: continues ? true : nil))
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
}

private struct ReplyEnvelope<P: Encodable>: Encodable {
    var parameters: P
    var continues: Bool?
}
