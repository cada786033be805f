import BugSquasherJSON

/// A digest of the bytes a record was imported from, kept on its bug (`Bug.sourceDigest`), so that
/// an import meeting the very same bytes for that key again — a nightly re-import of an export in
/// which that issue did not change — skips the record without decoding or upserting it.
///
/// The digest is 64 bits of a multiply–xor hash over the bytes and a seed naming how they are
/// read (the format and the job's options): stable across runs and machines, not a cryptographic
/// hash. Why and when a record is skipped: docs/DESIGN-NOTES.md, "Unchanged records are skipped".
public enum SourceDigest {
    /// The digest of `bytes` read under `seed`.
    public static func of(_ bytes: UnsafeBufferPointer<UInt8>, seed: UInt64) -> Int64 {
        var hash = seed ^ (UInt64(bytes.count) &* 0x9E37_79B9_7F4A_7C15)
        guard let base = bytes.baseAddress else { return Int64(bitPattern: mix(hash)) }
        let raw = UnsafeRawPointer(base)
        var index = 0
        while index + 8 <= bytes.count {
            let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            // Each step is a bijection of the state for a given word and of the word for a
            // given state: two inputs that differ in one word always differ in digest.
            hash = (hash ^ word) &* 0x9FB2_1C65_1E98_DF25
            hash ^= hash >> 29
            index += 8
        }
        var tail: UInt64 = 0
        while index < bytes.count {
            tail = tail << 8 | UInt64(bytes[index])
            index += 1
        }
        hash = (hash ^ tail) &* 0x9FB2_1C65_1E98_DF25
        return Int64(bitPattern: mix(hash))
    }

    /// The seed for records read as `format`, with the options that change what a record
    /// becomes (a project given for the job, say).
    public static func seed(_ parts: [String]) -> UInt64 {
        var bytes = Array(parts.joined(separator: "\u{1F}").utf8)
        return bytes.withUnsafeMutableBufferPointer {
            UInt64(bitPattern: of(UnsafeBufferPointer($0), seed: 0x5B5B_D16E))
        }
    }

    /// The string value of the top-level `"key"` of a JSON object, read without decoding the rest
    /// (Jira puts it second); `nil` when the bytes are not such an object.
    public static func key(ofJSONObject bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var reader = JSONReader(bytes)
        guard var fields = try? reader.beginObject() else { return nil }
        while let name = try? reader.nextName(&fields) {
            if name == "key" { return (try? reader.peek()) == .string ? try? reader.string() : nil }
            guard (try? reader.skip()) != nil else { return nil }
        }
        return nil
    }

    /// Murmur3's 64-bit finalizer.
    private static func mix(_ value: UInt64) -> UInt64 {
        var x = value
        x ^= x >> 33
        x &*= 0xFF51_AFD7_ED55_8CCD
        x ^= x >> 33
        x &*= 0xC4CE_B9FE_1A85_EC53
        x ^= x >> 33
        return x
    }
}
