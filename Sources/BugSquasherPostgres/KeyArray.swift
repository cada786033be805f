import NIOCore
import PostgresNIO

/// An `int8[]` parameter (keys, mostly), written in PostgreSQL's binary array format in one
/// pass. postgres-nio's `[Int64]` writes each element through its generic length-prefixed
/// encoder, about 780 instructions a key; every daemon screens the thousand keys of each chunk
/// another daemon imports (`PostgresStore.attachValues`), and fetches rows by key with it.
struct KeyArray: PostgresNonThrowingEncodable {
    static var psqlType: PostgresDataType { .int8Array }
    static var psqlFormat: PostgresFormat { .binary }

    let keys: [Int64]

    init(_ keys: [Int64]) { self.keys = keys }

    func encode<JSONEncoder: PostgresJSONEncoder>(
        into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>
    ) {
        // Dimensions (none when empty), no nulls, the elements' type; then the one dimension's
        // length and lower bound, and each element as its length and value.
        buffer.writeMultipleIntegers(Int32(keys.isEmpty ? 0 : 1), Int32(0), PostgresDataType.int8.rawValue)
        guard !keys.isEmpty else { return }
        buffer.writeMultipleIntegers(Int32(keys.count), Int32(1))
        let size = MemoryLayout<Int32>.size + MemoryLayout<Int64>.size
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size * keys.count) { bytes in
            var offset = 0
            for key in keys {
                bytes.storeBytes(of: Int32(MemoryLayout<Int64>.size).bigEndian, toByteOffset: offset, as: Int32.self)
                bytes.storeBytes(of: key.bigEndian, toByteOffset: offset + MemoryLayout<Int32>.size, as: Int64.self)
                offset += size
            }
            return offset
        }
    }
}
