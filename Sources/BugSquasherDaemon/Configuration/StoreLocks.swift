import Foundation

/// An exclusive `flock` on `squasherd.lock` in the state directory, held for the daemon's
/// lifetime: one daemon per store.
///
/// Two daemons on one store would both resume its running import job (importing its records
/// twice) and each broadcast only its own commits to its own subscribers. The kernel releases
/// the lock when the process ends, however it ends (`kill -9` included), so a stale lock file
/// never blocks a restart; the file holds the owner's PID, for the error message.
final class StateDirectoryLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock, waiting up to `patience` for a daemon that is still exiting (a restart
    /// right after a kill).
    ///
    /// - Throws: ``DaemonError`` naming the PID of the daemon that holds it, or why the lock file
    ///   cannot be opened.
    init(directory: String, patience: Duration = .seconds(3)) async throws {
        let path = directory + "/squasherd.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw DaemonError(
                "Cannot open the lock file \(path): \(String(cString: strerror(errno))).",
                advice: "Check the state directory's permissions."
            )
        }
        let deadline = ContinuousClock.now + patience
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK, ContinuousClock.now < deadline else {
                let reason = errno == EWOULDBLOCK ? nil : String(cString: strerror(errno))
                let owner = Self.owner(fd)
                close(fd)
                if let reason { throw DaemonError("Cannot lock \(path): \(reason).") }
                throw DaemonError(
                    "Another squasherd\(owner.map { " (PID \($0))" } ?? "") is using the state directory \(directory).",
                    advice: "Stop it first, or give this daemon another --state-directory."
                )
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        descriptor = fd
    }

    deinit {
        close(descriptor)
    }

    /// The PID written in the lock file by the daemon that holds it.
    private static func owner(_ fd: Int32) -> Int? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        return Int(String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

/// An exclusive `flock` on the store file itself, followed through symlinks, held for the
/// daemon's lifetime: the state directory's lock does not see a second daemon whose own state
/// directory holds a symlink to the same file. SQLite locks with `fcntl`, which does not
/// interact with `flock` on Linux.
final class StoreFileLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock on the file at `path`, which must exist.
    ///
    /// - Throws: ``DaemonError`` when another process holds it, or the file cannot be opened.
    init(path: String) throws {
        let resolved = URL(filePath: path).resolvingSymlinksInPath().path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw DaemonError("Cannot open the store \(path) to lock it: \(String(cString: strerror(errno))).")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let busy = errno == EWOULDBLOCK
            let reason = String(cString: strerror(errno))
            close(fd)
            guard busy else { throw DaemonError("Cannot lock the store \(path): \(reason).") }
            let through = resolved == path ? "" : " (the file \(path) leads to)"
            throw DaemonError(
                "Refusing to start: another squasherd is using the store file \(resolved)\(through), from another state directory. Two daemons on one store would each resume its import and tell only their own subscribers of their commits.",
                advice: "Stop the other one, or give this daemon a store of its own."
            )
        }
        descriptor = fd
    }

    deinit {
        close(descriptor)
    }
}
