/// Where an import job is in its life: uploading, then queued, running, and one of the three
/// final states.
///
/// The store and the wire write it as its raw value (`"running"`), which is what
/// `io.bugsquasher.Jobs` documents; Swift code compares cases.
///
/// ```swift
/// if job.state.isFinal { print("job \(job.id) \(job.state.rawValue)") }
/// ```
public enum JobState: String, Sendable, Hashable, CaseIterable, Codable {
    /// Its input is being sent; nothing of it is imported yet.
    case uploading
    /// Its input is spooled whole, and it waits for the jobs before it.
    case queued
    /// Its chunks are being imported (or were, when squasherd stopped: it resumes at the next start).
    case running
    /// Every record was read, and imported or rejected.
    case finished
    /// It stopped on an error, with the reason; what its chunks committed stays.
    case failed
    /// It was stopped on request, or its upload was abandoned; what its chunks committed stays.
    case aborted

    /// Whether the job has ended: nothing more happens to it.
    public var isFinal: Bool {
        switch self {
        case .finished, .failed, .aborted: true
        case .uploading, .queued, .running: false
        }
    }
}
