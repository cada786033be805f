import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Testing

/// History retention (`history_retention_saves`, `history_retention_days`): a reader whose token
/// is older than the retained history is told so, explicitly, and never resumed past the gap.
@Suite("End to end: history retention")
struct HistoryRetentionTests {
    @Test("a token older than the retained history is told so, never skipped")
    func expiredTokens() async throws {
        try await withDaemon(configuration: "history_retention_saves = 2\n") { squasherd in
            let records = try squasherd.writeRecords("r.ndjson", count: 5, prefix: "R", title: "kept")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let old = try squasherd.status().token
            for n in 1...4 { try await squasherd.ctl(["update", "R-1", "title=edit \(n)"]) }
            // The daemon prunes at start, and every five minutes.
            #expect(try await squasherd.stop() == 0)
            try await squasherd.restart()
            let now = try squasherd.status().token
            let refused = try await poll(for: .seconds(30)) { () -> VarlinkError? in
                let error = try squasherd.refusal("io.bugsquasher.Changes.History", HistoryParameters(after: old))
                return error.name == "io.bugsquasher.Changes.HistoryExpired" ? error : nil
            }
            #expect(refused?.parameters["horizon"]?.intValue == now - 2, "\(String(describing: refused))")
            // Subscribe from the old token: a resync at once, saying why, from the current token.
            var replies: [SubscribeReply] = []
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Changes.Subscribe", SubscribeParameters(since: old)
            ) { reply in
                replies.append(try reply.parameters(SubscribeReply.self))
                return true
            }
            #expect(replies.map(\.event) == ["subscribed", "resync"])
            #expect(replies.last?.reason == ResyncReason.historyExpired && replies.last?.resyncFrom == now)
            // Within the retained history, a reader resumes as before.
            let recent = try squasherd.call(
                "io.bugsquasher.Changes.History", HistoryParameters(after: now - 2), as: HistoryReply.self)
            #expect(recent.saves.map(\.token) == [now - 1, now])
            // squasherctl watch says what happened and goes on from the current token.
            let watch = try squasherd.startCtl("watch", ["watch", "--since", "\(old)"])
            _ = try await watch.waitForLine { $0.contains("were pruned from the history") }
            try await squasherd.ctl(["update", "R-2", "title=after the gap"])
            _ = try await watch.waitForLine { $0.hasPrefix("token \(now + 1):") }
            watch.signal(SIGTERM)
            _ = try await watch.waitForExit()
        }
    }

    /// A subscriber that held objects before the saves it had not read were pruned: told to
    /// resync as it resubscribes, it refetches what it holds (an object deleted meanwhile as
    /// deleted) and follows on from the current token (its registrations, sent once subscribed,
    /// reach a subscription squasherd has ended).
    @Test("a subscriber resuming from before the retained history refetches what it holds")
    func subscriberResumesAfterPruning() async throws {
        try await withDaemon(configuration: "history_retention_saves = 2\n") { squasherd in
            let records = try squasherd.writeRecords("r.ndjson", count: 3, prefix: "R", title: "kept")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let subscriber = try squasherd.startSubscriber("subscriber", keys: ["R-1", "R-2"])
            _ = try await subscriber.waitForLine { $0.contains(#""event":"ready""#) && $0.contains("kept 2") }
            let gone = try #require(try squasherd.ids(of: "Bug", where: #"key == "R-2""#).first)
            // Stopped, and its connection closed by a restart, before the edits are made and
            // pruned: it resumes from the token before them.
            subscriber.signal(SIGSTOP)
            #expect(try await squasherd.stop() == 0)
            try await squasherd.restart()
            _ = try squasherd.call(
                "io.bugsquasher.Import.Delete", DeleteParameters(id: gone), as: DeleteReply.self, on: .write)
            for n in 1...4 { try await squasherd.ctl(["update", "R-1", "title=edit \(n)"]) }
            #expect(try await squasherd.stop() == 0)
            try await squasherd.restart()
            subscriber.signal(SIGCONT)
            _ = try await subscriber.waitForLine(timeout: .seconds(30)) { $0.contains("edit 4") }
            _ = try await subscriber.waitForLine(timeout: .seconds(30)) {
                $0.contains(#""deleted":["\#(gone)"]"#.replacingOccurrences(of: "/", with: #"\/"#))
                    || $0.contains(#""deleted":["\#(gone)"]"#)
            }
            try await squasherd.ctl(["update", "R-1", "title=after the gap"])
            _ = try await subscriber.waitForLine(timeout: .seconds(30)) { $0.contains("after the gap") }
            subscriber.signal(SIGTERM)
            _ = try await subscriber.waitForExit()
        }
    }
}
