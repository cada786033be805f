import Testing

@testable import BugSquasherDaemon

@Suite("Socket access")
struct SocketAccessTests {
    /// Warned about: a write socket open to every user, or a socket no one may connect to.
    @Test("default socket modes pass; risky or unusable modes are warned about")
    func configuredModes() {
        #expect(SocketAccess.bound(readMode: 0o666, writeMode: 0o660) == SocketAccess())
        let open = SocketAccess.bound(readMode: 0o666, writeMode: 0o777)
        #expect(open.refusal == nil)
        #expect(
            open.warnings.count == 1 && open.warnings[0].contains("write_socket_mode 777 lets every user"),
            "\(open.warnings)")
        let closed = SocketAccess.bound(readMode: 0, writeMode: 0o660)
        #expect(
            closed.warnings.count == 1
                && closed.warnings[0].contains("read_socket_mode 0 gives no one write permission"), "\(closed.warnings)"
        )
    }
}
