/// Splits a JSON array of issues — a plain array, or the `issues` array of a Jira search
/// response — into its elements as bytes arrive, without holding more than one element: the
/// streaming half of reading large JSON exports. Each element comes out on one line (newlines
/// between tokens become spaces), numbered from 1, with the input line it starts on.
public struct JSONArraySplitter: Sendable {
    /// Where the elements are.
    public enum Layout: Sendable {
        /// `[ {…}, {…} ]`
        case array
        /// `{ "startAt": 0, "issues": [ {…}, {…} ], … }`
        case searchResponse
    }

    /// One element.
    public enum Element: Sendable, Equatable {
        /// The element's bytes, its number and the input line it starts on.
        case value([UInt8], number: Int, line: Int)
        /// An element that grew past the limit.
        case oversized(number: Int, line: Int)
    }

    /// Why the input cannot be split.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// What was wrong.
        public var description: String
    }

    private let layout: Layout
    private let maximumElementBytes: Int
    private var depth = 0
    private var inString = false
    private var escaped = false
    private var started = false
    private var collecting = false
    private var arrayDepth = 0
    private var element: [UInt8] = []
    private var elementStarted = false
    private var oversized = false
    private var number = 0
    /// The input line of the byte being read, and the one the current element started on.
    private var line = 1
    private var elementLine = 0
    private var lastKey: [UInt8] = []
    private var keyBuffer: [UInt8] = []
    private var finishedArray = false
    private var ended = false
    private var offset = 0
    /// A comma ended the last element, and no other has started yet.
    private var afterComma = false
    /// The current element is an object or array that has closed: a comma or the array's end
    /// comes next.
    private var elementClosed = false

    /// Creates a splitter.
    public init(layout: Layout, maximumElementBytes: Int = 1 << 20) {
        self.layout = layout
        self.maximumElementBytes = maximumElementBytes
    }

    /// Whether the array was closed.
    public var isComplete: Bool { finishedArray }

    /// Whether the array of elements has begun: for a search response, whether its `issues`
    /// array was found.
    public var foundArray: Bool { arrayDepth > 0 }

    /// Splits the next bytes; returns the elements they complete.
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(Failure) -> [Element] {
        var out: [Element] = []
        for byte in bytes {
            offset += 1
            // A newline never starts an element, so counting it first is right for the next.
            if byte == 0x0A { line += 1 }
            if ended {
                try refuseTrailing(byte)
                continue
            }
            if !started {
                try begin(with: byte)
                continue
            }
            if inString {
                readString(byte)
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                try requireSeparator()
                inString = true
                if !collecting && depth == 1 { keyBuffer.removeAll(keepingCapacity: true) }
                startElementIfNeeded()
                if collecting { add(byte) }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                try openBracket(byte)
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if let element = try closeBracket(byte) { out.append(element) }
            case UInt8(ascii: ","):
                if let element = try comma() { out.append(element) }
            case 0x20, 0x0A, 0x0D, 0x09:
                if collecting && elementStarted { add(0x20) }
            default:
                try requireSeparator()
                startElementIfNeeded()
                if collecting { add(byte) }
            }
        }
        return out
    }

    /// A byte after the document: whitespace is skipped, anything else refused.
    @inline(__always)
    private func refuseTrailing(_ byte: UInt8) throws(Failure) {
        // Nothing may follow the document: a second array or NDJSON lines after it
        // would otherwise be dropped without a word.
        if byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { return }
        throw Failure(
            description:
                "text follows the end of the \(layout == .array ? "JSON array" : "Jira search response") at byte \(offset); a file holds one JSON document (or one issue object per line, without an enclosing array)"
        )
    }

    /// A byte before the document has started: whitespace is skipped, and the first other byte
    /// must open the array (or the search response's object).
    @inline(__always)
    private mutating func begin(with byte: UInt8) throws(Failure) {
        if byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { return }
        started = true
        let expected: UInt8 = layout == .array ? UInt8(ascii: "[") : UInt8(ascii: "{")
        guard byte == expected else {
            throw Failure(
                description:
                    "expected '\(Character(UnicodeScalar(expected)))' at the start of a \(layout == .array ? "JSON array" : "Jira search response")"
            )
        }
        depth = 1
        if layout == .array {
            collecting = true
            arrayDepth = 1
        }
    }

    /// A byte inside a string: kept with the element (or the key being read), and the string
    /// ends at an unescaped quote.
    @inline(__always)
    private mutating func readString(_ byte: UInt8) {
        if collecting && elementStarted { add(byte) }
        if !collecting && depth == 1 { keyBuffer.append(byte) }
        if escaped {
            escaped = false
        } else if byte == UInt8(ascii: "\\") {
            escaped = true
        } else if byte == UInt8(ascii: "\"") {
            inString = false
            if !collecting && depth == 1 { lastKey = Array(keyBuffer.dropLast()) }
        }
    }

    /// A `{` or `[`: the search response's `issues` array begins, or a nested value does.
    @inline(__always)
    private mutating func openBracket(_ byte: UInt8) throws(Failure) {
        if !collecting && layout == .searchResponse && depth == 1 && byte == UInt8(ascii: "[")
            && lastKey == Array("issues".utf8)
        {
            guard !finishedArray else {
                throw Failure(
                    description:
                        "the Jira search response has a second \"issues\" array at byte \(offset); a response has one"
                )
            }
            depth += 1
            collecting = true
            arrayDepth = depth
            return
        }
        try requireSeparator()
        startElementIfNeeded()
        depth += 1
        if collecting { add(byte) }
    }

    /// A `}` or `]`: the array of elements ends (returning its last element), or a nested value
    /// does.
    @inline(__always)
    private mutating func closeBracket(_ byte: UInt8) throws(Failure) -> Element? {
        if collecting && depth == arrayDepth {
            guard byte == UInt8(ascii: "]") else { throw Failure(description: "unbalanced '}' in the array") }
            guard !afterComma else {
                throw Failure(
                    description: "a comma closes the array at byte \(offset) (a trailing comma is not JSON)")
            }
            let element = endElement()
            collecting = false
            finishedArray = true
            depth -= 1
            ended = depth == 0
            return element
        }
        depth -= 1
        guard depth >= 0 else { throw Failure(description: "unbalanced brackets") }
        ended = depth == 0
        if collecting { add(byte) }
        if collecting && depth == arrayDepth { elementClosed = true }
        return nil
    }

    /// A `,`: between elements it ends the current one (returned); inside one it is kept.
    @inline(__always)
    private mutating func comma() throws(Failure) -> Element? {
        if collecting && depth == arrayDepth {
            // An element dropped between two commas would vanish without a reject.
            guard elementStarted else {
                throw Failure(
                    description:
                        "the array has an empty element at byte \(offset) (a comma with no value before it is not JSON)"
                )
            }
            let element = endElement()
            afterComma = true
            return element
        } else if collecting {
            add(UInt8(ascii: ","))
        }
        return nil
    }

    /// Ends the input.
    ///
    /// - Throws: when the array (or the search response's `issues` array) never closed, or
    ///   never appeared.
    public func finish() throws(Failure) {
        switch layout {
        case .array:
            guard finishedArray else {
                throw Failure(description: "the JSON array is not closed (the input is truncated)")
            }
        case .searchResponse:
            guard foundArray else {
                throw Failure(description: "no \"issues\" array was found in the Jira search response")
            }
            guard finishedArray else {
                throw Failure(
                    description:
                        "the \"issues\" array of the Jira search response is not closed (the input is truncated)")
            }
            guard ended else {
                throw Failure(
                    description:
                        "the Jira search response is not closed after its \"issues\" array (the input is truncated)")
            }
        }
    }

    private mutating func startElementIfNeeded() {
        guard collecting, depth == arrayDepth, !elementStarted else { return }
        elementStarted = true
        afterComma = false
        number += 1
        elementLine = line
    }

    /// Refuses a value that starts right after an element closed, without a comma between them:
    /// read on, the two would be one element, rejected as one, and the count would be short.
    private func requireSeparator() throws(Failure) {
        guard collecting, depth == arrayDepth, elementClosed else { return }
        throw Failure(description: "a comma is missing after element \(number) of the array, at byte \(offset)")
    }

    private mutating func add(_ byte: UInt8) {
        guard elementStarted else { return }
        if element.count >= maximumElementBytes {
            oversized = true
            return
        }
        element.append(byte)
    }

    private mutating func endElement() -> Element? {
        defer {
            element.removeAll(keepingCapacity: true)
            elementStarted = false
            elementClosed = false
            oversized = false
        }
        guard elementStarted else { return nil }
        while element.last == 0x20 { element.removeLast() }
        return oversized
            ? .oversized(number: number, line: elementLine) : .value(element, number: number, line: elementLine)
    }
}
