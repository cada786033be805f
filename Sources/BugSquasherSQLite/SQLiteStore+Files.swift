import BugSquasherGraph
import Foundation
import GRDB

// The store's files: where they are, what keeps them from being opened or written, and whether
// the path still names the file the store has open.
extension SQLiteStore {
    /// What opening the store file failed with, said for the user.
    static func openFailure(_ error: any Error, path: String) -> GraphError {
        switch error {
        case let error as DatabaseError where error.resultCode == .SQLITE_NOTADB:
            GraphError(
                .invalidStore, "\(path) is not an SQLite database.",
                advice: "Move it away, or point the store at another file.",
                cause: error)
        case let error as DatabaseError:
            sqliteOpenFailure(error, path: path, problem: openProblem(error.resultCode, path: path))
        default:
            GraphError(
                .storeIO, "Could not open the store at \(path) (\(error)).",
                advice: "Check that the directory exists and is writable by this user.", cause: error)
        }
    }

    /// What SQLite's failure to open the store file says, with why when it can be told.
    private static func sqliteOpenFailure(
        _ error: DatabaseError, path: String, problem: (statement: String, advice: String)
    ) -> GraphError {
        let sqlite = "Could not open the store at \(path) (SQLite: \(error.message ?? "\(error.resultCode)"))."
        return GraphError(
            .storeIO, problem.statement.isEmpty ? sqlite : sqlite + " " + problem.statement, advice: problem.advice,
            cause: error)
    }

    /// The file `path` names: a symlink's target (resolved also when the target does not exist
    /// yet, so a store is created where its link points), or `path` itself.
    public static func resolvedPath(_ path: String) -> String {
        if let real = realpath(path, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        // A dangling link: where it points, from the link's directory, with that resolved.
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: path) else { return path }
        let directory = (path as NSString).deletingLastPathComponent
        let absolute = target.hasPrefix("/") ? target : directory + "/" + target
        let parent = (absolute as NSString).deletingLastPathComponent
        guard let real = realpath(parent, nil) else { return absolute }
        defer { free(real) }
        return String(cString: real) + "/" + (absolute as NSString).lastPathComponent
    }

    /// The size of the file `path` names (through symlinks), or `nil` when there is none.
    static func fileSize(_ path: String) -> Int? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return Int(status.st_size)
    }

    /// Why the store at `path` (symlinks resolved) cannot be opened when it, its write-ahead
    /// log or its shared-memory index exists and is not a regular file — a directory, a FIFO,
    /// which SQLite would report as something else or block on — or `nil`.
    public static func notFilesProblem(_ path: String) -> FileProblem? {
        for (companion, what) in [
            (path, "the store"), (path + "-wal", "its write-ahead log"), (path + "-shm", "its shared-memory index"),
        ] {
            if let kind = notRegularFile(companion) {
                return FileProblem(
                    "\(companion), \(what), is \(kind), not a file",
                    remedy: "move it away, or point the store at another file")
            }
        }
        return nil
    }

    /// What `path` is when it exists and is not a regular file ("a directory", "a FIFO"), or `nil`.
    private static func notRegularFile(_ path: String) -> String? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        switch status.st_mode & S_IFMT {
        case S_IFREG: return nil
        case S_IFDIR: return "a directory"
        case S_IFIFO: return "a FIFO (named pipe)"
        case S_IFSOCK: return "a socket"
        case S_IFCHR, S_IFBLK: return "a device"
        default: return "not a regular file"
        }
    }

    /// Why SQLite could not open the store, by its result code, when it can be told (a sentence
    /// to add to the statement, or empty), and what to do.
    private static func openProblem(_ code: ResultCode, path: String) -> (statement: String, advice: String) {
        switch code.primaryResultCode {
        case .SQLITE_CORRUPT:
            (
                "The file is damaged.",
                "Restore it from a backup, or move it away to start with an empty store and re-import."
            )
        case .SQLITE_FULL: ("The disk is full.", "Free space on the file system of \(path).")
        case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN, .SQLITE_AUTH:
            attributeProblem(path).map { ($0.problem + ".", $0.advice) }
                ?? (
                    "",
                    "Check that the directory exists and that this user may write the file and its -wal and -shm companions (a -shm left read-only by another user blocks the open)."
                )
        // A full disk fails the open of a store whose log or index cannot grow as an I/O error.
        default:
            fileSystemProblem(path).map { ("The store cannot grow: \($0.problem).", $0.advice) }
                ?? attributeProblem(path).map { ($0.problem + ".", $0.advice) }
                ?? ("", "Check that the directory exists and is writable by this user, and that the disk is sound.")
        }
    }

    /// A file's device and inode: which file a path names.
    struct FileIdentity: Equatable {
        let device: UInt64
        let inode: UInt64

        init?(path: String) {
            var status = stat()
            guard stat(path, &status) == 0 else { return nil }
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
        }
    }

    /// Why the store's path no longer names the file this store has open — the file or its
    /// write-ahead log was deleted, or replaced by another — or `nil` while it does. SQLite goes
    /// on writing to the files it has open, so saves made after that would be lost with them
    /// when the store closes.
    public func fileProblem() -> String? {
        if let openedFile {
            guard let now = FileIdentity(path: url.path) else {
                let directory = url.deletingLastPathComponent().path
                if !FileManager.default.fileExists(atPath: directory) {
                    return "the directory \(directory) (with \(url.lastPathComponent) in it) was moved or removed"
                }
                return "\(url.path) was deleted"
            }
            if now != openedFile { return "\(url.path) was replaced by another file" }
        }
        if let openedLog {
            guard let now = FileIdentity(path: file + "-wal") else {
                return "the write-ahead log \(file)-wal was deleted"
            }
            if now != openedLog { return "the write-ahead log \(file)-wal was replaced by another file" }
        }
        return nil
    }

    /// Why a file at `path` (the store, or a file beside it) cannot be written, as a person acts
    /// on it: its directory is gone, its file system is mounted read-only or has no room left
    /// (no free blocks, or no free inodes for a new file), or this user lacks the permission.
    public static func whyNotWritable(_ path: String) -> FileProblem {
        let directory = URL(filePath: path).deletingLastPathComponent().path
        if !FileManager.default.fileExists(atPath: directory) {
            return FileProblem(
                "its directory \(directory) no longer exists (moved or removed?)",
                remedy: "put it back, or restore the store there")
        }
        return fileSystemProblem(path) ?? attributeProblem(path)
            ?? FileProblem(
                "\(path) is not writable by this user", remedy: "fix the permissions of the file and its directory")
    }

    /// What keeps the file system holding `path` from taking writes, as a person acts on it:
    /// mounted read-only, no free inodes, or no free blocks; `nil` when none of these.
    static func fileSystemProblem(_ path: String) -> FileProblem? {
        let directory = URL(filePath: path).deletingLastPathComponent().path
        var status = statvfs()
        guard statvfs(directory, &status) == 0 else { return nil }
        if status.f_flag & UInt(ST_RDONLY) != 0 {
            return FileProblem(
                "\(path) is on a file system mounted read-only",
                remedy: "remount it read-write, or move the state directory to a writable one")
        }
        if status.f_files > 0, status.f_favail == 0 {
            return FileProblem(
                "the file system holding \(directory) has no free inodes left (too many files on it), so no file can be created there",
                remedy: "delete files on it, or move the state directory to another file system")
        }
        if status.f_bavail == 0 {
            return FileProblem(
                "the file system holding \(directory) is full",
                remedy: "free space on it, or move the state directory to another file system")
        }
        return nil
    }

    /// Why the system failed a read or write of the store at `path` (SQLite's `SQLITE_IOERR`,
    /// extended result `code`), as a person acts on it: its file system read-only (remounted so
    /// after disk errors), full or out of inodes, or one of its files marked immutable or
    /// append-only; otherwise the disk itself, with where to look.
    static func whyInputOutputFailed(_ path: String, code: Int32) -> FileProblem {
        if let problem = fileSystemProblem(path) ?? attributeProblem(path) { return problem }
        return FileProblem(
            "the system failed a read or write of \(path) (SQLite's disk I/O error, extended code \(code))",
            remedy: "see in the kernel log (journalctl -k, or dmesg) whether the disk or its file system failed")
    }

    /// A file of the store at `path` (or its directory) marked immutable or append-only, as
    /// ``markedFile(of:)`` says it.
    static func attributeProblem(_ path: String) -> FileProblem? {
        markedFile(of: [path, path + "-wal", path + "-shm", URL(filePath: path).deletingLastPathComponent().path])
    }

    /// The first of `files` marked immutable or append-only (`chattr +i`, `+a`), which not even
    /// root may change, with the command that clears the mark as the remedy; `nil` when none is,
    /// or when the file system has no such marks.
    public static func markedFile(of files: [String]) -> FileProblem? {
        #if os(Linux)
        let getFlags: UInt = 0x8008_6601  // FS_IOC_GETFLAGS
        let (immutable, appendOnly) = (0x10, 0x20)  // FS_IMMUTABLE_FL, FS_APPEND_FL
        for file in files {
            let fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var flags = 0
            guard withUnsafeMutablePointer(to: &flags, { ioctl(fd, getFlags, $0) }) == 0 else { continue }
            if flags & (immutable | appendOnly) != 0 {
                let mark = flags & immutable != 0 ? "immutable (chattr +i)" : "append-only (chattr +a)"
                return FileProblem(
                    "\(file) is marked \(mark), so not even root may change it",
                    remedy:
                        "clear the mark with chattr -\(flags & immutable != 0 ? "i" : "a") \(file) (lsattr shows the marks)"
                )
            }
        }
        #endif
        return nil
    }

    /// Whether `path` is on a file system mounted read-only (`ST_RDONLY`), where no permission
    /// change would help.
    public static func isOnReadOnlyFileSystem(_ path: String) -> Bool {
        var status = statvfs()
        return statvfs(path, &status) == 0 && status.f_flag & UInt(ST_RDONLY) != 0
    }
}
