import CSystemd
import Foundation

/// Sockets passed by the service manager (`LISTEN_FDS`, `LISTEN_FDNAMES`; `sd_listen_fds(3)`).
public enum SocketActivation {
    /// The passed descriptors by name, or empty when the process was not socket-activated. The
    /// environment variables are unset afterwards (so that children do not inherit them).
    ///
    /// - Throws: ``SystemdError`` when `LISTEN_FDS` is set but cannot be read.
    public static func listeningSockets() throws -> [String: CInt] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count >= 0 else {
            throw SystemdError("Cannot read the sockets passed by systemd (LISTEN_FDS): \(String(cString: strerror(-count))).")
        }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        var sockets: [String: CInt] = [:]
        for index in 0..<Int(count) {
            let name = names?[index].map { String(cString: $0) } ?? "unknown"
            sockets[name] = SD_LISTEN_FDS_START + CInt(index)
        }
        return sockets
    }
}

/// A systemd integration failure, with what to do.
public struct SystemdError: Error, Sendable, CustomStringConvertible {
    /// What happened.
    public var message: String
    /// Creates an error.
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
