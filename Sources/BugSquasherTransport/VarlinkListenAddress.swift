import Foundation

/// Where a server listens: a path it binds itself, or a socket handed over by systemd.
public struct VarlinkListenAddress: Sendable, CustomStringConvertible {
    enum Kind: Sendable {
        case path(String, permissions: Int)
        case descriptor(CInt)
    }

    let kind: Kind

    /// The path the server binds; `nil` for an inherited socket.
    public var path: String? {
        if case .path(let path, _) = kind { return path }
        return nil
    }

    /// A Unix socket the server binds at `path` (replacing a stale socket file) and `chmod`s to
    /// `permissions` — the permissions decide who may connect.
    public static func path(_ path: String, permissions: Int) -> Self {
        .init(kind: .path(path, permissions: permissions))
    }

    /// An already bound and listening socket, such as one passed by systemd socket activation.
    public static func descriptor(_ fd: CInt) -> Self { .init(kind: .descriptor(fd)) }

    public var description: String {
        switch kind {
        case .path(let path, let permissions): "\(path) (mode \(String(permissions, radix: 8)))"
        case .descriptor(let fd): "fd \(fd)"
        }
    }
}
