import Foundation

/// A text syntax for predicates, for command lines and the wire:
///
/// ```
/// status == "Open" AND (priority IN ("High", "Critical") OR title CONTAINS[c] "crash")
/// ```
///
/// Also `!=`, `<`, `<=`, `>`, `>=`, `CONTAINS`, `BEGINSWITH`, `&&`, `||`, `NOT`/`!` and `TRUEPREDICATE`;
/// values are strings with JSON's escapes (an unknown one is an error), numbers, `true`, `false`, `nil`.
/// ``coerced(for:in:)`` reads strings compared with dates or to-one relationships as dates or object IDs.
extension ObjectPredicate {
    /// Parses the text syntax.
    ///
    /// - Throws: ``GraphError/Code/invalidArgument`` saying where the text stops making sense.
    public init(parsing text: String) throws {
        var parser = PredicateParser(text)
        self = try parser.parse()
    }

    /// The predicate in the text syntax (parsing it gives back an equal predicate).
    public var text: String {
        switch self {
        case .all: return "TRUEPREDICATE"
        case .compare(let keyPath, let op, let value):
            return "\(keyPath) \(op.symbol) \(Self.literal(value))"
        case .isIn(let keyPath, let values):
            return "\(keyPath) IN (\(values.map(Self.literal).joined(separator: ", ")))"
        case .relationship(let keyPath, let id):
            return "\(keyPath) == \(id.map { Self.quote($0.uriString) } ?? "nil")"
        case .and(let items):
            return items.isEmpty ? "TRUEPREDICATE" : "(" + items.map(\.text).joined(separator: " AND ") + ")"
        case .or(let items):
            return items.isEmpty ? "NOT TRUEPREDICATE" : "(" + items.map(\.text).joined(separator: " OR ") + ")"
        case .not(let item): return "NOT \(item.text)"
        }
    }

    /// A string literal with the escapes the parser reads back (JSON's).
    private static func quote(_ text: String) -> String {
        var quoted = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"", "\\": quoted += "\\" + String(scalar)
            case "\n": quoted += "\\n"
            case "\r": quoted += "\\r"
            case "\t": quoted += "\\t"
            case "\u{08}": quoted += "\\b"
            case "\u{0C}": quoted += "\\f"
            case _ where scalar.value < 0x20: quoted += String(format: "\\u%04x", scalar.value)
            default: quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted + "\""
    }

    private static func literal(_ value: Value) -> String {
        switch value {
        case .null: "nil"
        case .string(let s): quote(s)
        case .int64(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): b ? "true" : "false"
        case .date(let d): quote(ISO8601Date.format(d))
        case .data(let d): quote(d.base64EncodedString())
        }
    }

    /// The predicate with its constants converted to the types of the attributes they are
    /// compared with (ISO 8601 strings to dates, URIs to object IDs, integers to doubles), and
    /// every key path checked against `entity`.
    ///
    /// - Throws: ``GraphError/Code/invalidArgument`` for an unknown key path or a constant that
    ///   cannot have the attribute's type.
    public func coerced(for entity: EntityDescription, in model: ManagedObjectModel) throws -> ObjectPredicate {
        switch self {
        case .all: return self
        case .and(let items): return .and(try items.map { try $0.coerced(for: entity, in: model) })
        case .or(let items): return .or(try items.map { try $0.coerced(for: entity, in: model) })
        case .not(let item): return .not(try item.coerced(for: entity, in: model))
        case .relationship:
            try validate(for: entity, in: model)
            return self
        case .isIn(let keyPath, let values):
            let target = try Self.target(of: keyPath, from: entity, in: model)
            guard case .attribute(let type) = target else {
                throw GraphError(.invalidArgument, "IN works on attributes; '\(keyPath)' is a relationship.")
            }
            return .isIn(keyPath: keyPath, try values.map { try Self.coerce($0, to: type, keyPath: keyPath) })
        case .compare(let keyPath, let op, let value):
            switch try Self.target(of: keyPath, from: entity, in: model) {
            case .attribute(let type):
                if [.contains, .containsCaseInsensitive, .beginsWith].contains(op) {
                    // Text in text: every store and live query reads a number or a nil here
                    // its own way, so none is asked to.
                    guard type == .string, case .string = value else {
                        throw GraphError(
                            .invalidArgument,
                            "\(op.symbol) looks for text in text; '\(keyPath)' is \(type), and \(Self.literal(value)) is what it looks for.",
                            advice: "Give a quoted string, on a string attribute (\(op.symbol) \"5\").")
                    }
                    return self
                }
                return .compare(keyPath: keyPath, op, try Self.coerce(value, to: type, keyPath: keyPath))
            case .relationship:
                guard op == .equal || op == .notEqual else {
                    throw GraphError(
                        .invalidArgument,
                        "'\(keyPath)' is a relationship.",
                        advice: "Compare it with == or != to an object ID URI or nil.")
                }
                let id: ObjectID?
                switch value {
                case .null: id = nil
                case .string(let uri):
                    guard let parsed = ObjectID(uri: uri) else {
                        throw GraphError(
                            .invalidArgument, "'\(uri)' is not an object ID URI (x-bugsquasher://STORE/Entity/p42).")
                    }
                    id = parsed
                default:
                    throw GraphError(
                        .invalidArgument, "'\(keyPath)' is a relationship.",
                        advice: "Compare it with an object ID URI or nil.")
                }
                let predicate = ObjectPredicate.relationship(keyPath: keyPath, id)
                return op == .equal ? predicate : .not(predicate)
            }
        }
    }

    private enum Target {
        case attribute(AttributeType)
        case relationship
    }

    private static func target(of keyPath: String, from entity: EntityDescription, in model: ManagedObjectModel) throws
        -> Target
    {
        var current = entity
        let parts = keyPath.split(separator: ".").map(String.init)
        for (index, part) in parts.enumerated() {
            if index == parts.count - 1 {
                if let attribute = current.attribute(named: part) { return .attribute(attribute.type) }
                if current.toOneIndex[part] != nil { return .relationship }
                break
            }
            guard let relationship = current.relationship(named: part), !relationship.isToMany,
                let next = model.entity(named: relationship.destination)
            else { break }
            current = next
        }
        throw GraphError(
            .invalidArgument,
            "'\(keyPath)' is not a key path of \(entity.name).",
            advice:
                "Use one of its attributes (\(entity.attributes.map(\.name).joined(separator: ", "))) or a to-one chain like 'project.key'."
        )
    }

    private static func coerce(_ value: Value, to type: AttributeType, keyPath: String) throws -> Value {
        switch (value, type) {
        case (.null, _): return .null
        case (.string(let s), .date):
            guard let date = ISO8601Date.parse(s) else {
                throw GraphError(
                    .invalidArgument,
                    "'\(keyPath)' is a date: "
                        + ISO8601Date.refusal(
                            of: s,
                            otherwise:
                                "\"\(s)\" is not a date and time that exists, written as ISO 8601 like \"2012-01-31T00:00:00Z\""
                        ) + ".")
            }
            return .date(date)
        case (.int64(let i), .double): return .double(Double(i))
        case (.int64(let i), .date): return .date(Date(timeIntervalSince1970: Double(i)))
        case (.double(let d), .date): return .date(Date(timeIntervalSince1970: d))
        case (.int64(let i), .bool) where i == 0 || i == 1: return .bool(i == 1)
        default:
            guard value.type == type else {
                throw GraphError(
                    .invalidArgument, "'\(keyPath)' is \(type), but the predicate compares it with \(value).")
            }
            return value
        }
    }
}

/// A recursive-descent parser for the predicate text syntax.
private struct PredicateParser {
    private let scalars: [Character]
    private var position = 0
    /// Parentheses and NOTs currently open: bounded, so that hostile text cannot exhaust the
    /// stack of the recursive descent.
    private var depth = 0
    static let maximumDepth = 64
    /// Comparisons so far: SQLite evaluates a chain of ORs as a tree as deep as the chain, and
    /// refuses one deeper than 1,000.
    private var comparisons = 0
    static let maximumComparisons = 500

    init(_ text: String) { scalars = Array(text) }

    mutating func parse() throws -> ObjectPredicate {
        let predicate = try parseOr()
        skipSpace()
        guard position == scalars.count else { throw error("unexpected '\(String(scalars[position...].prefix(12)))'") }
        return predicate
    }

    private mutating func parseOr() throws -> ObjectPredicate {
        var items = [try parseAnd()]
        while accept(word: "OR") || accept("||") { items.append(try parseAnd()) }
        return items.count == 1 ? items[0] : .or(items)
    }

    private mutating func parseAnd() throws -> ObjectPredicate {
        var items = [try parseNot()]
        while accept(word: "AND") || accept("&&") { items.append(try parseNot()) }
        return items.count == 1 ? items[0] : .and(items)
    }

    private mutating func parseNot() throws -> ObjectPredicate {
        if accept(word: "NOT") || accept("!") {
            try enter()
            defer { depth -= 1 }
            return .not(try parseNot())
        }
        return try parsePrimary()
    }

    private mutating func parsePrimary() throws -> ObjectPredicate {
        if accept("(") {
            try enter()
            defer { depth -= 1 }
            let inner = try parseOr()
            guard accept(")") else { throw error("missing ')'") }
            return inner
        }
        if accept(word: "TRUEPREDICATE") { return .all }
        comparisons += 1
        guard comparisons <= Self.maximumComparisons else {
            throw error(
                "more than \(Self.maximumComparisons) comparisons; compare with a list instead, like key IN (\"A-1\", \"A-2\")"
            )
        }
        let keyPath = try parseKeyPath()
        if accept(word: "IN") {
            guard accept("(") else { throw error("IN needs a parenthesized list, like IN (\"a\", \"b\")") }
            var values: [Value] = []
            if !accept(")") {
                repeat { values.append(try parseValue()) } while accept(",")
                guard accept(")") else { throw error("missing ')' after the IN list") }
            }
            return .isIn(keyPath: keyPath, values)
        }
        let op: ComparisonOperator
        if accept(word: "CONTAINS") {
            op = accept("[c]") ? .containsCaseInsensitive : .contains
        } else if accept(word: "BEGINSWITH") {
            op = .beginsWith
        } else if accept("==") || accept("=") {
            op = .equal
        } else if accept("!=") {
            op = .notEqual
        } else if accept("<=") {
            op = .lessOrEqual
        } else if accept(">=") {
            op = .greaterOrEqual
        } else if accept("<") {
            op = .less
        } else if accept(">") {
            op = .greater
        } else {
            throw error("expected an operator (==, !=, <, <=, >, >=, IN, CONTAINS, BEGINSWITH) after '\(keyPath)'")
        }
        return .compare(keyPath: keyPath, op, try parseValue())
    }

    private mutating func enter() throws {
        depth += 1
        guard depth <= Self.maximumDepth else {
            throw error("nested deeper than \(Self.maximumDepth) levels of parentheses and NOT")
        }
    }

    private mutating func parseKeyPath() throws -> String {
        skipSpace()
        let start = position
        while position < scalars.count,
            scalars[position].isLetter || scalars[position].isNumber || scalars[position] == "_"
                || scalars[position] == "."
        {
            position += 1
        }
        guard position > start else { throw error("expected a key path such as status or project.key") }
        return String(scalars[start..<position])
    }

    private mutating func parseValue() throws -> Value {
        skipSpace()
        guard position < scalars.count else { throw error("expected a value") }
        if scalars[position] == "\"" {
            position += 1
            var text = ""
            while position < scalars.count, scalars[position] != "\"" {
                if scalars[position] == "\\" {
                    text.append(try parseEscape())
                } else {
                    text.append(scalars[position])
                    position += 1
                }
            }
            guard position < scalars.count else { throw error("unterminated string") }
            position += 1
            return .string(text)
        }
        if accept(word: "nil") || accept(word: "NULL") { return .null }
        if accept(word: "true") || accept(word: "TRUE") { return .bool(true) }
        if accept(word: "false") || accept(word: "FALSE") { return .bool(false) }
        let start = position
        while position < scalars.count, scalars[position].isNumber || "+-.eE".contains(scalars[position]) {
            position += 1
        }
        let number = String(scalars[start..<position])
        if let int = Int64(number) { return .int64(int) }
        if let double = Double(number) { return .double(double) }
        position = start
        throw error("expected a value: a \"string\", a number, true, false or nil")
    }

    /// The character a backslash escape stands for; JSON's escapes: `\"`, `\\`, `\/`, `\b`,
    /// `\f`, `\n`, `\r`, `\t` and `\uXXXX` (a UTF-16 unit; a character outside the BMP is
    /// a surrogate pair).
    private mutating func parseEscape() throws -> Character {
        position += 1
        guard position < scalars.count else { throw error("unterminated string") }
        let escaped = scalars[position]
        position += 1
        switch escaped {
        case "\"", "\\", "/": return escaped
        case "b": return "\u{8}"
        case "f": return "\u{C}"
        case "n": return "\n"
        case "r": return "\r"
        case "t": return "\t"
        case "u":
            let unit = try parseUTF16Unit()
            if UTF16.isLeadSurrogate(unit) {
                let start = position
                if position + 1 < scalars.count, scalars[position] == "\\", scalars[position + 1] == "u" {
                    position += 2
                    let trail = try parseUTF16Unit()
                    if UTF16.isTrailSurrogate(trail) {
                        return Character(
                            Unicode.Scalar(0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(trail) - 0xDC00))!)
                    }
                }
                position = start
            }
            guard let scalar = Unicode.Scalar(unit) else {
                position -= 6
                throw error(
                    "\\u\(String(unit, radix: 16, uppercase: true)) is a lone surrogate, which is no character; write a character outside the BMP as a pair such as \\uD83D\\uDC1B, or as itself"
                )
            }
            return Character(scalar)
        default:
            position -= 2
            throw error(
                "unknown escape \\\(escaped) in a string; strings take JSON's escapes: \\\", \\\\, \\/, \\b, \\f, \\n, \\r, \\t and \\uXXXX"
            )
        }
    }

    /// The four hex digits after `\u`.
    private mutating func parseUTF16Unit() throws -> UInt16 {
        guard position + 4 <= scalars.count,
            scalars[position..<position + 4].allSatisfy({ $0.isASCII && $0.isHexDigit }),
            let unit = UInt16(String(scalars[position..<position + 4]), radix: 16)
        else { throw error("\\u takes four hex digits, such as \\u00E9") }
        position += 4
        return unit
    }

    private mutating func skipSpace() {
        while position < scalars.count, scalars[position].isWhitespace { position += 1 }
    }

    private mutating func accept(_ token: String) -> Bool {
        skipSpace()
        let characters = Array(token)
        guard position + characters.count <= scalars.count,
            Array(scalars[position..<(position + characters.count)]) == characters
        else { return false }
        position += characters.count
        return true
    }

    private mutating func accept(word: String) -> Bool {
        skipSpace()
        let characters = Array(word)
        let end = position + characters.count
        guard end <= scalars.count,
            String(scalars[position..<end]).uppercased() == word.uppercased(),
            end == scalars.count || !(scalars[end].isLetter || scalars[end].isNumber || scalars[end] == "_")
        else { return false }
        position = end
        return true
    }

    private func error(_ message: String) -> GraphError {
        GraphError(.invalidArgument, "Cannot read the predicate at character \(position + 1): \(message).")
    }
}

extension ComparisonOperator {
    /// The operator as the text syntax writes it (`==`, `CONTAINS[c]`, …).
    var symbol: String {
        switch self {
        case .equal: "=="
        case .notEqual: "!="
        case .less: "<"
        case .lessOrEqual: "<="
        case .greater: ">"
        case .greaterOrEqual: ">="
        case .contains: "CONTAINS"
        case .containsCaseInsensitive: "CONTAINS[c]"
        case .beginsWith: "BEGINSWITH"
        }
    }
}
