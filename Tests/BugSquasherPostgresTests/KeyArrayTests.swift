import NIOCore
import PostgresNIO
import Testing

@testable import BugSquasherPostgres

@Suite("int8[] parameters")
struct KeyArrayTests {
    /// The bytes the server reads: the same as postgres-nio's own `[Int64]` writes, empty and
    /// extreme keys included (the store's statements run with it against a server in the store
    /// suite).
    @Test("a key array is written as postgres-nio writes an [Int64]")
    func sameBytes() {
        for keys: [Int64] in [[], [1], [0, -1, .max, .min], Array(1...1_000)] {
            var ours = ByteBuffer()
            KeyArray(keys).encode(into: &ours, context: .default)
            var theirs = ByteBuffer()
            keys.encode(into: &theirs, context: .default)
            #expect(ours == theirs, "\(keys.prefix(4))")
        }
        #expect(KeyArray.psqlType == [Int64].psqlType)
        #expect(KeyArray.psqlFormat == [Int64].psqlFormat)
    }
}
