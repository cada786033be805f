/// Text that came from the store or the daemon, as one terminal line shows it: control
/// characters — which could move the cursor, recolour or retitle the terminal of whoever runs
/// `list` or `jobs` on data someone else imported — become visible escapes (`\n`, `\t`, `\r`,
/// `\u{1b}`), and text past `limit` characters is cut with an ellipsis.
func printable(_ text: String, limit: Int? = nil) -> String {
    var out = ""
    var count = 0
    for scalar in text.unicodeScalars {
        if let limit, count >= limit {
            out += "…"
            break
        }
        switch scalar.value {
        case 0x0A: out += "\\n"
        case 0x09: out += "\\t"
        case 0x0D: out += "\\r"
        case 0x00..<0x20, 0x7F..<0xA0: out += "\\u{\(String(scalar.value, radix: 16))}"
        default: out.unicodeScalars.append(scalar)
        }
        count += 1
    }
    return out
}
