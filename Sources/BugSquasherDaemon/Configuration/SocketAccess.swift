import Foundation

/// Who may reach squasherd's two sockets, checked before they are served: the write socket
/// takes imports, edits and deletions, so one every user may connect to is worth a warning, and
/// sockets passed with swapped names are refused.
///
/// ```swift
/// let access = SocketAccess.passed(read: "/run/squasherd/squasherd.sock", write: "/run/squasherd/squasherd-write.sock")
/// if let refusal = access.refusal { fatalError(refusal) }
/// ```
public struct SocketAccess: Sendable, Equatable {
    /// Why the sockets must not be served as they are; `nil` when they may be.
    public var refusal: String?
    /// What is served but most likely a mistake.
    public var warnings: [String] = []

    /// The sockets a service manager passed, by their paths. Names swapped in the units
    /// (`FileDescriptorName=`) would serve imports, edits and deletions on the socket every user
    /// may connect to: refused when the socket named "write" has the read socket's file name, or
    /// the one named "read" the write socket's, or when the one named "write" lets every user
    /// connect and the one named "read" does not.
    public static func passed(read: String?, write: String?) -> SocketAccess {
        let fileName = { (path: String?) in path.map { ($0 as NSString).lastPathComponent } }
        let modes = (read: read.flatMap(mode(of:)), write: write.flatMap(mode(of:)))
        let describe = { (path: String?, mode: Int?) in
            "\(path ?? "an unnamed socket")\(mode.map { ", mode " + String($0, radix: 8) } ?? "")"
        }
        let looksSwapped =
            fileName(write) == "squasherd.sock" || fileName(read) == "squasherd-write.sock"
            || (modes.write.map(isOpenToAll) == true && modes.read.map(isOpenToAll) == false)
        if looksSwapped {
            return SocketAccess(
                refusal:
                    "The socket named \"write\" (\(describe(write, modes.write))) looks like the read socket and the one named \"read\" (\(describe(read, modes.read))) like the write socket: are FileDescriptorName= swapped in the .socket units? Serving them so would let every user import, edit and delete bugs. Name the socket for imports and edits \"write\" (SocketMode=0660) and the other \"read\"."
            )
        }
        guard let mode = modes.write, isOpenToAll(mode) else { return SocketAccess() }
        return SocketAccess(warnings: [
            "The write socket \(describe(write, mode)) lets every user of this machine connect, and so import, edit and delete bugs. Give it SocketMode=0660 and a group for importers (SocketGroup=)."
        ])
    }

    /// The sockets squasherd binds itself, with the modes of its configuration: a write socket
    /// every user may connect to, or a socket no one but root may connect to, is warned about.
    public static func bound(readMode: Int, writeMode: Int) -> SocketAccess {
        var access = SocketAccess()
        if isOpenToAll(writeMode) {
            access.warnings.append(
                "write_socket_mode \(String(writeMode, radix: 8)) lets every user of this machine connect to the write socket, and so import, edit and delete bugs. The default, 660, lets the daemon's group in."
            )
        }
        for (key, mode) in [("read_socket_mode", readMode), ("write_socket_mode", writeMode)] where mode & 0o222 == 0 {
            access.warnings.append(
                "\(key) \(String(mode, radix: 8)) gives no one write permission on the socket, which connecting needs: only root can connect."
            )
        }
        return access
    }

    /// Whether every user may connect to a Unix socket with these permissions (connecting needs
    /// write permission).
    static func isOpenToAll(_ mode: Int) -> Bool { mode & 0o002 != 0 }

    /// The permission bits of the file at `path`.
    static func mode(of path: String) -> Int? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return Int(status.st_mode) & 0o777
    }
}
