public import Foundation

/// The strict ISO 8601 timestamp parser every date squasherd reads goes through (import records,
/// `Import.Update` values, predicates, Jira's `2011-04-15T02:23:39.000+0000`): one text is one
/// instant everywhere, bit for bit, and a date that does not exist (`2020-02-30`) is refused.
///
/// Forms: `2011-04-15T02:23[:39[.000]]` with a zone (`Z`, `+0100`, `+01:00`, `+01`), and `2011-04-15`
/// (midnight UTC); years 0001–9999, proleptic Gregorian. A time without a zone is ambiguous, refused.
///
/// Why it is built this way: docs/DESIGN-NOTES.md, "Every date goes through one strict parser".
public enum ISO8601Date {
    /// The instants ISO 8601 writes with a four-digit year: 0001-01-01 to 9999-12-31, UTC.
    public static let fourDigitYears =
        Date(timeIntervalSince1970: -62_135_596_800)...Date(timeIntervalSince1970: 253_402_300_799.999)

    /// Parses a Jira timestamp; `nil` when the text is not one of the accepted forms, names an
    /// impossible date or time, or an instant outside ``fourDigitYears``
    /// (`0000-06-01T00:00:00Z`, or `9999-12-31T23:00:00-0200`, which is in year 10000 in UTC).
    public static func parse(_ text: String) -> Date? {
        parse(text, anyYear: false)
    }

    /// Whether `text` is a well-formed timestamp whose instant is outside ``fourDigitYears``:
    /// what to tell someone ``parse(_:)`` refused it for.
    public static func isOutsideFourDigitYears(_ text: String) -> Bool {
        parse(text, anyYear: true).map { !fourDigitYears.contains($0) } ?? false
    }

    /// Why ``parse(_:)`` refuses `text`, for an error message: "'…' is outside the years 0001
    /// to 9999 (in UTC)", or `otherwise`.
    public static func refusal(of text: String, otherwise: @autoclosure () -> String) -> String {
        isOutsideFourDigitYears(text)
            ? "'\(text.prefix(60))' is outside the years 0001 to 9999 (in UTC), which ISO 8601 writes with four digits"
            : otherwise()
    }

    private static func parse(_ text: String, anyYear: Bool) -> Date? {
        let date =
            text.utf8.withContiguousStorageIfAvailable({ parse(bytes: $0) })
            ?? Array(text.utf8).withUnsafeBufferPointer { parse(bytes: $0) }
        guard let date, anyYear || fourDigitYears.contains(date) else { return nil }
        return date
    }

    /// Parses the UTF-8 bytes of a timestamp, in any year from 0000 to 9999 (before its zone is
    /// applied).
    static func parse(bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        var scanner = Scanner(bytes: bytes)
        guard let year = scanner.digits(4), scanner.consume(UInt8(ascii: "-")),
            let month = scanner.digits(2), scanner.consume(UInt8(ascii: "-")),
            let day = scanner.digits(2),
            (1...12).contains(month), (1...daysInMonth(month, year: year)).contains(day)
        else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        if scanner.isAtEnd { return Date(timeIntervalSince1970: Double(days * 86_400)) }

        guard scanner.consume(UInt8(ascii: "T")),
            let hour = scanner.digits(2), scanner.consume(UInt8(ascii: ":")),
            let minute = scanner.digits(2),
            hour < 24, minute < 60
        else { return nil }
        var second = 0
        if scanner.consume(UInt8(ascii: ":")) {
            guard let value = scanner.digits(2), value < 60 else { return nil }
            second = value
        }
        var nanoseconds = 0
        if scanner.consume(UInt8(ascii: ".")) || scanner.consume(UInt8(ascii: ",")) {
            guard let value = scanner.fraction() else { return nil }
            nanoseconds = value
        }
        guard let offset = scanner.zoneOffset(), scanner.isAtEnd else { return nil }

        let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset
        return Date(timeIntervalSince1970: Double(seconds) + Double(nanoseconds) / 1_000_000_000)
    }

    /// Writes `date` in UTC as `2011-04-15T02:23:39Z`, or `2011-04-15T02:23:39.250Z` with
    /// milliseconds: in the proleptic Gregorian calendar ``parse(_:)`` reads, so that what is
    /// written reads back as the same day (Foundation's formatter switches to the Julian
    /// calendar before 1582-10-15, and wrote the year-1 date this parser reads as 0001-01-03).
    public static func format(_ date: Date, fractionalSeconds: Bool = false) -> String {
        // To the nearest millisecond, not down: a `Double` holds .003 s as 0.00299…, and cutting
        // it wrote back .002, one less on every read and write. Kept within year 9999.
        let milliseconds = min(Int((date.timeIntervalSince1970 * 1_000).rounded()), Self.lastMillisecond)
        let seconds = milliseconds >= 0 ? milliseconds / 1_000 : (milliseconds - 999) / 1_000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let time = seconds - days * 86_400
        let (year, month, day) = civilFromDays(days)
        var text = String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d", year, month, day, time / 3_600, time / 60 % 60, time % 60)
        if fractionalSeconds { text += String(format: ".%03d", milliseconds - seconds * 1_000) }
        return text + "Z"
    }

    /// 9999-12-31T23:59:59.999Z in milliseconds since 1970, the last instant ``format(_:fractionalSeconds:)`` writes.
    static let lastMillisecond = (daysFromCivil(year: 9_999, month: 12, day: 31) * 86_400 + 86_399) * 1_000 + 999

    /// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
    static func civilFromDays(_ days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097  // [0, 146096]
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365  // [0, 399]
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)  // [0, 365]
        let shiftedMonth = (5 * dayOfYear + 2) / 153  // [0, 11], from March
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400  // [0, 399]
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1  // [0, 365]
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear  // [0, 146096]
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func daysInMonth(_ month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// A cursor over ASCII bytes.
    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        var isAtEnd: Bool { index == bytes.count }

        /// Reads exactly `count` decimal digits.
        mutating func digits(_ count: Int) -> Int? {
            guard bytes.count - index >= count else { return nil }
            var value = 0
            for _ in 0..<count {
                let digit = bytes[index] &- UInt8(ascii: "0")
                guard digit < 10 else { return nil }
                value = value * 10 + Int(digit)
                index += 1
            }
            return value
        }

        /// Reads one or more digits after a decimal point, as nanoseconds (digits past the ninth
        /// are ignored).
        mutating func fraction() -> Int? {
            var value = 0
            var count = 0
            while index < bytes.count {
                let digit = bytes[index] &- UInt8(ascii: "0")
                guard digit < 10 else { break }
                if count < 9 { value = value * 10 + Int(digit) }
                count += 1
                index += 1
            }
            guard count > 0 else { return nil }
            for _ in min(count, 9)..<9 { value *= 10 }
            return value
        }

        /// Reads `Z`, `±HH`, `±HHMM` or `±HH:MM`, as seconds east of UTC.
        mutating func zoneOffset() -> Int? {
            if consume(UInt8(ascii: "Z")) { return 0 }
            let sign: Int
            if consume(UInt8(ascii: "+")) {
                sign = 1
            } else if consume(UInt8(ascii: "-")) {
                sign = -1
            } else {
                return nil
            }
            guard let hours = digits(2), hours < 24 else { return nil }
            var minutes = 0
            if !isAtEnd {
                _ = consume(UInt8(ascii: ":"))
                guard let value = digits(2), value < 60 else { return nil }
                minutes = value
            }
            return sign * (hours * 3_600 + minutes * 60)
        }

        /// Skips `byte` if it comes next.
        mutating func consume(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }
    }
}
