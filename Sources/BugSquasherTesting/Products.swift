public import Foundation

/// Where the kit finds squasherd, squasherctl and the shared bug data.
public enum Products {
    /// The directory holding squasherd and squasherctl: `SQUASHERD_BUILD_DIRECTORY` when set,
    /// otherwise the nearest directory above the test binary that holds squasherd (where
    /// SwiftPM puts a package's executables).
    public static let directory: String = {
        if let given = ProcessInfo.processInfo.environment["SQUASHERD_BUILD_DIRECTORY"] { return given }
        let binary = URL(filePath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var url = binary.deletingLastPathComponent()
        // xctest bundles on Linux: .build/debug/XPackageTests.xctest is the binary itself.
        while !FileManager.default.fileExists(atPath: url.appendingPathComponent("squasherd").path), url.path != "/" {
            url = url.deletingLastPathComponent()
        }
        return url.path
    }()

    /// The squasherd executable.
    public static var squasherd: String { directory + "/squasherd" }
    /// The squasherctl executable.
    public static var squasherctl: String { directory + "/squasherctl" }

    /// The package root.
    public static let packageRoot = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `../shared/data/titanium-jira-sample.ndjson`, when present.
    public static var realSample: String? {
        let path = packageRoot.appendingPathComponent("../shared/data/titanium-jira-sample.ndjson").standardizedFileURL
            .path
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }
}
