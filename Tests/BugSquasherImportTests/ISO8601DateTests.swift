import BugSquasherGraph
import BugSquasherImport
import Foundation
import Testing

@Suite struct ISO8601DateTests {
    private func seconds(_ text: String) -> Double? {
        ISO8601Date.parse(text)?.timeIntervalSince1970
    }

    @Test func parsesJiraTimestamps() {
        #expect(seconds("2011-04-15T02:23:39.000+0000") == 1_302_834_219)
        #expect(seconds("2012-05-16T07:56:13.000+0000") == 1_337_154_973)
    }

    @Test func acceptsZoneVariants() {
        #expect(seconds("2011-04-15T02:23:39Z") == 1_302_834_219)
        #expect(seconds("2011-04-15T02:23:39.000Z") == 1_302_834_219)
        #expect(seconds("2011-04-15T03:23:39+01:00") == 1_302_834_219)
        #expect(seconds("2011-04-15T03:23:39.000+0100") == 1_302_834_219)
        #expect(seconds("2011-04-14T21:23:39-0500") == 1_302_834_219)
        #expect(seconds("2011-04-15T04:23:39+02") == 1_302_834_219)
        #expect(seconds("2011-04-15T02:23Z") == 1_302_834_180)
    }

    @Test func readsFractionalSeconds() throws {
        #expect(seconds("2011-04-15T02:23:39.5Z") == 1_302_834_219.5)
        #expect(seconds("1970-01-01T00:00:00.250+0000") == 0.25)
        // Date counts from 2001, so far from it a nanosecond is below a Double's precision.
        let nanoseconds = try #require(seconds("2001-01-01T00:00:00.123456789123Z"))
        #expect(abs(nanoseconds - 978_307_200.123456789) < 1e-6)
    }

    @Test func readsPlainDatesAsMidnightUTC() {
        #expect(seconds("2011-04-15") == 1_302_825_600)
        #expect(seconds("1970-01-01") == 0)
        #expect(seconds("2012-02-29") == 1_330_473_600)
        #expect(seconds("2000-03-01") == 951_868_800)
        #expect(seconds("1900-01-01") == -2_208_988_800)
        #expect(seconds("1969-12-31T23:59:59Z") == -1)
    }

    @Test func agreesWithCalendarOverManyDays() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        var day = try #require(calendar.date(from: DateComponents(year: 1999, month: 12, day: 25)))
        for _ in 0..<800 {
            let parts = calendar.dateComponents([.year, .month, .day], from: day)
            let text = "\(parts.year!)-\(twoDigits(parts.month!))-\(twoDigits(parts.day!))T12:34:56.000+0000"
            #expect(ISO8601Date.parse(text) == day.addingTimeInterval(12 * 3_600 + 34 * 60 + 56), "\(text)")
            day = day.addingTimeInterval(86_400)
        }
    }

    private func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// From year 1 to 9999, before 1970 and before 1582 included.
    @Test("what format writes, parse reads back as the same instant")
    func formatsWhatItParses() throws {
        for text in [
            "0001-01-01T00:00:00Z", "0001-03-01T00:00:00Z", "1500-03-01T12:00:00Z", "1582-10-10T00:00:00Z",
            "1600-02-29T12:00:00Z", "1969-12-31T23:59:59Z",
            "1970-01-01T00:00:00Z", "2000-02-29T23:59:59Z", "2024-02-29T22:59:59Z", "9999-12-31T23:59:59Z",
        ] {
            let date = try #require(ISO8601Date.parse(text), "\(text)")
            #expect(ISO8601Date.format(date) == text)
        }
        let withFraction = try #require(ISO8601Date.parse("2024-02-29T23:59:59.250+01:00"))
        #expect(ISO8601Date.format(withFraction, fractionalSeconds: true) == "2024-02-29T22:59:59.250Z")
        #expect(
            ISO8601Date.format(Date(timeIntervalSince1970: -0.5), fractionalSeconds: true) == "1969-12-31T23:59:59.500Z"
        )
        // Milliseconds come back as written, not one less (a Double holds .003 as 0.00299…),
        // so reading a date and writing it back changes nothing.
        for text in [
            "2100-03-03T03:03:03.003Z", "2024-01-01T00:00:00.001Z", "2011-04-15T02:23:39.123Z",
            "1969-12-31T23:59:59.999Z",
            "1500-03-01T12:00:00.007Z", "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00.001Z",
        ] {
            let date = try #require(ISO8601Date.parse(text), "\(text)")
            #expect(ISO8601Date.format(date, fractionalSeconds: true) == text)
        }
        #expect(
            ISO8601Date.format(Date(timeIntervalSince1970: 59.9996), fractionalSeconds: true)
                == "1970-01-01T00:01:00.000Z")
        // Day by day over 1,200 years around 1582 and 1970, and against Foundation after 1582.
        for day in stride(from: -700_000, through: 30_000, by: 37) {
            let date = Date(timeIntervalSince1970: Double(day) * 86_400 + 3_723)
            #expect(ISO8601Date.parse(ISO8601Date.format(date)) == date)
            if day > -141_427 { #expect(ISO8601Date.format(date) == date.formatted(.iso8601)) }
        }
    }

    @Test(arguments: [
        "", "garbage", "2011", "2011-04", "2011-4-15", "2011-13-01", "2011-00-10", "2011-02-29",
        "2011-04-31", "2011-04-00", "2011-04-15T", "2011-04-15T02:23:39", "2011-04-15T02:23:39.000",
        "2011-04-15T24:00:00Z", "2011-04-15T02:60:00Z", "2011-04-15T02:23:61Z", "2011-04-15 02:23:39Z",
        "2011-04-15T02:23:39.Z", "2011-04-15T02:23:39+01:", "2011-04-15T02:23:39+1", "2011-04-15T02:23:39ZZ",
        "2011-04-15T02:23:39.000+0000 ", " 2011-04-15", "2011-04-15x", "２０１１-04-15", "2020-02-30T00:00:00Z",
        "2021-02-29T12:00:00Z", "99999-01-01T00:00:00Z", "1500-02-29T12:00:00Z",
    ])
    func rejectsInvalidText(_ text: String) {
        #expect(ISO8601Date.parse(text) == nil)
    }

    /// Also when only the zone takes them there.
    @Test("instants outside years 0001 to 9999 UTC are refused, not called malformed")
    func refusesInstantsOutsideFourDigitYears() throws {
        for text in [
            "0000-01-01T00:00:00.000+0000", "0000-12-31T23:59:59Z", "0001-01-01T00:00:00.000+0100",
            "9999-12-31T23:59:59.000-1400", "9999-12-31T23:00:00-02:00",
        ] {
            #expect(ISO8601Date.parse(text) == nil, "\(text)")
            #expect(ISO8601Date.isOutsideFourDigitYears(text), "\(text)")
        }
        for text in [
            "0001-01-01T00:00:00Z", "0001-01-01T00:00:00-0100", "9999-12-31T23:59:59.999Z", "9999-12-31T23:00:00+0100",
        ] {
            let date = try #require(ISO8601Date.parse(text), "\(text)")
            #expect(
                ISO8601Date.parse(ISO8601Date.format(date, fractionalSeconds: true)) != nil,
                "\(text) is written back in a form read again")
            #expect(!ISO8601Date.isOutsideFourDigitYears(text))
        }
        #expect(!ISO8601Date.isOutsideFourDigitYears("2011-02-30"))
        #expect(ISO8601Date.refusal(of: "0000-06-01", otherwise: "other").contains("outside the years 0001 to 9999"))
        #expect(ISO8601Date.refusal(of: "2011-02-30", otherwise: "other") == "other")
    }

    /// With a zone when given; nothing rolled over or cut short.
    @Test("CSV tracker dates are read in Jira's and Bugzilla's forms, never guessed")
    func trackerDates() throws {
        let accepted: [(String, String)] = [
            ("2011-04-15 02:23:39", "2011-04-15T02:23:39Z"), ("2011-04-15 02:23", "2011-04-15T02:23:00Z"),
            ("2011-04-15 2:23:39", "2011-04-15T02:23:39Z"), ("2011-04-15 02:23:39 UTC", "2011-04-15T02:23:39Z"),
            ("2011-04-15 07:23:39 +0500", "2011-04-15T02:23:39Z"),
            ("2011-04-15 02:23:39.750", "2011-04-15T02:23:39.750Z"),
            ("15/Apr/11 2:23 AM", "2011-04-15T02:23:00Z"), ("15/Apr/11 2:23 PM", "2011-04-15T14:23:00Z"),
            ("15/apr/2011 14:23", "2011-04-15T14:23:00Z"), ("15/Apr/11", "2011-04-15T00:00:00Z"),
            ("2020-01-02 17:14:21+00:00", "2020-01-02T17:14:21Z"),
            ("2020-01-02 17:14:21 +00:00", "2020-01-02T17:14:21Z"),
            ("2020-01-02 12:14:21-05:00", "2020-01-02T17:14:21Z"), ("2020-01-02 17:14:21Z", "2020-01-02T17:14:21Z"),
            ("2020-01-02 17:14", "2020-01-02T17:14:00Z"), ("2020-01-02 18:14+0100", "2020-01-02T17:14:00Z"),
            ("2020-01-02 09:14:21 PST", "2020-01-02T17:14:21Z"), ("2020-07-02 10:14:21 pdt", "2020-07-02T17:14:21Z"),
            ("2020-01-02 18:14:21 CET", "2020-01-02T17:14:21Z"),
        ]
        for (text, expected) in accepted {
            #expect(TrackerDate.parse(text) == ISO8601Date.parse(expected), "\(text)")
        }
        for text in [
            "2011-04-15 02:23:99", "2011-04-15 02:xx:39", "2011-04-15 02:23:-30", "2011-04-15 1:2:3:4",
            "2011-04-15 02:23:39 CST", "2011-04-15 02:23:39 ABC",
            "2011-04-15 02:23:39 UTC extra", "2011-04-31 02:23:39", "15/Apr/11 2:xx AM", "15/Apr/11 2:-3 AM",
            "15/Apr/11 13:23 PM",
            "15/Apr/11 2:23 AM later", "+5/Apr/11", "15/Foo/11", "32/Apr/11", "2020-01-02 17:14:21+00:00 UTC",
            "2020-01-02 17:14:21+25:00",
            "2020-01-02 17:14:21+",
        ] {
            #expect(TrackerDate.parse(text) == nil, "\(text) gave \(String(describing: TrackerDate.parse(text)))")
        }
    }
}
