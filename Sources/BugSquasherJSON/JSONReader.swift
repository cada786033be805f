/// A forward-only reader of one UTF-8 JSON document that decodes straight into the caller's values,
/// with no tree and no `Codable`: strict, errors at their byte offset, ``end()`` after the document.
///
/// ```swift
/// var reader = JSONReader(bytes)
/// try reader.object { reader, key in if key == "title" { title = try reader.string() } else { try reader.skip() } }
/// ```
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "JSON is read and written without Codable".
public struct JSONReader {
    /// An error: what was wrong and the byte offset where it was found.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        /// What was wrong.
        package var message: String
        /// The byte offset in the document.
        package var offset: Int
        /// The field at fault, when the reading type named it (for messages such as Varlink's
        /// `InvalidParameter`).
        package var field: String?
        package var description: String { "\(message) at byte \(offset)" }

        /// Creates an error.
        package init(message: String, offset: Int, field: String? = nil) {
            self.message = message
            self.offset = offset
            self.field = field
        }

        /// A required field that was missing.
        package static func missing(_ field: String) -> Failure {
            Failure(message: "missing field '\(field)'", offset: 0, field: field)
        }
    }

    /// The deepest nesting of arrays and objects accepted.
    package static let maximumDepth = 64

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0

    /// Reads `bytes`, which must stay valid while the reader is used.
    package init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    // MARK: Values

    /// Reads an object, calling `field` with each key; `field` must read or skip the value.
    package mutating func object(_ field: (inout JSONReader, String) throws -> Void) throws {
        var fields = try beginObject()
        while let key = try nextKey(&fields) {
            try field(&self, key)
        }
    }

    /// Reads an object as ``object(_:)`` does, refusing a key it holds twice (a failure naming
    /// that key as its field). Keys are compared as Swift strings: two Unicode forms of one
    /// text, one key to a dictionary, are the same key.
    package mutating func uniqueKeysObject(_ field: (inout JSONReader, String) throws -> Void) throws {
        var keys = Set<String>()
        var fields = try beginObject()
        while let key = try nextKey(&fields) {
            guard keys.insert(key).inserted else {
                throw Failure(message: "the key '\(key.prefix(60))' twice in one object", offset: index, field: key)
            }
            try field(&self, key)
        }
    }

    /// Where a walk over an object's fields stands; see ``beginObject()``.
    package struct Fields {
        fileprivate var started = false
    }

    /// Starts reading an object whose fields the caller walks with ``nextKey(_:)``: unlike ``object(_:)``,
    /// no closure captures the struct being filled in, so it is returned without a copy.
    ///
    /// ```swift
    /// var fields = try reader.beginObject()
    /// while let key = try reader.nextKey(&fields) {
    ///     if key == "title" { record.title = try reader.string() } else { try reader.skip() }
    /// }
    /// ```
    package mutating func beginObject() throws -> Fields {
        try expect(UInt8(ascii: "{"), "expected an object")
        try enter()
        return Fields()
    }

    /// The next key of the object begun with ``beginObject()``, with the reader at its value,
    /// which the caller must read or skip; `nil` once the object's closing brace is read.
    package mutating func nextKey(_ fields: inout Fields) throws -> String? {
        try nextName(&fields)?.string
    }

    /// A key of an object as ``nextName(_:)`` reads it: compared with a literal (`case "title":`)
    /// byte for byte, as JSON compares names (RFC 8259, section 8.3), without making a `String`
    /// of it — in a record most keys are only compared, and skipped (docs/DESIGN-NOTES.md, "JSON
    /// is read and written without Codable"). Valid while the reader's bytes are.
    public struct Name: CustomStringConvertible {
        /// The key's bytes when it was written plainly (ASCII, no escape), else empty.
        @usableFromInline let plain: UnsafeBufferPointer<UInt8>
        /// The key, when it was not written plainly.
        @usableFromInline let text: String?

        @usableFromInline init(plain: UnsafeBufferPointer<UInt8>, text: String?) {
            self.plain = plain
            self.text = text
        }

        /// The key as a string.
        package var string: String { text ?? String(decoding: plain, as: UTF8.self) }
        /// The length of the key in UTF-8 bytes.
        package var byteCount: Int { text?.utf8.count ?? plain.count }
        public var description: String { string }

        /// Whether the key is `literal`'s text, byte for byte. Public and inlinable, so that a
        /// `switch` over many literals in another module compares inline rather than calling
        /// out for each case (docs/DESIGN-NOTES.md, "JSON is read and written without Codable").
        @inlinable @inline(__always)
        public static func ~= (literal: StaticString, name: Name) -> Bool {
            guard name.text == nil, literal.hasPointerRepresentation else { return name.matchesSlowly(literal) }
            let count = literal.utf8CodeUnitCount
            guard count == name.plain.count else { return false }
            let expected = literal.utf8Start
            for offset in 0..<count where expected[offset] != name.plain[offset] { return false }
            return true
        }

        /// ``~=(_:_:)`` for a key that was not written plainly, or a one-character literal.
        @usableFromInline func matchesSlowly(_ literal: StaticString) -> Bool {
            literal.withUTF8Buffer { string.utf8.elementsEqual($0) }
        }

        /// Whether the key is `literal`'s text, byte for byte.
        @inlinable
        package static func == (name: Name, literal: StaticString) -> Bool { literal ~= name }
    }

    /// The next key of the object begun with ``beginObject()``, as ``nextKey(_:)`` reads it but
    /// as a ``Name``: a plain key is only scanned, not made into a `String`.
    package mutating func nextName(_ fields: inout Fields) throws -> Name? {
        if fields.started {
            guard consume(UInt8(ascii: ",")) else {
                try expect(UInt8(ascii: "}"), "expected ',' or '}' in an object")
                depth -= 1
                return nil
            }
        } else {
            fields.started = true
            if consume(UInt8(ascii: "}")) {
                depth -= 1
                return nil
            }
        }
        skipWhitespace()
        let name = try name()
        try expect(UInt8(ascii: ":"), "expected ':' after a key")
        return name
    }

    /// Reads a key: a plain one (ASCII, no escapes) only scanned; any other read and checked as
    /// ``string()`` reads a value.
    @inline(__always)
    private mutating func name() throws -> Name {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
            throw Failure(message: "expected a string", offset: index)
        }
        let start = index + 1
        var seen: UInt64 = 0
        let end = Self.scanText(bytes, from: start, seen: &seen)
        if end < bytes.count, bytes[end] == UInt8(ascii: "\""), seen & Self.highBits == 0 {
            index = end + 1
            return Name(plain: UnsafeBufferPointer(rebasing: bytes[start..<end]), text: nil)
        }
        return Name(plain: UnsafeBufferPointer(start: nil, count: 0), text: try string())
    }

    /// Reads an object as ``object(_:)`` does, calling `field` with each key as a ``Name``: for
    /// records whose keys are mostly compared with literals and skipped.
    package mutating func objectByName(_ field: (inout JSONReader, Name) throws -> Void) throws {
        var fields = try beginObject()
        while let name = try nextName(&fields) {
            try field(&self, name)
        }
    }

    /// Reads an array, calling `element` for each element; `element` must read or skip it.
    package mutating func array(_ element: (inout JSONReader) throws -> Void) throws {
        try expect(UInt8(ascii: "["), "expected an array")
        try enter()
        defer { depth -= 1 }
        if consume(UInt8(ascii: "]")) { return }
        repeat {
            try element(&self)
        } while consume(UInt8(ascii: ","))
        try expect(UInt8(ascii: "]"), "expected ',' or ']' in an array")
    }

    /// Reads an array of strings.
    package mutating func strings() throws -> [String] {
        var result: [String] = []
        try array { result.append(try $0.string()) }
        return result
    }

    /// Consumes `null` if it is next, and says whether it was.
    package mutating func null() -> Bool {
        skipWhitespace()
        guard bytes.count - index >= 4, bytes[index] == UInt8(ascii: "n"), bytes[index + 1] == UInt8(ascii: "u"),
            bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
        else { return false }
        index += 4
        return true
    }

    /// The kind of value that comes next.
    package enum Kind: Sendable {
        case object, array, string, number, bool, null
    }

    /// What comes next, without consuming it.
    package mutating func peek() throws -> Kind {
        skipWhitespace()
        guard index < bytes.count else { throw Failure(message: "unexpected end of input", offset: index) }
        switch bytes[index] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: throw Failure(message: "expected a value", offset: index)
        }
    }

    /// Reads `true` or `false`.
    package mutating func bool() throws -> Bool {
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "t") {
            try literal("true")
            return true
        }
        guard index < bytes.count, bytes[index] == UInt8(ascii: "f") else {
            throw Failure(message: "expected true or false", offset: index)
        }
        try literal("false")
        return false
    }

    /// A number as read: integral when written without fraction or exponent and in range.
    package enum Number: Sendable, Equatable {
        case integer(Int64)
        case double(Double)
    }

    /// Reads a number.
    package mutating func number() throws -> Number {
        if let value = shortInteger() { return .integer(value) }
        let (text, start) = try numberText()
        if let integer = Int64(text) { return .integer(integer) }
        guard let double = Double(text), double.isFinite else {
            throw Failure(message: "number out of range", offset: start)
        }
        return .double(double)
    }

    /// The text of the number that comes next, read, and the offset it starts at.
    private mutating func numberText() throws -> (text: String, start: Int) {
        skipWhitespace()
        let start = index
        try skipNumber()
        return (String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self), start)
    }

    /// Reads a value with `read`; an error it throws names `name` as the field at fault (unless
    /// a field inside it was named already).
    package mutating func field<T>(_ name: String, _ read: (inout JSONReader) throws -> T) throws -> T {
        do {
            return try read(&self)
        } catch var failure as Failure {
            failure.field = failure.field ?? name
            throw failure
        }
    }

    /// Reads a string, or `nil` for `null`.
    package mutating func optionalString() throws -> String? {
        null() ? nil : try string()
    }

    /// Reads a string, or a number as its text (IDs are written either way).
    package mutating func stringOrNumber() throws -> String {
        skipWhitespace()
        guard index < bytes.count,
            bytes[index] == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index])
        else {
            return try string()
        }
        return try numberText().text
    }

    /// Reads an integer that fits an `Int64`.
    package mutating func int64() throws -> Int64 {
        if let value = shortInteger() { return value }
        let (text, start) = try numberText()
        guard let value = Int64(text) else { throw Failure(message: "expected an integer", offset: start) }
        return value
    }

    /// An integer of at most 18 digits (which cannot overflow) that comes next, read straight
    /// from the bytes; `nil`, with nothing read, for anything else (more digits, a fraction, an
    /// exponent, no digits), which ``int64()``, ``integer()`` and ``number()`` read as text.
    /// Histories, imports and feeds are mostly such integers: a `String` for each cost a daemon
    /// reading another's import chunk 13 % of its instructions.
    private mutating func shortInteger() -> Int64? {
        skipWhitespace()
        var position = index
        let negative = position < bytes.count && bytes[position] == UInt8(ascii: "-")
        if negative { position += 1 }
        let first = position
        var value: Int64 = 0
        while position < bytes.count, position - first < 18 {
            let digit = bytes[position] &- UInt8(ascii: "0")
            guard digit < 10 else { break }
            value = value &* 10 &+ Int64(digit)
            position += 1
        }
        guard position > first else { return nil }
        if position < bytes.count {
            let next = bytes[position]
            if next &- UInt8(ascii: "0") < 10 || next == UInt8(ascii: ".") || next | 0x20 == UInt8(ascii: "e") {
                return nil
            }
        }
        index = position
        return negative ? -value : value
    }

    /// Reads a number as a `Double`, whether written with a fraction or an exponent or not
    /// (`-0.0` keeps its sign).
    package mutating func double() throws -> Double {
        let (text, start) = try numberText()
        guard let value = Double(text) else { throw Failure(message: "expected a number", offset: start) }
        return value
    }

    /// Reads an integer.
    package mutating func integer() throws -> Int {
        if let value = shortInteger() { return Int(value) }
        let (text, start) = try numberText()
        guard let value = Int(text) else { throw Failure(message: "expected an integer", offset: start) }
        return value
    }

    /// Reads a string.
    package mutating func string() throws -> String {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
            throw Failure(message: "expected a string", offset: index)
        }
        index += 1
        let start = index
        // Every byte passed is OR-ed in here: its high bits say whether any was non-ASCII, and
        // only then is the text validated as UTF-8 (what `\u` escapes add is valid already).
        var seen: UInt64 = 0
        index = Self.scanText(bytes, from: index, seen: &seen)
        // The common case: no escapes, one copy.
        if index < bytes.count, bytes[index] == UInt8(ascii: "\"") {
            let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
            index += 1
            return seen & Self.highBits == 0 ? String(decoding: raw, as: UTF8.self) : try Self.validated(raw, at: start)
        }
        if let text = try unescapedASCII(from: start, seen: seen) { return text }
        // Escapes beside non-ASCII text: the runs between them are copied whole, then checked.
        var utf8: [UInt8] = []
        utf8.reserveCapacity(index - start + 64)
        utf8.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return try utf8.withUnsafeBufferPointer {
                    seen & Self.highBits == 0 ? String(decoding: $0, as: UTF8.self) : try Self.validated($0, at: start)
                }
            case UInt8(ascii: "\\"):
                utf8.append(contentsOf: try unescape().utf8)
            default:
                throw Failure(message: "control character in a string", offset: index - 1)
            }
            let run = index
            index = Self.scanText(bytes, from: index, seen: &seen)
            utf8.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<index]))
        }
        throw Failure(message: "unterminated string", offset: start - 1)
    }

    /// Skips a string without making it: a plain ASCII one (most of what a record's reader skips)
    /// is only scanned; one with escapes or non-ASCII bytes is read and checked as ``string()``
    /// reads it, so that skipping refuses what reading refuses.
    private mutating func skipString() throws {
        let quote = index
        var seen: UInt64 = 0
        index = Self.scanText(bytes, from: index + 1, seen: &seen)
        if index < bytes.count, bytes[index] == UInt8(ascii: "\""), seen & Self.highBits == 0 {
            index += 1
            return
        }
        index = quote
        _ = try string()
    }

    /// Skips one value of any type, checking its syntax.
    package mutating func skip() throws {
        skipWhitespace()
        guard index < bytes.count else { throw Failure(message: "expected a value", offset: index) }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            var fields = try beginObject()
            while try nextName(&fields) != nil { try skip() }
        case UInt8(ascii: "["): try array { try $0.skip() }
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default: try skipNumber()
        }
    }

    /// Skips one value as ``skip()`` does, refusing besides what JSON's grammar allows but its
    /// readers disagree on (RFC 8259, sections 4 and 6): an object holding a key twice (which one
    /// counts differs from reader to reader; keys are compared as Swift strings, so two Unicode
    /// forms of one text, one key to a dictionary, are refused too) and a number beyond a
    /// `Double`'s range (`1e400`).
    /// A message checked this way means the same to every reader that takes it.
    package mutating func validate() throws {
        switch try peek() {
        case .object: try uniqueKeysObject { reader, _ in try reader.validate() }
        case .array: try array { try $0.validate() }
        case .number: _ = try number()
        default: try skip()
        }
    }

    /// Checks that only whitespace follows the document.
    package mutating func end() throws {
        skipWhitespace()
        guard index == bytes.count else {
            throw Failure(message: "unexpected text after the JSON value", offset: index)
        }
    }

    // MARK: Lexing

    private mutating func enter() throws {
        depth += 1
        guard depth <= Self.maximumDepth else {
            throw Failure(message: "nested deeper than \(Self.maximumDepth) levels", offset: index)
        }
    }

    @inline(__always)
    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    @inline(__always)
    private mutating func consume(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    @inline(__always)
    private mutating func expect(_ byte: UInt8, _ message: @autoclosure () -> String) throws {
        guard consume(byte) else {
            throw Failure(message: index < bytes.count ? message() : "unexpected end of input", offset: index)
        }
    }

    private mutating func literal(_ word: StaticString) throws {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw Failure(message: "invalid literal", offset: index) }
        let letters = word.utf8Start
        for offset in 0..<count where bytes[index + offset] != letters[offset] {
            throw Failure(message: "invalid literal", offset: index)
        }
        index += count
    }

    private mutating func skipNumber() throws {
        let start = index
        func digits() -> Int {
            let first = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - first
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard digits() > 0 else { throw Failure(message: "expected a value", offset: start) }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw Failure(message: "invalid number", offset: start) }
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digits() > 0 else { throw Failure(message: "invalid number", offset: start) }
        }
    }

    /// The high bit of each byte of a word.
    private static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// The index of the first quote, backslash or control character at or after `index`, or the
    /// end: what a string's text runs to. Eight bytes at a time while none of them is one; every
    /// byte passed is OR-ed into `seen` (its high bits then tell whether one was non-ASCII).
    @inline(__always)
    private static func scanText(_ bytes: UnsafeBufferPointer<UInt8>, from index: Int, seen: inout UInt64) -> Int {
        guard let base = UnsafeRawPointer(bytes.baseAddress) else { return index }
        let ones: UInt64 = 0x0101_0101_0101_0101
        var index = index
        while bytes.count - index >= 8 {
            let word = base.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            let quote = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
            let backslash = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
            // Nonzero in a byte's high bit when some byte is zero (below 0x20 for the third);
            // exact as to whether any is, which is all that is asked.
            let hasQuote = (quote &- ones) & ~quote
            let hasBackslash = (backslash &- ones) & ~backslash
            let hasControl = (word &- ones &* 0x20) & ~word
            let special = (hasQuote | hasBackslash | hasControl) & highBits
            if special != 0 {
                // The lowest flagged byte is exact (a borrow only flags bytes above it): the
                // text ends there, and only the bytes below it were passed.
                let passed = special.trailingZeroBitCount / 8
                seen |= word & ((1 << (passed * 8)) &- 1)
                return index + passed
            }
            seen |= word
            index += 8
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            seen |= UInt64(byte)
            index += 1
        }
        return index
    }

    /// The string of `utf8`, or a failure naming `offset` when it is not valid UTF-8 (a byte
    /// sequence in another encoding, or cut in the middle of a character).
    private static func validated(_ utf8: UnsafeBufferPointer<UInt8>, at offset: Int) throws -> String {
        guard let text = String(validating: utf8, as: UTF8.self) else {
            throw Failure(
                message:
                    "a string that is not valid UTF-8 (another encoding, such as Latin-1? convert the input to UTF-8)",
                offset: offset)
        }
        return text
    }

    /// The rest of a string with escapes that begins at `start` (after its quote; the reader
    /// is at its first escape; `seen` is what ``scanText(_:from:seen:)`` saw before it), when
    /// every byte of it outside its escapes is ASCII: decoded straight into the string's
    /// storage, which it cannot outgrow (an escape is never shorter
    /// than what it stands for). `nil`, with the reader where it was, for any other string
    /// (non-ASCII text, which must be checked as UTF-8, an unterminated one, or one holding a
    /// control character), which ``string()`` reads byte by byte and refuses where it must.
    private mutating func unescapedASCII(from start: Int, seen: UInt64) throws -> String? {
        // Where the string ends: the first quote not after a backslash.
        var end = index
        var seen = seen
        while end < bytes.count, bytes[end] == UInt8(ascii: "\\") {
            end = Self.scanText(bytes, from: end + 2, seen: &seen)
        }
        guard end < bytes.count, bytes[end] == UInt8(ascii: "\""), seen & Self.highBits == 0 else { return nil }
        let firstEscape = index
        let text = try String(unsafeUninitializedCapacity: end - start) { storage in
            guard let output = storage.baseAddress, let input = bytes.baseAddress else { return 0 }
            var written = 0
            var run = start
            var runEnd = firstEscape
            while true {
                if runEnd > run {
                    (output + written).initialize(from: input + run, count: runEnd - run)
                    written += runEnd - run
                }
                guard runEnd < end else { return written }
                // A backslash, and the letter after it (before `end`, which the scan above
                // looked for past each backslash's next byte).
                guard input[runEnd] == UInt8(ascii: "\\") else {
                    throw Failure(message: "control character in a string", offset: runEnd)
                }
                if let byte = Self.simpleEscape(input[runEnd + 1]) {
                    output[written] = byte
                    written += 1
                    run = runEnd + 2
                } else {
                    index = runEnd + 1
                    for byte in try unescape().utf8 {
                        output[written] = byte
                        written += 1
                    }
                    run = index
                }
                runEnd = Self.scanText(bytes, from: run, seen: &seen)
            }
        }
        index = end + 1
        return text
    }

    /// The byte a one-letter escape (`\n`, `\"`, …) stands for; `nil` for `\u` and for what is
    /// no escape.
    @inline(__always)
    private static func simpleEscape(_ letter: UInt8) -> UInt8? {
        switch letter {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): letter
        case UInt8(ascii: "b"): 0x08
        case UInt8(ascii: "f"): 0x0C
        case UInt8(ascii: "n"): 0x0A
        case UInt8(ascii: "r"): 0x0D
        case UInt8(ascii: "t"): 0x09
        default: nil
        }
    }

    /// Decodes the escape after a backslash (already consumed).
    private mutating func unescape() throws -> Unicode.Scalar {
        guard index < bytes.count else { throw Failure(message: "unterminated string", offset: index) }
        let byte = bytes[index]
        index += 1
        if let simple = Self.simpleEscape(byte) { return Unicode.Scalar(simple) }
        switch byte {
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xD800..<0xDC00).contains(scalar), bytes.count - index >= 6,
                bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            {
                index += 2
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low) else {
                    throw Failure(message: "invalid surrogate pair", offset: index - 6)
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            // A lone surrogate is no character: refused like invalid UTF-8, not replaced.
            guard let character = Unicode.Scalar(scalar) else {
                throw Failure(
                    message:
                        "a lone surrogate \\u\(String(scalar, radix: 16, uppercase: true)), which is no character (a string cut in the middle of a UTF-16 pair?)",
                    offset: index - 6)
            }
            return character
        default:
            throw Failure(message: "invalid escape", offset: index - 2)
        }
    }

    private mutating func hex4() throws -> UInt32 {
        guard bytes.count - index >= 4 else { throw Failure(message: "invalid \\u escape", offset: index) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw Failure(message: "invalid \\u escape", offset: index)
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }
}
