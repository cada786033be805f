import Testing

@testable import BugSquasherTransport

/// The server side of a Varlink connection, driven with plain inputs: no socket, no channel.
@Suite("Varlink connection state machine")
struct VarlinkConnectionStateMachineTests {
    typealias Machine = VarlinkConnectionStateMachine

    @Test("calls are answered one at a time; the connection stays open between them")
    func callsInTurn() {
        var machine = Machine()
        for _ in 0..<3 {
            #expect(machine.received(.call(streams: false, upgrade: false)) == .handle)
            #expect(machine.callHandled(handlerInstalled: false) == .read)
        }
        #expect(machine.state == .serving)
    }

    /// A streaming call runs until its last reply.
    @Test("a call during a streaming call closes the connection; one after it is served")
    func streaming() {
        var machine = Machine()
        #expect(machine.received(.call(streams: true, upgrade: false)) == .startStreaming(number: 1))
        #expect(machine.isStreaming)
        machine.streamEnded(1)
        #expect(machine.received(.call(streams: false, upgrade: false)) == .handle)
        _ = machine.callHandled(handlerInstalled: false)
        #expect(machine.received(.call(streams: true, upgrade: false)) == .startStreaming(number: 2))
        // The end of an earlier call (its task ending late) does not end the one running.
        machine.streamEnded(1)
        #expect(machine.state == .streaming(number: 2))
        #expect(machine.received(.call(streams: false, upgrade: false)) == .close(.callDuringStreamingCall))
        #expect(machine.state == .closed)
    }

    /// Without a handler the connection closes.
    @Test("an upgrade hands the bytes after it to the call's handler until it ends")
    func upgrade() {
        var machine = Machine()
        #expect(machine.received(.call(streams: false, upgrade: true)) == .handle)
        #expect(machine.callHandled(handlerInstalled: true) == .read)
        #expect(machine.state == .upgraded)
        #expect(machine.received(.raw) == .passToUpgradeHandler)
        #expect(machine.received(.raw) == .passToUpgradeHandler)
        #expect(machine.upgradeEnded() == .close(.upgradeEnded))
        var refused = Machine()
        _ = refused.received(.call(streams: false, upgrade: true))
        #expect(refused.callHandled(handlerInstalled: false) == .close(.rawWithoutHandler))
        #expect(refused.state == .closed)
    }

    /// Whatever state it is in; raw bytes without an upgrade close it too.
    @Test("a malformed or oversized message is answered, then the connection closes")
    func errorsClose() {
        for prepare in [[], [Machine.Input.call(streams: true, upgrade: false)]] {
            var malformed = Machine()
            var oversized = Machine()
            for input in prepare {
                _ = malformed.received(input)
                _ = oversized.received(input)
            }
            #expect(malformed.received(.malformed) == .replyMalformedThenClose)
            #expect(oversized.received(.tooLarge) == .replyTooLargeThenClose)
            #expect(malformed.state == .closed && oversized.state == .closed)
        }
        var raw = Machine()
        #expect(raw.received(.raw) == .close(.rawWithoutHandler))
        // Nothing is served once closed.
        #expect(raw.received(.call(streams: false, upgrade: false)) == .close(.alreadyClosed))
    }
}
