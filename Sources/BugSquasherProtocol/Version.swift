/// BugSquasher's release: what `squasherd --version` and `squasherctl --version` print, and
/// the version `org.varlink.service.GetInfo` reports.
public enum BugSquasherVersion {
    /// The version of this build, `MAJOR.MINOR.PATCH`.
    public static let current = "0.1.0"
}
