public import BugSquasherErrors
import CSystemd
import Foundation

/// Sockets passed by the service manager (`LISTEN_FDS`, `LISTEN_FDNAMES`; `sd_listen_fds(3)`).
public enum SocketActivation {
    /// The passed descriptors with their names (`FileDescriptorName=`; "unknown" when
    /// unnamed), in the order passed, or empty when the process was not socket-activated. The
    /// environment variables are unset afterwards (so that children do not inherit them).
    ///
    /// - Throws: ``SystemdError`` when `LISTEN_FDS` is set but cannot be read.
    public static func listeningSockets() throws -> [(name: String, descriptor: CInt)] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count >= 0 else {
            throw SystemdError(
                "Cannot read the sockets passed by systemd (LISTEN_FDS): \(String(cString: strerror(-count))).")
        }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        let sockets = (0..<Int(count)).map { index in
            (
                name: names?[index].map { String(cString: $0) } ?? "unknown",
                descriptor: SD_LISTEN_FDS_START + CInt(index)
            )
        }
        for socket in sockets {
            let passed =
                "Descriptor \(socket.descriptor) passed by the service manager (LISTEN_FDS, name \(socket.name))"
            guard sd_is_socket(socket.descriptor, AF_UNSPEC, 0, -1) > 0 else {
                throw SystemdError(
                    "\(passed) is not a socket.",
                    advice:
                        "Pass sockets only: check ListenStream= in the .socket unit, or the file descriptors of whatever started squasherd."
                )
            }
            guard sd_is_socket(socket.descriptor, AF_UNSPEC, CInt(SOCK_STREAM.rawValue), -1) > 0 else {
                throw SystemdError(
                    "\(passed) is a datagram or packet socket; squasherd serves Varlink on stream sockets.",
                    advice:
                        "Use ListenStream= (not ListenDatagram= or ListenSequentialPacket=) in the .socket unit, or pass a SOCK_STREAM socket."
                )
            }
            guard sd_is_socket(socket.descriptor, AF_UNSPEC, CInt(SOCK_STREAM.rawValue), 1) > 0 else {
                throw SystemdError(
                    "\(passed) is a stream socket that is not listening (a connection, not a listening socket): with Accept=yes squasherd would be started per connection.",
                    advice: "Set Accept=no in the .socket unit, or pass a socket listen(2) was called on."
                )
            }
        }
        return sockets
    }

    /// The file system path a passed Unix socket is bound to, or `nil` for another kind of
    /// socket (an abstract or unnamed one, a network socket).
    public static func path(of descriptor: CInt) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let found = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard found == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        return path.isEmpty ? nil : path
    }
}

/// A systemd integration failure: what happened and, apart from it, what to do.
public struct SystemdError: ExplainedError, Sendable {
    /// What happened, without advice.
    public var statement: String
    /// What to do about it; empty when there is nothing to do.
    public var advice: String
    /// The statement followed by the advice.
    public var message: String { Self.joined(statement, advice) }
    /// Creates an error.
    public init(_ statement: String, advice: String = "") {
        self.statement = statement
        self.advice = advice
    }
}
