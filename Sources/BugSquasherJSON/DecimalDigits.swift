/// Integers written as their decimal digits straight into a byte array, with no `String` made:
/// JSON output (history payloads, feed messages) and PostgreSQL's COPY text write one or more for
/// every object saved.
public enum DecimalDigits {
    /// Appends `value`'s digits, after a `-` when it is negative, to `bytes`.
    @inlinable
    public static func append(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for UInt64.max's 20
        withUnsafeMutableBytes(of: &digits) { buffer in
            var first = buffer.count
            repeat {
                first -= 1
                buffer[first] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[first...]))
        }
    }
}
