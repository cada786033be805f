// swift-tools-version:6.1
import PackageDescription

/// Compiler settings shared by every target: Swift 6 language mode plus the upcoming features
/// Hummingbird builds with, so that imports and existentials stay explicit.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "BugSquasher",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "BugSquasherGraph", targets: ["BugSquasherGraph"]),
        .library(name: "BugSquasherSQLite", targets: ["BugSquasherSQLite"]),
        .library(name: "BugSquasherModel", targets: ["BugSquasherModel"]),
        .library(name: "BugSquasherStack", targets: ["BugSquasherStack"]),
        .library(name: "BugSquasherImport", targets: ["BugSquasherImport"]),
        .executable(name: "bugsquasher-demo", targets: ["BugSquasherDemo"]),
        .executable(name: "bugsquasher-bench", targets: ["BugSquasherBench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // The object graph: model, object IDs, contexts, faults, coordinators, the incremental
        // store protocol, merge policies, did-save notifications, live queries, InMemoryStore.
        // Imports neither GRDB nor NIO.
        .target(
            name: "BugSquasherGraph",
            dependencies: [
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // SQLiteStore: the default incremental store, on GRDB (WAL, one pool per file).
        .target(
            name: "BugSquasherSQLite",
            dependencies: [
                "BugSquasherGraph",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The bug model: Bug, Comment, Component, Person, Project.
        .target(
            name: "BugSquasherModel",
            dependencies: ["BugSquasherGraph"],
            swiftSettings: strictSettings
        ),
        // PersistentStack: main and writer coordinators over one store, the four context kinds,
        // automatic smart merge.
        .target(
            name: "BugSquasherStack",
            dependencies: [
                "BugSquasherGraph",
                "BugSquasherSQLite",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // Bug-data readers (Jira REST JSON) and the chunked upsert into importer contexts.
        .target(
            name: "BugSquasherImport",
            dependencies: ["BugSquasherGraph", "BugSquasherModel"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "BugSquasherDemo",
            dependencies: [
                "BugSquasherGraph", "BugSquasherModel", "BugSquasherStack", "BugSquasherImport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "BugSquasherBench",
            dependencies: [
                "BugSquasherGraph", "BugSquasherModel", "BugSquasherStack", "BugSquasherSQLite",
                "BugSquasherImport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherGraphTests",
            dependencies: ["BugSquasherGraph", "BugSquasherModel"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherSQLiteTests",
            dependencies: ["BugSquasherGraph", "BugSquasherSQLite", "BugSquasherModel"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherModelTests",
            dependencies: ["BugSquasherGraph", "BugSquasherModel", "BugSquasherSQLite"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherStackTests",
            dependencies: ["BugSquasherGraph", "BugSquasherModel", "BugSquasherStack", "BugSquasherSQLite"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherImportTests",
            dependencies: ["BugSquasherGraph", "BugSquasherModel", "BugSquasherImport", "BugSquasherStack"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
