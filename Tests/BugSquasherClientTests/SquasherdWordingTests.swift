import BugSquasherClient
import BugSquasherTransport
import Testing

/// The transport's generic errors, as squasherd's clients (squasherctl, subscribers) say them.
@Suite("Transport errors worded for squasherd")
struct SquasherdWordingTests {
    /// The code and the facts stay; wording twice changes nothing.
    @Test("a transport error is worded in squasherd's terms by its code")
    func worded() {
        let silent = TransportError.noAnswer("/run/squasherd/squasherd.sock", within: .milliseconds(500))
            .wordedForSquasherd
        #expect(silent.code == .noAnswer && silent.path == "/run/squasherd/squasherd.sock")
        #expect(
            silent.statement
                == "No answer from /run/squasherd/squasherd.sock within 0.5 s: squasherd is overloaded or stuck, or another program is listening there."
        )
        let refused = TransportError(
            .closedByPeer, "The server closed the connection on /s before answering.", path: "/s"
        ).wordedForSquasherd
        #expect(refused.statement.contains("closed the connection") && refused.statement.contains("max_connections"))
        let gone = TransportError(.peerGone, "The server went away.", path: "/s").wordedForSquasherd
        #expect(gone.statement.hasPrefix("squasherd went away while answering on /s"))
        #expect(gone.advice == "Start it again, then retry.")
        let missing = TransportError(.notFound, "Nothing is listening on /s.", path: "/s", systemError: 2)
            .wordedForSquasherd
        #expect(missing.statement == "squasherd is not listening on /s (No such file or directory).")
        #expect(missing.wordedForSquasherd.message == missing.message)
    }

    /// A reply error keeps the statement quoting what came back, and advice its thrower gave.
    @Test("a reply not from squasherd keeps its statement, and any advice it has")
    func replies() {
        let garbage = TransportError(.malformedReply, "The answer from /s to a.b.C is not a Varlink reply.", path: "/s")
            .wordedForSquasherd
        #expect(garbage.statement == "The answer from /s to a.b.C is not a Varlink reply.")
        #expect(garbage.advice == "Is squasherd listening on this path, or another program?")
        let own = TransportError(.unexpectedReply, "No rows.", advice: "Pass the path of squasherd's socket.")
            .wordedForSquasherd
        #expect(own.advice == "Pass the path of squasherd's socket.")
        let other = TransportError(.listenFailed, "Cannot bind the socket /s.", path: "/s").wordedForSquasherd
        #expect(other.message == "Cannot bind the socket /s.")
    }

    @Test("any other error is left as it is")
    func otherErrors() {
        struct Other: Error {}
        #expect(TransportError.wordForSquasherd(Other()) is Other)
        let worded = TransportError.wordForSquasherd(TransportError(.peerGone, "Gone.", path: "/s"))
        #expect((worded as? TransportError)?.statement.hasPrefix("squasherd went away") == true)
    }
}
