import Foundation
import Synchronization

/// The standard streams (descriptors 0, 1 and 2) a process was started without, as in
/// `tool - <&-` or `daemon 2>&-`.
///
/// Left closed, the first file or socket the process opens takes the lowest free number, a
/// closed standard stream's: a log line would then be written into a socket, or a socket read
/// as the input. ``reopenClosed()`` puts a stand-in there first.
public enum StandardStreams {
    private static let closed = Mutex<Set<CInt>>([])

    /// Opens a stand-in on each of descriptors 0, 1 and 2 that is closed, and remembers which:
    /// `/dev/null` for input and errors, `/dev/full` for output, so that writing output to a
    /// closed standard output still fails. Call it first thing in `main`, before anything opens
    /// a descriptor.
    public static func reopenClosed() {
        for descriptor in CInt(0)...2 where fcntl(descriptor, F_GETFD) == -1 && errno == EBADF {
            // The lowest free number: the closed descriptor itself.
            let standIn =
                descriptor == 0
                ? open("/dev/null", O_RDONLY) : open(descriptor == 1 ? "/dev/full" : "/dev/null", O_WRONLY)
            guard standIn == descriptor else { continue }
            closed.withLock { _ = $0.insert(descriptor) }
        }
    }

    /// Whether standard input was closed when the process started.
    public static var inputWasClosed: Bool { closed.withLock { $0.contains(0) } }

    /// Whether standard output was closed when the process started.
    public static var outputWasClosed: Bool { closed.withLock { $0.contains(1) } }
}
