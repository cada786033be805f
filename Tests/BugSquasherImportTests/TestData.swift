import Foundation

/// Locates the shared real-data folder, `../shared/data` relative to the package root.
enum TestData {
    /// The package root: three levels above this file (`Tests/BugSquasherImportTests/TestData.swift`).
    static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The shared data folder, or `nil` (after printing why) when it is absent.
    static func folder() -> URL? {
        let folder = packageRoot.appendingPathComponent("../shared/data").standardizedFileURL
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isDirectory), isDirectory.boolValue
        else {
            print("skipped: ../shared/data not found (looked in \(folder.path))")
            return nil
        }
        return folder
    }

    /// The real sample (1,000 Jira issues), or `nil` (after printing why) when it is absent.
    static func sampleFile() -> String? {
        guard let folder = folder() else { return nil }
        let file = folder.appendingPathComponent("titanium-jira-sample.ndjson").path
        guard FileManager.default.fileExists(atPath: file) else {
            print("skipped: ../shared/data/titanium-jira-sample.ndjson not found")
            return nil
        }
        return file
    }
}
