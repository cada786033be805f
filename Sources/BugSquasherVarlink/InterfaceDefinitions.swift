import Foundation

/// The interface definitions shipped with the module (`Interfaces/*.varlink`).
public enum InterfaceDefinitions {
    /// The IDL text of an interface, or `nil` when none is shipped.
    public static func text(of interface: String) -> String? {
        guard let url = Bundle.module.url(forResource: interface, withExtension: "varlink", subdirectory: "Interfaces")
        else { return nil }
        return try? String(contentsOf: url, encoding: .utf8)
    }

    /// The names of the input parameters of each method an IDL text declares, by method name:
    /// `method Fetch(entity: string, sort: ?[]string) -> (…)` gives `Fetch: [entity, sort]`.
    public static func methodParameters(in idl: String) -> [String: Set<String>] {
        // Comments run from `#` to the end of the line (none is inside a declaration's names).
        let text = idl.split(separator: "\n", omittingEmptySubsequences: false)
            .map { line in line.firstIndex(of: "#").map { line[..<$0] } ?? line }
            .joined(separator: "\n")
        var methods: [String: Set<String>] = [:]
        var rest = Substring(text)
        while let keyword = rest.range(of: "method ") {
            rest = rest[keyword.upperBound...]
            guard let open = rest.firstIndex(of: "(") else { break }
            let name = rest[..<open].trimmingCharacters(in: .whitespacesAndNewlines)
            // The input struct: up to the parenthesis that closes this one; a parameter's name
            // is what comes before the colon in each field at its top level.
            var depth = 0
            var field = ""
            var names: Set<String> = []
            var index = open
            scan: while index < rest.endIndex {
                let character = rest[index]
                switch character {
                case "(":
                    depth += 1
                    if depth > 1 { field.append(character) }
                case ")":
                    depth -= 1
                    if depth == 0 { break scan }
                    field.append(character)
                case "," where depth == 1:
                    names.insert(Self.fieldName(field))
                    field = ""
                default:
                    field.append(character)
                }
                index = rest.index(after: index)
            }
            names.insert(Self.fieldName(field))
            names.remove("")
            methods[name] = names
            rest = index < rest.endIndex ? rest[rest.index(after: index)...] : ""
        }
        return methods
    }

    /// The name of one `name: type` field of a struct.
    private static func fieldName(_ field: String) -> String {
        String(field.prefix { $0 != ":" }).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
