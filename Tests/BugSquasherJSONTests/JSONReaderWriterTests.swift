import BugSquasherJSON
import Foundation
import Testing

/// The streaming reader and writer on their own: what one writes, the other reads back, and
/// both agree with Foundation's JSON.
@Suite("JSON reader and writer")
struct JSONReaderWriterTests {
    /// Runs `read` on `bytes` and checks that it consumed the whole document.
    func read<T>(_ bytes: [UInt8], _ read: (inout JSONReader) throws -> T) throws -> T {
        try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            let value = try read(&reader)
            try reader.end()
            return value
        }
    }

    /// Control characters included; Foundation reads them the same.
    @Test("strings with any escape or non-ASCII text round-trip and match Foundation")
    func strings() throws {
        for text in [
            "", "plain", "quote \" backslash \\ slash /", "line\nbreak\ttab\r\u{08}\u{0C}", "nul \u{0} bell \u{07}",
            "é 🐛 中文",
        ] {
            var writer = JSONWriter()
            writer.string(text)
            #expect(try read(writer.bytes) { try $0.string() } == text)
            #expect(try JSONDecoder().decode(String.self, from: Data(writer.bytes)) == text)
        }
        // What Foundation writes, the reader reads (including \u escapes and surrogate pairs).
        #expect(try read(Array(#""\u00e9 \ud83d\udc1b \/""#.utf8)) { try $0.string() } == "é 🐛 /")
    }

    /// A document as a line of JSON Lines: its bytes, then one newline (an escaped one inside a
    /// string stays escaped).
    @Test("a document written as a line ends in its one newline")
    func line() throws {
        var writer = JSONWriter()
        writer.object { writer in
            writer.key("text")
            writer.string("two\nlines")
        }
        #expect(writer.line() == Array(#"{"text":"two\nlines"}"#.utf8) + [UInt8(ascii: "\n")])
    }

    /// ASCII text with escapes is decoded straight into the string; escapes beside non-ASCII
    /// text are decoded and then checked as UTF-8. Both say the same of a broken string.
    @Test("escaped strings decode the same with or without non-ASCII text; broken ones fail at their byte")
    func escapedStrings() throws {
        var long = JSONWriter()
        let longText = String(repeating: "log line\n\t\\ \"quoted\" ", count: 200)
        long.string(longText)
        for (json, text) in [
            (#""a\nb""#, "a\nb"), (#""\"""#, "\""), (#""\u00e9 ok""#, "é ok"), (#""x \ud83d\udc1b y""#, "x 🐛 y"),
            (#""\u0000\/""#, "\u{0}/"), (#""é\n""#, "é\n"), (#""\nü""#, "\nü"),
            (String(decoding: long.bytes, as: UTF8.self), longText),
        ] {
            #expect(try read(Array(json.utf8)) { try $0.string() } == text, "\(json.prefix(40))")
            #expect(try JSONDecoder().decode(String.self, from: Data(json.utf8)) == text)
        }
        for (json, said) in [
            (#""a\qb""#, "invalid escape at byte 2"), (#""a\u12"4""#, "invalid \\u escape"),
            (#""\ud800 x""#, "lone surrogate"), (#""ab\n"#, "unterminated"),
            ("\"a\\n\u{01}\"", "control character in a string at byte 4"),
            ("\"a\\\u{01}\"", "invalid escape"), (#""é\q""#, "invalid escape"),
        ] {
            let failure = #expect(throws: JSONReader.Failure.self, "\(json)") {
                try read(Array(json.utf8)) { try $0.string() }
            }
            #expect(failure?.description.contains(said) == true, "\(json): \(String(describing: failure))")
        }
    }

    @Test("integers are written as their digits, the extremes included")
    func integers() {
        for value: Int64 in [0, 7, -1, 10, 1_000_000_007, -987_654_321, .max, .min] {
            var writer = JSONWriter()
            writer.integer(value)
            #expect(writer.bytes == Array(String(value).utf8))
        }
        var pair = JSONWriter()
        pair.array { array in
            array.integer(12)
            array.integer(-3)
        }
        #expect(pair.bytes == Array("[12,-3]".utf8))
    }

    /// Integers of up to 18 digits are read from the bytes, longer ones as text: both give the
    /// same values, and a fraction, an exponent or an overflow is refused either way.
    @Test("integers of any length are read back, as integers and as numbers, and non-integers refused")
    func readIntegers() throws {
        let values: [Int64] = [
            0, 7, -1, 10, 999_999_999_999_999_999, -999_999_999_999_999_999, 1_000_000_000_000_000_000, .max, .min,
        ]
        for value in values {
            #expect(try read(Array(String(value).utf8)) { try $0.int64() } == value)
            #expect(try read(Array(String(value).utf8)) { try $0.integer() } == Int(value))
            #expect(try read(Array(String(value).utf8)) { try $0.number() } == .integer(value))
            #expect(
                try read(Array("[\(value), \(value)]".utf8)) { reader in
                    var read: [Int64] = []
                    try reader.array { read.append(try $0.int64()) }
                    return read
                } == [value, value])
        }
        #expect(try read(Array("-0".utf8)) { try $0.int64() } == 0)
        for json in ["1.5", "1e3", "2E+1", "-", "9223372036854775808", "-9223372036854775809", "x"] {
            #expect(throws: JSONReader.Failure.self, "\(json)") { try read(Array(json.utf8)) { try $0.int64() } }
        }
        // A number that is no short integer is still read whole, as a double.
        #expect(try read(Array("12.5".utf8)) { try $0.number() } == .double(12.5))
        #expect(try read(Array("1e3".utf8)) { try $0.number() } == .double(1_000))
    }

    @Test("objects, arrays, numbers, booleans and null are written and read in order")
    func documents() throws {
        var writer = JSONWriter()
        writer.object { object in
            object.key("id")
            object.integer(-42)
            object.key("ratio")
            object.double(0.25)
            object.key("ok")
            object.bool(true)
            object.key("none")
            object.null()
            object.key("tags")
            object.array { array in
                array.string("a")
                array.string("b")
            }
        }
        var seen: [String] = []
        try read(writer.bytes) { reader in
            try reader.object { reader, key in
                seen.append(key)
                switch key {
                case "id":
                    let id = try reader.number()
                    #expect(id == .integer(-42))
                case "ratio":
                    let ratio = try reader.number()
                    #expect(ratio == .double(0.25))
                case "ok":
                    let ok = try reader.bool()
                    #expect(ok)
                case "none":
                    let none = reader.null()
                    #expect(none)
                case "tags":
                    let tags = try reader.strings()
                    #expect(tags == ["a", "b"])
                default: Issue.record("unexpected key \(key)")
                }
            }
        }
        #expect(seen == ["id", "ratio", "ok", "none", "tags"])
        let foundation = try JSONSerialization.jsonObject(with: Data(writer.bytes)) as? [String: Any]
        #expect(foundation?["id"] as? Int == -42 && foundation?["tags"] as? [String] == ["a", "b"])
    }

    @Test("skip passes over any value; IDs are read as text whether strings or numbers")
    func skipAndIDs() throws {
        let document = Array(#"{"skip":{"a":[1,{"b":"}"}],"c":null},"id":10100,"key":"10101"}"#.utf8)
        var ids: [String] = []
        try read(document) { reader in
            try reader.object { reader, key in
                if key == "skip" { try reader.skip() } else { ids.append(try reader.stringOrNumber()) }
            }
        }
        #expect(ids == ["10100", "10101"])
    }

    /// Keys read as names are compared byte for byte: an escaped key is the key it spells, a
    /// longer or shorter one is not, and one that is not UTF-8 is refused as a string would be.
    @Test("keys read as names match literals as the text they spell")
    func names() throws {
        let document = Array(
            #"{"summary":1,"\u0073ummary":2,"summar":3,"summary2":4,"é":5,"a":6,"":7,"k\"ey":8}"#.utf8)
        var matched: [Int: String] = [:]
        try read(document) { reader in
            try reader.objectByName { reader, name in
                let value = try reader.integer()
                switch name {
                case "summary": matched[value] = "summary"
                case "é": matched[value] = "é"
                case "a": matched[value] = "a"
                case "": matched[value] = "empty"
                case "k\"ey": matched[value] = name.string
                default: matched[value] = "other \(name.byteCount)"
                }
            }
        }
        #expect(
            matched == [
                1: "summary", 2: "summary", 3: "other 6", 4: "other 8", 5: "é", 6: "a", 7: "empty", 8: "k\"ey",
            ])
        // A key that is not UTF-8 is refused, read or skipped.
        let latin1: [UInt8] = Array(#"{"caf"#.utf8) + [0xE9] + Array(#"":1}"#.utf8)
        #expect(throws: JSONReader.Failure.self) { try read(latin1) { try $0.skip() } }
        #expect(throws: JSONReader.Failure.self) {
            try read(latin1) { try $0.objectByName { reader, _ in try reader.skip() } }
        }
    }

    @Test("bad documents say what is wrong and at which byte; text after the document is refused")
    func failures() throws {
        for (text, said) in [
            (#"{"a":}"#, "at byte 5"), (#""unterminated"#, "byte"), ("[1,2", "byte"), (#"{"a":1} x"#, "byte"),
        ] {
            let failure = #expect(throws: JSONReader.Failure.self, "\(text)") {
                try read(Array(text.utf8)) { try $0.skip() }
            }
            #expect(failure?.description.contains(said) == true, "\(text): \(String(describing: failure))")
        }
        #expect(throws: JSONReader.Failure.self) {
            try read(Array("99999999999999999999999".utf8)) { try $0.integer() }
        }
    }
}
