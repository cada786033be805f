import BugSquasherTesting
import Synchronization
import Testing

/// The testing kit's schemas on the test server: each test's own, gone when it ends, so that a
/// run leaves nothing on a server that outlives it.
@Suite("Testing kit: PostgreSQL schemas", .dropsPostgresSchemas)
struct TestSchemaTests {
    /// Whether `schema` is on the server.
    private func exists(_ schema: String) async throws -> Bool {
        try await TestPostgres.psql("SELECT count(*) FROM pg_namespace WHERE nspname = '\(schema)'") == ["1"]
    }

    @Test("the schemas a test made are dropped when it ends, whether it passed or threw")
    func droppedAtTheEnd() async throws {
        guard TestPostgres.isAvailable() else { return }
        let test = try #require(Test.current)
        let made = Mutex<[String]>([])
        for fails in [false, true] {
            let trait: DropsPostgresSchemas = .dropsPostgresSchemas
            let scope = try #require(trait.scopeProvider(for: test, testCase: Test.Case.current))
            let body: @Sendable () async throws -> Void = {
                let schema = TestPostgres.newSchema(prefix: "kit", suffix: #""q"#)
                made.withLock { $0.append(schema) }
                _ = try await TestPostgres.psql(#"CREATE SCHEMA "\#(schema.replacing("\"", with: "\"\""))""#)
                #expect(try await exists(schema))
                if fails { throw HarnessError("the test failed") }
            }
            if fails {
                await #expect(throws: HarnessError.self) {
                    try await scope.provideScope(for: test, testCase: Test.Case.current, performing: body)
                }
            } else {
                try await scope.provideScope(for: test, testCase: Test.Case.current, performing: body)
            }
        }
        #expect(made.withLock { $0.count } == 2)
        for schema in made.withLock({ $0 }) {
            #expect(try await !exists(schema), "\(schema) is still there")
        }
    }

    @Test("a schema URL keeps the server's parameters and adds the schema, escaped")
    func schemaURL() {
        #expect(TestPostgres.url("postgresql://u@db/bugs", schema: "t_1") == "postgresql://u@db/bugs?schema=t_1")
        #expect(
            TestPostgres.url("postgresql:///postgres?host=/tmp/pg", schema: #"t_1"q"#)
                == "postgresql:///postgres?host=/tmp/pg&schema=t_1%22q")
    }
}

/// A suite without the trait, whose schemas nothing would drop.
@Suite("Testing kit: PostgreSQL schemas without the trait")
struct UndroppedSchemaTests {
    @Test("a schema made in a suite without .dropsPostgresSchemas is a recorded issue")
    func schemaWithoutTheTrait() {
        withKnownIssue {
            _ = TestPostgres.newSchema(prefix: "kit")
        } matching: { issue in
            issue.description.contains("give the suite the .dropsPostgresSchemas trait")
        }
    }
}
