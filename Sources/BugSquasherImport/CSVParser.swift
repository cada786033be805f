/// A streaming RFC 4180 CSV parser: feed it bytes in any slices, get complete records back with
/// the line each started on. Quoted fields may hold commas, quotes (`""`) and newlines; text
/// after a field's closing quote (`"x"y`), or a field that is not UTF-8, makes the record
/// ``Record/malformed(line:reason:)``. Lines
/// end with `\n`, `\r\n`, or a lone `\r` (classic Mac OS, Excel's "CSV (Macintosh)"). Memory
/// holds one record at a time; a record longer than `maximumRecordBytes` is reported as
/// oversized instead of being kept.
public struct CSVParser: Sendable {
    /// One parsed record.
    public enum Record: Sendable, Equatable {
        /// The fields of a record that started on `line`.
        case fields([String], line: Int)
        /// A record that started on `line` and grew past the limit (its bytes were dropped).
        case oversized(line: Int)
        /// The input ended inside a quoted field that the record starting on `line` opened:
        /// every line after it was read into that field.
        case unterminated(line: Int)
        /// A record that started on `line` and cannot be read as written: a quoted field followed
        /// by text before the next comma or line end (`"x"y`: which text belongs to which field
        /// is a guess), or a field that is not UTF-8 (a Latin-1 export: its bytes would be
        /// replaced). `reason` names the first such field, 1-based.
        case malformed(line: Int, reason: String)
    }

    /// The longest record kept, in bytes.
    public let maximumRecordBytes: Int
    private var fields: [String] = []
    private var field: [UInt8] = []
    private var recordBytes = 0
    private var inQuotes = false
    private var quoteInQuotes = false
    private var line = 1
    private var recordLine = 1
    private var oversized = false
    /// Why this record cannot be read as written, naming the field, if it cannot.
    private var malformed: String?
    /// The current field's closing quote was just read: only a comma or a line end may follow.
    private var afterClosingQuote = false
    private var atRecordStart = true
    /// The last byte was a `\r` that ended a line: a `\n` right after it ends nothing more.
    private var afterCarriageReturn = false

    /// Creates a parser.
    public init(maximumRecordBytes: Int = 1 << 20) { self.maximumRecordBytes = maximumRecordBytes }

    /// Parses the next bytes and returns the records they complete.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [Record] {
        var records: [Record] = []
        for byte in bytes {
            if afterCarriageReturn {
                afterCarriageReturn = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            if atRecordStart {
                atRecordStart = false
                recordLine = line
            }
            recordBytes += 1
            if recordBytes > maximumRecordBytes { oversized = true }
            if inQuotes {
                if quoteInQuotes {
                    quoteInQuotes = false
                    if byte == UInt8(ascii: "\"") {
                        append(byte)
                        continue
                    }
                    inQuotes = false
                    afterClosingQuote = true
                    // Fall through: the byte after a closing quote is read unquoted.
                } else if byte == UInt8(ascii: "\"") {
                    quoteInQuotes = true
                    continue
                } else {
                    if byte == UInt8(ascii: "\n") { line += 1 }
                    append(byte)
                    continue
                }
            }
            if afterClosingQuote {
                afterClosingQuote = false
                if byte != UInt8(ascii: ","), byte != UInt8(ascii: "\n"), byte != UInt8(ascii: "\r") {
                    malformed =
                        malformed
                        ?? "field \(fields.count + 1) has text after its closing quote (a quote inside a quoted field is written \"\"), so which text belongs to which field is unclear; fix the quoting"
                }
            }
            switch byte {
            case UInt8(ascii: "\""):
                if field.isEmpty { inQuotes = true } else { append(byte) }
            case UInt8(ascii: ","):
                endField()
            case UInt8(ascii: "\n"):
                line += 1
                if let record = endRecord() { records.append(record) }
            case UInt8(ascii: "\r"):
                line += 1
                if let record = endRecord() { records.append(record) }
                afterCarriageReturn = true
            default:
                append(byte)
            }
        }
        return records
    }

    /// Ends the input: returns the last record when the input did not end with a newline, or
    /// ``Record/unterminated(line:)`` when it ended inside a quoted field.
    public mutating func finish() -> [Record] {
        if quoteInQuotes {
            inQuotes = false
            quoteInQuotes = false
        }
        afterClosingQuote = false
        if inQuotes { return [.unterminated(line: recordLine)] }
        guard !atRecordStart || !field.isEmpty || !fields.isEmpty else { return [] }
        return endRecord().map { [$0] } ?? []
    }

    private mutating func append(_ byte: UInt8) {
        if !oversized { field.append(byte) }
    }

    private mutating func endField() {
        if oversized {
            fields.append("")
        } else if let text = String(validating: field, as: UTF8.self) {
            fields.append(text)
        } else {
            malformed =
                malformed
                ?? "field \(fields.count + 1) is not valid UTF-8 (another encoding, such as Latin-1? convert the input to UTF-8)"
            fields.append("")
        }
        field.removeAll(keepingCapacity: true)
    }

    private mutating func endRecord() -> Record? {
        endField()
        defer {
            fields.removeAll(keepingCapacity: true)
            recordBytes = 0
            oversized = false
            malformed = nil
            atRecordStart = true
        }
        if oversized { return .oversized(line: recordLine) }
        if let malformed { return .malformed(line: recordLine, reason: malformed) }
        if fields.count == 1 && fields[0].isEmpty { return nil }
        return .fields(fields, line: recordLine)
    }
}
