import BugSquasherGraph
import BugSquasherModel
import Foundation
import Testing

@Suite("Predicate syntax")
struct PredicateSyntaxTests {
    @Test("text predicates parse, print back, and coerce to the attribute types")
    func roundTrip() throws {
        let text =
            #"status == "Open" AND (priority IN ("High", "Critical") OR title CONTAINS[c] "crash") AND NOT resolution == nil"#
        let predicate = try ObjectPredicate(parsing: text)
        #expect(try ObjectPredicate(parsing: predicate.text) == predicate)
        let bug = try #require(BugModel.model.entity(named: "Bug"))
        let dated = try ObjectPredicate(parsing: #"created >= "2012-01-31T00:00:00Z" && project.key BEGINSWITH "TI""#)
            .coerced(for: bug, in: BugModel.model)
        guard case .and(let parts) = dated, case .compare(_, _, .date(let date)) = parts[0] else {
            Issue.record("\(dated)")
            return
        }
        #expect(date == Date(timeIntervalSince1970: 1_327_968_000))
        #expect(throws: GraphError.self) {
            try ObjectPredicate(parsing: "status ==").coerced(for: bug, in: BugModel.model)
        }
        #expect(throws: GraphError.self) {
            try ObjectPredicate(parsing: #"nope == "x""#).coerced(for: bug, in: BugModel.model)
        }
        #expect(throws: GraphError.self) {
            try ObjectPredicate(parsing: #"created > "yesterday""#).coerced(for: bug, in: BugModel.model)
        }
        #expect(throws: GraphError.self) { try ObjectPredicate(parsing: #"status == "Open" junk"#) }
        let relation = try ObjectPredicate(parsing: #"project == "x-bugsquasher://S/Project/p3""#).coerced(
            for: bug, in: BugModel.model)
        #expect(relation == .relationship(keyPath: "project", ObjectID(store: "S", entity: "Project", primaryKey: 3)))
    }

    /// Text in text: a number, a boolean or nil looked for, or a date or number looked in, is
    /// refused as `==` with a number is, rather than read one way by SQLite and another by
    /// PostgreSQL.
    @Test("CONTAINS, CONTAINS[c] and BEGINSWITH look for quoted text in text attributes only")
    func textOperatorsTakeText() throws {
        let bug = try #require(BugModel.model.entity(named: "Bug"))
        for text in [
            "title CONTAINS 5", "status BEGINSWITH true", "assignee.name CONTAINS[c] 5", "title CONTAINS nil",
            #"created CONTAINS "2012""#,
        ] {
            let refused = #expect(throws: GraphError.self, "\(text)") {
                try ObjectPredicate(parsing: text).coerced(for: bug, in: BugModel.model)
            }
            #expect(refused?.message.contains("looks for text in text") == true, "\(String(describing: refused))")
        }
        #expect(throws: Never.self) {
            try ObjectPredicate(parsing: #"title CONTAINS[c] "5" AND key BEGINSWITH "T""#).coerced(
                for: bug, in: BugModel.model)
        }
    }

    @Test("hostile predicate text is refused with a reason, not a crash")
    func hostileText() throws {
        let nested = String(repeating: "(", count: 100_000) + #"key == "x""# + String(repeating: ")", count: 100_000)
        #expect { try ObjectPredicate(parsing: nested) } throws: { "\($0)".contains("nested deeper than") }
        #expect { try ObjectPredicate(parsing: String(repeating: "NOT ", count: 100_000) + #"key == "x""#) } throws: {
            "\($0)".contains("nested deeper than")
        }
        // A chain of comparisons too long for SQLite's expression tree is refused, with the way out.
        let chain = (1...1_200).map { #"key == "K-\#($0)""# }.joined(separator: " OR ")
        #expect { try ObjectPredicate(parsing: chain) } throws: {
            "\($0)".contains("more than 500 comparisons") && "\($0)".contains("IN (")
        }
        #expect(throws: Never.self) {
            try ObjectPredicate(parsing: (1...500).map { #"key == "K-\#($0)""# }.joined(separator: " OR "))
        }
        // Within the limit it still parses.
        _ = try ObjectPredicate(
            parsing: String(repeating: "(", count: 60) + #"key == "x""# + String(repeating: ")", count: 60))
    }

    /// Unknown escapes and lone surrogates are refused.
    @Test("strings take JSON's escapes, print back with them, and refuse bad escapes")
    func stringEscapes() throws {
        let parsed = try ObjectPredicate(parsing: #"title == "q\"b\\s\/ \n\r\t\b\f \u00e9\u0000 \uD83D\uDC1B""#)
        #expect(
            parsed == ObjectPredicate.compare(keyPath: "title", .equal, .string("q\"b\\s/ \n\r\t\u{8}\u{C} é\u{0} 🐛")))
        // Control characters and U+0000 print as escapes, and read back the same.
        #expect(parsed.text == #"title == "q\"b\\s/ \n\r\t\b\f é\u0000 🐛""#)
        #expect(try ObjectPredicate(parsing: parsed.text) == parsed)
        #expect { try ObjectPredicate(parsing: #"title == "a\qb""#) } throws: {
            "\($0)".contains(#"unknown escape \q"#) && "\($0)".contains("character 12")
        }
        #expect { try ObjectPredicate(parsing: #"title == "\ud800""#) } throws: { "\($0)".contains("lone surrogate") }
        #expect { try ObjectPredicate(parsing: #"title == "\uDC1B\uD83D""#) } throws: {
            "\($0)".contains("lone surrogate")
        }
        #expect { try ObjectPredicate(parsing: #"title == "\u12""#) } throws: { "\($0)".contains("four hex digits") }
        #expect { try ObjectPredicate(parsing: #"title == "\u+123""#) } throws: { "\($0)".contains("four hex digits") }
        #expect { try ObjectPredicate(parsing: #"title == "abc\"#) } throws: { "\($0)".contains("unterminated") }
    }
}
