import BugSquasherGraph
import Foundation
import Testing

@testable import BugSquasherDaemon

/// The decisions about a daemon ID that came from elsewhere, on plain values: no store, no clock.
@Suite("Shared daemon IDs")
struct SharedIdentityCheckTests {
    let here = IdentityOrigin(machine: "m2", directory: "/var/lib/squasherd")
    let elsewhere = IdentityOrigin(machine: "m1", directory: "/var/lib/squasherd")

    func member(silentFor seconds: Double) -> StoreMember {
        StoreMember(id: "7355f5c9", host: "host-a", token: HistoryToken(rawValue: 9), behind: 0, silentFor: seconds)
    }

    @Test("an ID made here is kept as it is; one without an origin is kept and its origin recorded")
    func madeHere() {
        #expect(SharedIdentityCheck.start(recorded: here, here: here, sharesStore: true) == .keep(record: false))
        #expect(SharedIdentityCheck.start(recorded: nil, here: here, sharesStore: true) == .keep(record: true))
        // A store of its own has no other daemon to share the ID with.
        #expect(SharedIdentityCheck.start(recorded: elsewhere, here: here, sharesStore: false) == .keep(record: true))
    }

    @Test("an ID from elsewhere that a daemon still heartbeats with is renewed")
    func copyOfARunningDaemon() {
        #expect(
            SharedIdentityCheck.start(recorded: elsewhere, here: here, sharesStore: true) == .lookAgain(after: .zero))
        var check = SharedIdentityCheck()
        #expect(check.looked(at: member(silentFor: 0.8)) == .lookAgain(after: .seconds(1)))
        #expect(check.looked(at: member(silentFor: 1.8)) == .lookAgain(after: .seconds(1)))
        // A heartbeat came between the two looks.
        #expect(check.looked(at: member(silentFor: 0.4)) == .renew(sharedWith: member(silentFor: 0.4)))
    }

    @Test("an ID from elsewhere whose daemon is gone, or stops heartbeating, is kept")
    func movedDirectory() {
        var gone = SharedIdentityCheck()
        #expect(gone.looked(at: nil) == .keep(record: true))
        var silent = SharedIdentityCheck()
        #expect(silent.looked(at: member(silentFor: 3_600)) == .keep(record: true))
        // This daemon's own row, from just before a crash: its silence only grows.
        var own = SharedIdentityCheck()
        var silence = 2.5
        while case .lookAgain = own.looked(at: member(silentFor: silence)) { silence += 1 }
        #expect(own.looked(at: member(silentFor: silence)) == .keep(record: true))
        #expect(silence > StoreMember.silentAfter && silence < StoreMember.silentAfter + 2)
    }

    @Test("the origin file reads back what it wrote; a broken one reads as none")
    func originText() {
        #expect(IdentityOrigin(text: here.text) == here)
        #expect(IdentityOrigin(text: "machine=m1\n") == nil)
        #expect(IdentityOrigin(text: "") == nil)
        let origin = IdentityOrigin.here(stateDirectory: "run/../run/state")
        #expect(origin.directory == FileManager.default.currentDirectoryPath + "/run/state")
        #expect(!origin.machine.isEmpty)
    }
}
