import CConcurrencyHook
import Dispatch
import Foundation
import Synchronization

/// Writes an upload's spool file on a thread of its own, a buffer at a time, while the
/// ``Spooler`` inflates and splits the next part of the upload: the two no longer take turns on
/// one thread, and the upload of a gzip file takes the time of its inflating alone
/// (docs/DESIGN-NOTES.md, "An upload is inflated while its spool file is written").
///
/// At most ``depth`` buffers wait to be written (a quarter MiB each), so memory stays bounded when
/// the disk is slower than the upload: ``write(_:)`` then waits, as a write to the file would. A
/// failed write is thrown by the next ``write(_:)`` or by ``drain()``.
final class SpoolWriter: Sendable {
    /// How many buffers may wait to be written.
    static let depth = 4

    private let handle: FileHandle
    private let path: String
    private let directory: String
    private let queue = DispatchQueue(label: "squasherd.spool-write")
    private let slots = DispatchSemaphore(value: SpoolWriter.depth)
    private let state = Mutex(State())

    private struct State {
        /// The first write that failed; nothing is written after it.
        var failure: DaemonError?
        /// The bytes written so far.
        var written: Int64 = 0
        /// Up to where the file's writeback was started.
        var writebackStarted: Int64 = 0
        /// Written buffers, emptied, for ``spareBuffer()`` (fresh ones would be zeroed pages to
        /// fault in each time).
        var spares: [[UInt8]] = []
    }

    /// Writes to `handle`, the spool file at `path` in `directory` (both named in errors).
    init(handle: FileHandle, path: String, directory: String) {
        self.handle = handle
        self.path = path
        self.directory = directory
    }

    /// Hands `buffer` over to be written after the buffers before it. The caller gives up its
    /// copy (`consume`), so that the buffer comes back through ``spareBuffer()`` with its memory:
    /// a buffer still shared when it is emptied would be copied into fresh memory instead.
    ///
    /// - Throws: ``DaemonError`` when an earlier write failed.
    func write(_ buffer: consuming [UInt8]) throws {
        if let failure = state.withLock({ $0.failure }) { throw failure }
        slots.wait()
        let pending = PendingBuffer(buffer)
        queue.async { [self] in
            defer { slots.signal() }
            guard state.withLock({ $0.failure == nil }) else { return }
            do throws(DaemonError) { try perform(pending.bytes) } catch { state.withLock { $0.failure = error } }
            let spare = pending.emptied()
            state.withLock { $0.spares.append(spare) }
        }
    }

    /// A buffer on its way to the file, held by the write that carries it alone.
    private final class PendingBuffer: @unchecked Sendable {
        // Only the write's closure touches it, on the writer's queue, after `write(_:)` made it.
        private(set) var bytes: [UInt8]

        init(_ bytes: consuming [UInt8]) { self.bytes = bytes }

        /// The buffer, emptied with its capacity kept.
        func emptied() -> [UInt8] {
            var taken: [UInt8] = []
            swap(&taken, &bytes)
            taken.removeAll(keepingCapacity: true)
            return taken
        }
    }

    /// An empty buffer to gather the next output in: one written already, when there is one.
    func spareBuffer() -> [UInt8] {
        state.withLock { $0.spares.popLast() } ?? []
    }

    /// Waits until every buffer handed over is written.
    ///
    /// - Throws: ``DaemonError`` when a write failed.
    func drain() throws {
        settle()
        if let failure = state.withLock({ $0.failure }) { throw failure }
    }

    /// Waits until no write is under way, whatever became of them: before the file is closed.
    func settle() {
        queue.sync {}
    }

    private func perform(_ buffer: [UInt8]) throws(DaemonError) {
        do { try handle.write(contentsOf: buffer) } catch {
            throw DaemonError(
                "Writing the spool file \(path) failed: \(Spooler.reason(error)). Nothing was imported.",
                advice: "Check the disk of \(directory) (is it full?), then submit the file again.",
                unavailable: true)
        }
        let (written, writebackFrom) = state.withLock { state in
            state.written += Int64(buffer.count)
            return (state.written, state.writebackStarted)
        }
        // Writeback starts as the upload goes, 8 MiB at a time, so that the fsync that ends it
        // waits for the last few MiB rather than the whole file.
        if written - writebackFrom >= 8 << 20 {
            _ = bugsquasher_start_writeback(handle.fileDescriptor, writebackFrom, written - writebackFrom)
            state.withLock { $0.writebackStarted = written }
        }
        // A spool file removed meanwhile (its directory deleted or cleaned by a tmp reaper) is
        // still written to, through this handle, but nothing can read it: say so now rather
        // than after the rest of the upload.
        var status = stat()
        if fstat(handle.fileDescriptor, &status) == 0, status.st_nlink == 0 {
            throw DaemonError(
                "The spool file \(path) was removed while the upload was written to it (was \(directory) deleted or cleaned?). Nothing was imported.",
                advice: "Submit the file again.",
                unavailable: true)
        }
    }
}
