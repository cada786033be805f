import Foundation
import Synchronization
public import Testing

/// The PostgreSQL server the tests run against: `BUGSQUASHER_POSTGRES_URL`, which
/// `scripts/test.sh` sets once it has started one. Without it, a test that needs the server says
/// so (``isAvailable()``, ``url(schemaPrefix:)``) and passes.
///
/// Every test gets schemas of its own (``newSchema(prefix:)``), which the
/// ``Trait/dropsPostgresSchemas`` trait drops when the test ends, so that a run leaves nothing on
/// a server that outlives it ([docs/TESTING.md](../../docs/TESTING.md), "On PostgreSQL").
public enum TestPostgres {
    /// The server's URL as given (such as `postgresql:///postgres?host=/tmp/…&user=postgres`);
    /// `nil` when none was.
    public static let server = ProcessInfo.processInfo.environment["BUGSQUASHER_POSTGRES_URL"]

    /// Whether a server was given; prints that the test is skipped when not.
    public static func isAvailable() -> Bool {
        if server == nil { print("skipped: BUGSQUASHER_POSTGRES_URL is not set (scripts/test.sh starts a server)") }
        return server != nil
    }

    /// The schemas handed out in the current test, which ``DropsPostgresSchemas`` drops when it
    /// ends; `nil` outside a test that has the trait.
    @TaskLocal static var handedOut: SchemaLedger?

    /// A new schema name, `prefix_`, twelve random hexadecimal digits and `suffix`, so that
    /// tests running at once share nothing. It is dropped when the test ends; a test whose suite lacks
    /// ``Trait/dropsPostgresSchemas`` records an issue, since its schemas would stay.
    public static func newSchema(prefix: String, suffix: String = "") -> String {
        let random = UUID().uuidString.filter { $0 != "-" }.prefix(12).lowercased()
        let schema = "\(prefix)_\(random)\(suffix)"
        if let handedOut {
            handedOut.record(schema)
        } else {
            Issue.record(
                "Schema \(schema) would stay on the test server: give the suite the .dropsPostgresSchemas trait.")
        }
        return schema
    }

    /// `base`, a server's URL, with `schema` as its store's schema.
    public static func url(_ base: String, schema: String) -> String {
        let encoded = schema.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? schema
        return base + (base.contains("?") ? "&" : "?") + "schema=\(encoded)"
    }

    /// The server's URL with a new schema of its own (``newSchema(prefix:)``); `nil` (said, as
    /// ``isAvailable()`` does) without a server.
    public static func url(schemaPrefix prefix: String) -> String? {
        guard isAvailable(), let server else { return nil }
        return url(server, schema: newSchema(prefix: prefix))
    }

    /// Runs `sql` on the server with `psql`, as the URL's user, and returns its output (one line
    /// a row, unaligned), or `nil`, said, when psql or the server is not there. A statement that
    /// fails throws with psql's error output.
    public static func psql(_ sql: String) async throws -> [String]? {
        guard let server, let arguments = psqlArguments(server), let psql = psqlPath else {
            print("skipped: needs BUGSQUASHER_POSTGRES_URL, psql and the URL's password_file (scripts/test.sh has all)")
            return nil
        }
        let run = try ChildProcess(
            name: "psql", executable: psql, arguments: arguments.connection + ["-v", "ON_ERROR_STOP=1", "-Atc", sql],
            environment: arguments.environment)
        let status = try await run.waitForExit()
        guard status == 0 else { throw HarnessError("psql exited with \(status) on \(sql): \(run.errorOutput)") }
        return run.output
    }

    /// Where psql is, when it is installed.
    static let psqlPath = ["/usr/bin/psql", "/usr/local/bin/psql"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// The connection arguments psql takes for a store URL: the URL without BugSquasher's own
    /// parameters (`schema`, and `password_file`, whose password goes in `PGPASSWORD`).
    static func psqlArguments(_ url: String) -> (connection: [String], environment: [String: String])? {
        guard var components = URLComponents(string: url) else { return nil }
        var environment: [String: String] = [:]
        if let file = components.queryItems?.first(where: { $0.name == "password_file" })?.value {
            guard let password = try? String(contentsOfFile: file, encoding: .utf8) else { return nil }
            environment["PGPASSWORD"] = password.trimmingCharacters(in: .newlines)
        }
        components.queryItems = components.queryItems?.filter { !["schema", "password_file"].contains($0.name) }
        if components.queryItems?.isEmpty == true { components.queryItems = nil }
        return components.string.map { ([$0], environment) }
    }

    /// Drops `schemas` and what they hold; prints what it could not drop rather than failing the
    /// test that made them.
    static func drop(_ schemas: [String]) async {
        guard !schemas.isEmpty else { return }
        let names = schemas.map { "\"\($0.replacingOccurrences(of: "\"", with: "\"\""))\"" }.joined(separator: ", ")
        do {
            if try await psql("SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \(names) CASCADE") == nil {
                print(
                    "note: the test's schemas \(names) stay on the server: psql is not installed, or the URL's password_file cannot be read"
                )
            }
        } catch {
            print("note: the test's schemas \(names) stay on the server: \(error)")
        }
    }
}

/// The schemas a test was handed, in order.
final class SchemaLedger: Sendable {
    private let schemas = Mutex<[String]>([])

    /// Adds `schema`.
    func record(_ schema: String) { schemas.withLock { $0.append(schema) } }

    /// What was recorded.
    var recorded: [String] { schemas.withLock { $0 } }
}

/// Drops the schemas each test of a suite made with ``TestPostgres/newSchema(prefix:)`` when
/// the test ends, whether it passed or threw.
public struct DropsPostgresSchemas: SuiteTrait, TestTrait, TestScoping {
    /// Applies to every test of the suite it is given to.
    public var isRecursive: Bool { true }

    /// A scope for each test case (each argument of a parameterized test), none for a suite.
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    /// Runs the test with a ledger of the schemas it makes, then drops them.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let ledger = SchemaLedger()
        var failure: (any Error)?
        do { try await TestPostgres.$handedOut.withValue(ledger) { try await function() } } catch { failure = error }
        await TestPostgres.drop(ledger.recorded)
        if let failure { throw failure }
    }
}

extension Trait where Self == DropsPostgresSchemas {
    /// Drops the PostgreSQL schemas each test makes (``TestPostgres/newSchema(prefix:)``) when it
    /// ends.
    public static var dropsPostgresSchemas: Self { DropsPostgresSchemas() }
}
