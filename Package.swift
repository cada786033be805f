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
        .library(name: "BugSquasherPostgres", targets: ["BugSquasherPostgres"]),
        .library(name: "BugSquasherModel", targets: ["BugSquasherModel"]),
        .library(name: "BugSquasherStack", targets: ["BugSquasherStack"]),
        .library(name: "BugSquasherImport", targets: ["BugSquasherImport"]),
        .library(name: "BugSquasherVarlink", targets: ["BugSquasherVarlink"]),
        .library(name: "BugSquasherTransport", targets: ["BugSquasherTransport"]),
        .library(name: "BugSquasherClient", targets: ["BugSquasherClient"]),
        .library(name: "BugSquasherTesting", targets: ["BugSquasherTesting"]),
        .executable(name: "squasherd", targets: ["squasherd"]),
        .executable(name: "squasherctl", targets: ["squasherctl"]),
        .executable(name: "bugsquasher-demo", targets: ["BugSquasherDemo"]),
        .executable(name: "bugsquasher-bench", targets: ["BugSquasherBench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-algorithms", from: "1.2.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/adam-fowler/compress-nio", from: "1.5.0"),
        .package(url: "https://github.com/vapor/postgres-nio", exact: "1.33.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // Builds the DocC catalogues of the libraries (`swift package generate-documentation`).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // How errors are said: a statement of what happened and, apart from it, the advice.
        .target(name: "BugSquasherErrors", swiftSettings: strictSettings),
        // The object graph: model, object IDs, contexts, faults, coordinators, the incremental
        // store protocol, merge policies, did-save notifications, live queries, InMemoryStore.
        // Imports neither GRDB nor NIO.
        .target(
            name: "BugSquasherGraph",
            dependencies: [
                "BugSquasherErrors", "BugSquasherJSON",
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Algorithms", package: "swift-algorithms"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The SQL text both SQL stores build alike: quoted names, row columns, key path joins.
        .target(name: "BugSquasherSQL", dependencies: ["BugSquasherGraph"], swiftSettings: strictSettings),
        // SQLiteStore: the default incremental store, on GRDB (WAL, one pool per file).
        .target(
            name: "BugSquasherSQLite",
            dependencies: [
                "BugSquasherGraph",
                "BugSquasherSQL",
                "CSQLiteTuning",
                .product(name: "Algorithms", package: "swift-algorithms"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // PostgresStore: the incremental store on PostgreSQL, for more than one host. The only
        // module on PostgresNIO.
        .target(
            name: "BugSquasherPostgres",
            dependencies: [
                "BugSquasherErrors",
                "BugSquasherGraph",
                "BugSquasherJSON",
                "BugSquasherSQL",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // sqlite3_config, which is variadic (Swift cannot call it): SQLiteStore turns SQLite's
        // memory statistics off before the first connection opens.
        .target(name: "CSQLiteTuning", linkerSettings: [.linkedLibrary("sqlite3")]),
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
        // A streaming JSON reader and writer (no tree, no Codable) for the hot paths: import
        // records, change-feed saves, Varlink envelopes.
        .target(
            name: "BugSquasherJSON",
            swiftSettings: strictSettings
        ),
        // Bug-data readers (Jira REST JSON) and the chunked upsert into importer contexts.
        .target(
            name: "BugSquasherImport",
            dependencies: ["BugSquasherErrors", "BugSquasherGraph", "BugSquasherModel", "BugSquasherJSON", .product(name: "Algorithms", package: "swift-algorithms")],
            swiftSettings: strictSettings
        ),
        // Varlink: message framing, call/reply envelopes, org.varlink.service and the interface
        // registry, as pure logic over NIOCore byte buffers (no sockets).
        .target(
            name: "BugSquasherVarlink",
            dependencies: [
                "BugSquasherJSON",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            resources: [.copy("Interfaces")],
            swiftSettings: strictSettings
        ),
        // ISA-L's igzip (isal_inflate), about five times zlib's speed at inflating.
        .systemLibrary(
            name: "CISAL",
            pkgConfig: "libisal",
            providers: [.apt(["libisal-dev"])]
        ),
        // Inflating gzip uploads member by member, and the rules of what follows a member. The
        // only module that links ISA-L.
        .target(
            name: "BugSquasherGzip",
            dependencies: ["CISAL"],
            swiftSettings: strictSettings
        ),
        // libsystemd (sd_notify, sd_watchdog_enabled, sd_listen_fds_with_names, sd_journal_sendv).
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // systemd integration: readiness/status/watchdog notifications, socket activation, the
        // journald log handler. The only module that links libsystemd.
        .target(
            name: "BugSquasherSystemd",
            dependencies: ["BugSquasherErrors", "CSystemd", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictSettings
        ),
        // The wire types of BugSquasher's Varlink interfaces, shared by daemon and clients.
        .target(
            name: "BugSquasherProtocol",
            dependencies: ["BugSquasherErrors", "BugSquasherGraph", "BugSquasherJSON", "BugSquasherModel", "BugSquasherVarlink"],
            swiftSettings: strictSettings
        ),
        // For SingleThreadedRuntime: sets the Swift runtime's global-executor hook, which a
        // statically linked binary does not export to dlsym, names its thread, and makes its
        // wake-up pipe with pipe2 (close-on-exec from the start; the tests' child pipes too).
        .target(name: "CConcurrencyHook"),
        // The single-threaded runtime of client processes: a poll(2) run loop as Swift
        // concurrency's global executor (no NIO).
        .target(name: "BugSquasherRuntime", dependencies: ["CConcurrencyHook"], swiftSettings: strictSettings),
        // Unix-socket servers and clients that speak Varlink: the only module on NIOPosix.
        .target(
            name: "BugSquasherTransport",
            dependencies: [
                "BugSquasherErrors",
                "BugSquasherVarlink",
                "BugSquasherRuntime",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The daemon's services: store, import jobs, notification hub, Varlink method handlers.
        // Metrics: swift-metrics bootstrapped with swift-prometheus, and the HTTP endpoint that
        // serves a scrape (on an address, or on a socket systemd passes).
        .target(
            name: "BugSquasherMetrics",
            dependencies: [
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "BugSquasherDaemon",
            dependencies: [
                "BugSquasherErrors", "BugSquasherGraph", "BugSquasherModel", "BugSquasherStack", "BugSquasherSQLite",
                "BugSquasherPostgres", "BugSquasherImport", "BugSquasherJSON", "BugSquasherVarlink", "BugSquasherTransport", "BugSquasherProtocol",
                "BugSquasherMetrics", "BugSquasherGzip", "CConcurrencyHook",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The subscriber library: contexts backed by a remote store that talks to squasherd.
        .target(
            name: "BugSquasherClient",
            dependencies: [
                "BugSquasherErrors", "BugSquasherGraph", "BugSquasherModel", "BugSquasherVarlink", "BugSquasherTransport",
                "BugSquasherProtocol",
                .product(name: "Algorithms", package: "swift-algorithms"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The testing kit: a real squasherd per test (`withDaemon`), squasherctl and subscriber
        // processes, typed calls, raw sockets for hostile-client tests.
        .target(
            name: "BugSquasherTesting",
            dependencies: ["BugSquasherProtocol", "BugSquasherTransport", "BugSquasherVarlink", "CConcurrencyHook"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "squasherd",
            dependencies: [
                "BugSquasherDaemon", "BugSquasherErrors", "BugSquasherGraph", "BugSquasherModel", "BugSquasherProtocol",
                "BugSquasherSystemd", "BugSquasherTransport", "BugSquasherMetrics",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "squasherctl",
            dependencies: [
                "BugSquasherClient", "BugSquasherErrors", "BugSquasherGraph", "BugSquasherImport", "BugSquasherJSON", "BugSquasherModel", "BugSquasherVarlink", "BugSquasherTransport",
                "BugSquasherProtocol", "BugSquasherRuntime",
                .product(name: "Algorithms", package: "swift-algorithms"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "BugSquasherDemo",
            dependencies: [
                "BugSquasherGraph", "BugSquasherModel", "BugSquasherStack", "BugSquasherImport",
                .product(name: "Algorithms", package: "swift-algorithms"),
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
            dependencies: ["BugSquasherGraph", "BugSquasherSQLite", "BugSquasherPostgres", "BugSquasherModel", "BugSquasherTesting", .product(name: "GRDB", package: "GRDB.swift")],
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
            name: "BugSquasherVarlinkTests",
            dependencies: ["BugSquasherVarlink", "BugSquasherTransport", "BugSquasherJSON", "BugSquasherProtocol", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherGzipTests",
            dependencies: [
                "BugSquasherGzip", .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherSystemdTests",
            dependencies: ["BugSquasherSystemd", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherDaemonTests",
            dependencies: [
                "BugSquasherDaemon", "BugSquasherGraph", "BugSquasherModel", "BugSquasherPostgres", "BugSquasherProtocol",
                "BugSquasherTesting", .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictSettings
        ),
        // End-to-end: real squasherd and squasherctl processes on real sockets.
        .testTarget(
            name: "BugSquasherEndToEndTests",
            dependencies: [
                "BugSquasherTesting", "BugSquasherProtocol", "BugSquasherImport", "BugSquasherVarlink",
                "BugSquasherTransport", "BugSquasherClient", "BugSquasherGraph", "BugSquasherModel", "CConcurrencyHook",
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherPostgresTests",
            dependencies: [
                "BugSquasherGraph", "BugSquasherModel", "BugSquasherPostgres", "BugSquasherStack", "BugSquasherTesting",
                .product(name: "Logging", package: "swift-log"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherJSONTests",
            dependencies: ["BugSquasherJSON"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherProtocolTests",
            dependencies: ["BugSquasherGraph", "BugSquasherJSON", "BugSquasherProtocol", "BugSquasherVarlink"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherTransportTests",
            dependencies: ["BugSquasherTransport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherClientTests",
            dependencies: ["BugSquasherClient"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "BugSquasherImportTests",
            dependencies: ["BugSquasherGraph", "BugSquasherModel", "BugSquasherImport", "BugSquasherJSON", "BugSquasherStack"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
