import BugSquasherSystemd
import Logging
import Testing

@Suite("journald fields")
struct JournalFieldTests {
    @Test("metadata keys become valid journal field names, never dropped")
    func fieldNames() {
        #expect(JournalLogHandler.fieldName("job.id") == "JOB_ID")
        #expect(JournalLogHandler.fieldName("chunk") == "CHUNK")
        #expect(JournalLogHandler.fieldName("_private") == "F_PRIVATE")
        #expect(JournalLogHandler.fieldName("3d") == "F3D")
        #expect(JournalLogHandler.fieldName("socket.address") == "SOCKET_ADDRESS")
        #expect(JournalLogHandler.fieldName("ünïcode-key") == "F_N_CODE_KEY")
        #expect(JournalLogHandler.fieldName("") == "EMPTY")
        for key in ["a", "a.b.c", "-", "x y", "9", "__", String(repeating: "k", count: 100)] {
            let name = JournalLogHandler.fieldName(key)
            #expect(!name.isEmpty && name.count <= 64)
            #expect(name.allSatisfy { ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" })
            #expect(name.first != "_" && !(name.first?.isNumber ?? true))
        }
    }

    @Test("levels map to syslog priorities")
    func priorities() {
        let expected: [Logger.Level: Int] = [
            .trace: 7, .debug: 7, .info: 6, .notice: 5, .warning: 4, .error: 3, .critical: 2,
        ]
        for (level, priority) in expected { #expect(JournalLogHandler.priority(level) == priority) }
    }

    @Test("the journal is used only when JOURNAL_STREAM names stderr")
    func detection() {
        #expect(!JournalLogHandler.shouldUse(environment: [:]))
        #expect(!JournalLogHandler.shouldUse(environment: ["JOURNAL_STREAM": "1:2"]))
        #expect(!JournalLogHandler.shouldUse(environment: ["JOURNAL_STREAM": "garbage"]))
        #expect(!SystemdNotifier(environment: [:]).isEnabled)
        #expect(!SystemdNotifier(environment: [:]).notify("READY=1"))
    }
}
