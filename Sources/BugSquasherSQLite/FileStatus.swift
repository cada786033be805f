import Foundation

/// What `stat(2)` says of the file a path names, as much as the store's checks on its file need.
struct FileStatus: Sendable {
    /// Which file a path names: the same identity is the same file, whatever was written to it.
    struct Identity: Equatable, Sendable {
        let device: UInt64
        let inode: UInt64
    }

    /// A file's size and last modification: a write changes it.
    struct Stamp: Equatable, Sendable {
        let size: Int64
        let seconds: Int
        let nanoseconds: Int
    }

    let identity: Identity
    let stamp: Stamp

    /// The status of the file at `path` (symlinks followed), or `nil` when there is none.
    init?(path: String) {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        identity = Identity(device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
        stamp = Stamp(size: Int64(status.st_size), seconds: status.st_mtim.tv_sec, nanoseconds: status.st_mtim.tv_nsec)
    }
}
