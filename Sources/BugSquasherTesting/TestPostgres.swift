import Foundation

/// The PostgreSQL server the tests run against: `BUGSQUASHER_POSTGRES_URL`, which
/// `scripts/test.sh` sets once it has started one. Without it, a test that needs the server says
/// so (``isAvailable()``, ``url(schemaPrefix:)``) and passes.
public enum TestPostgres {
    /// The server's URL as given (with its query, such as `?host=/tmp/…&user=postgres`); `nil`
    /// when none was.
    public static let server = ProcessInfo.processInfo.environment["BUGSQUASHER_POSTGRES_URL"]

    /// Whether a server was given; prints that the test is skipped when not.
    public static func isAvailable() -> Bool {
        if server == nil { print("skipped: BUGSQUASHER_POSTGRES_URL is not set (scripts/test.sh starts a server)") }
        return server != nil
    }

    /// The server's URL with a schema of its own, `prefix_` and twelve random characters, so that
    /// tests running at once share nothing; `nil` (said, as ``isAvailable()`` does) without a
    /// server.
    public static func url(schemaPrefix prefix: String) -> String? {
        guard isAvailable(), let server else { return nil }
        return server + "&schema=\(prefix)_\(UUID().uuidString.prefix(12).lowercased())"
    }
}
