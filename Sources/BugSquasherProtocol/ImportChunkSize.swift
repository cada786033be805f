/// The records per import chunk (one transaction) a job may ask for: `Import.Begin`'s
/// `chunkSize`, squasherd's `--chunk-size` and `chunk_size`, squasherctl's `--chunk-size`.
public enum ImportChunkSize {
    /// The sizes allowed.
    public static let allowed = 1...100_000
}
