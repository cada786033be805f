import BugSquasherImport
import Foundation
import Testing

@Suite struct JiraDateTests {
    private func seconds(_ text: String) -> Double? {
        JiraDate.parse(text)?.timeIntervalSince1970
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
            #expect(JiraDate.parse(text) == day.addingTimeInterval(12 * 3_600 + 34 * 60 + 56), "\(text)")
            day = day.addingTimeInterval(86_400)
        }
    }

    private func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

    @Test(arguments: [
        "", "garbage", "2011", "2011-04", "2011-4-15", "2011-13-01", "2011-00-10", "2011-02-29",
        "2011-04-31", "2011-04-00", "2011-04-15T", "2011-04-15T02:23:39", "2011-04-15T02:23:39.000",
        "2011-04-15T24:00:00Z", "2011-04-15T02:60:00Z", "2011-04-15T02:23:61Z", "2011-04-15 02:23:39Z",
        "2011-04-15T02:23:39.Z", "2011-04-15T02:23:39+01:", "2011-04-15T02:23:39+1", "2011-04-15T02:23:39ZZ",
        "2011-04-15T02:23:39.000+0000 ", " 2011-04-15", "2011-04-15x", "２０１１-04-15",
    ])
    func rejectsInvalidText(_ text: String) {
        #expect(JiraDate.parse(text) == nil)
    }
}
