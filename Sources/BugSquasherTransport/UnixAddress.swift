package import Glibc

/// Calls `body` with the address of the Unix socket at `path`, for `bind(2)`, `connect(2)` or
/// `sendto(2)`: any path a `sun_path` holds (``VarlinkServer/maximumSocketPathBytes``), where
/// NIO's `SocketAddress` stops 4 bytes short of Linux's limit.
///
/// - Throws: ``TransportError`` (``TransportError/Code/pathTooLong``) for a longer path.
package func withUnixAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) throws -> T {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count <= VarlinkServer.maximumSocketPathBytes else { throw TransportError.pathTooLong(path) }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
}
