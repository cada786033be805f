import BugSquasherGraph
import Testing

@Suite("Entity descriptions")
struct EntityDescriptionTests {
    /// A repeated name is found at its first position; past 16 names too.
    @Test("a name index finds every name at its position, and no other name")
    func nameIndex() {
        let names = ["key", "title", "status", "jiraID", "type", "title", "caf\u{E9}"]
        let index = NameIndex(names)
        #expect(index["key"] == 0)
        #expect(index["title"] == 1)
        #expect(index["jiraID"] == 3)
        #expect(index["type"] == 4)
        #expect(index["caf\u{E9}"] == 6)
        // Names are told apart by their bytes, as the store's columns are: a canonically
        // equivalent spelling is another name.
        #expect(index["cafe\u{301}"] == nil)
        for missing in ["", "Key", "keys", "tit", "jiraid", "statuS"] {
            #expect(index[missing] == nil, "\(missing)")
        }
        let many = (0..<40).map { "attribute\($0)" }
        let large = NameIndex(many)
        for (position, name) in many.enumerated() {
            #expect(large[name] == position)
        }
        #expect(large["attribute40"] == nil)
        #expect(NameIndex(many + ["caf\u{E9}"])["cafe\u{301}"] == nil)
    }

    /// ASCII or not; a clean key is not stray.
    @Test("keys with whitespace at either end or a control character are stray")
    func strayCharacters() {
        for stray in [
            " TIMOB-1", "TIMOB-1 ", "\tTIMOB-1", "TIMOB-1\n", "TIM\u{1}OB-1", "TIMOB\u{7F}-1", "\u{A0}TIMOB-1",
            "TIMOB-1\u{3000}", "TIM\u{85}OB", "ÉTÉ\u{9F}",
        ] {
            #expect(EntityDescription.hasStrayCharacters(inKey: stray), "\(stray.debugDescription)")
        }
        for clean in ["", "TIMOB-1", "A", "a b", "ÉTÉ-1", "caf\u{E9}", "日本-1", "~"] {
            #expect(!EntityDescription.hasStrayCharacters(inKey: clean), "\(clean.debugDescription)")
        }
    }
}
