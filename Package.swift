// swift-tools-version:6.1
import PackageDescription

// Dependencies run one way: KeychainModel is pure Swift and shared by everything;
// only KeychainCrypto imports libsodium and only KeychainStorage imports SQLite;
// KeychainStore is the SecItem engine built on the three; executables are thin mains.
// No unsafe flags on library targets: SwiftPM refuses a package with them as a dependency, and
// KeychainClient is meant to be one. The Makefile's release and bench builds pass
// -cross-module-optimization on the command line instead (docs/performance.md).

let package = Package(
    name: "keychaind",
    products: [
        .executable(name: "keychaind", targets: ["Keychaind"]),
        .executable(name: "keychain", targets: ["keychain"]),
        .executable(name: "keychain-bench", targets: ["keychain-bench"]),
        .executable(name: "git-credential-keychain", targets: ["git-credential-keychain"]),
        .executable(name: "keychain-secret-service", targets: ["keychain-secret-service"]),
        .library(name: "KeychainClient", targets: ["KeychainClient"]),
        .library(name: "KeychainStore", targets: ["KeychainStore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // P-256 keys (issue 17) and X.509 certificates, requests and their DER.
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        // Already resolved through swift-certificates; named because KeychainCertificates
        // reads the raw DER fields Apple stores (names, serial, public key bits) itself.
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        // The daemon's metrics (issue 27), in keychaind only: the client never links them.
        // swift-metrics is swift-prometheus's own dependency (its CoreMetrics), named so that
        // the version below is the one resolved.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    // Every C module a target imports is one of its declared dependencies, not reached through
    // another target's (`grep -rh '^ *\(internal \)\?import C' Sources/T Tests/T` per target).
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // OpenSSL's libcrypto: imported only by the Secret Service's SessionCrypto (DH, HKDF, AES-CBC)
        // and KeychainCrypto's P256Signer (P-256 signatures without the import's check).
        .systemLibrary(
            name: "CLibcrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // PostgreSQL's client library: imported only by KeychainSync's PostgresConnection (docs/sync.md §10).
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        .target(name: "KeychainModel"),
        // The config file's reader: TOML 1.0.0, pure Swift, no Foundation (the daemon links it).
        .target(name: "TOML"),
        .target(
            name: "KeychainCrypto",
            dependencies: [
                "CSodium", "CLibcrypto", "KeychainModel",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
            ]
        ),
        .target(name: "KeychainStorage", dependencies: ["CSQLite", "KeychainModel"]),
        // X.509 certificates: the attributes the store derives on add. No libsodium, no
        // SQLite, so a client-side target may link it too.
        .target(
            name: "KeychainCertificates",
            dependencies: [
                "KeychainModel",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ]
        ),
        .target(
            name: "KeychainStore",
            dependencies: ["KeychainModel", "KeychainCrypto", "KeychainStorage", "KeychainCertificates"]
        ),
        // Linux calls Swift's Glibc module lacks (SO_PEERCRED, prctl, eventfd): used by the daemon, the
        // ssh-agent and KeychainSync.
        .target(name: "CSystemShim"),
        // D-Bus through sd-bus: the only target that imports CSystemd.
        .target(name: "DBus", dependencies: ["CSystemd", "KeychainModel"]),
        // Wire format and socket I/O, shared by daemon and client (no crypto, no storage).
        .target(name: "KeychainProtocol", dependencies: ["KeychainModel", "CSystemShim"]),
        .target(
            name: "KeychainServer",
            dependencies: [
                "KeychainStore", "KeychainProtocol", "KeychainCrypto", "KeychainSync", "CSystemShim", "TOML", "DBus", "PersonPrompt",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .target(name: "KeychainClient", dependencies: ["KeychainProtocol", "KeychainModel"]),
        // The SSH agent protocol over keys that stay in keychaind (docs/ssh-agent.md).
        .target(name: "SSHAgent", dependencies: ["KeychainClient", "KeychainProtocol", "KeychainModel", "CSystemShim"]),
        // Sync through PostgreSQL (issue 18, docs/sync.md): the only target that imports CLibPQ.
        .target(name: "KeychainSync", dependencies: ["CLibPQ", "CSystemShim", "KeychainModel", "KeychainCrypto", "KeychainStorage", "KeychainStore"]),
        // PKCS#10 requests in plain DER, for `keychain csr`: no swift-certificates, swift-crypto or
        // Foundation in the CLI, whose start they slowed (docs/performance.md, issue 24's floors).
        .target(name: "PKCS10", dependencies: ["KeychainModel"]),
        .target(name: "KeychainCLI", dependencies: ["KeychainClient", "PKCS10", "SSHAgent", "CSystemShim"]),
        .executableTarget(
            name: "Keychaind",
            dependencies: ["KeychainServer", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // Fully static: no dynamic loader, no libswiftCore/Foundation relocations at start-up,
        // so a whole `keychain get` costs about what `keyctl pipe` does (docs/performance.md).
        .executableTarget(
            name: "keychain", dependencies: ["KeychainCLI", "CProcessArguments"],
            linkerSettings: [.unsafeFlags(["-static-executable"])]
        ),
        // argc and argv from glibc for the static executables, so the runtime's constructor that parses
        // /proc/self/maps for them is not linked (docs/performance.md, "The CLI's start").
        .target(name: "CProcessArguments"),
        // The same CLI linked dynamically, so that tests can load a free() hook into it.
        .executableTarget(name: "keychain-dynamic", dependencies: ["KeychainCLI"]),
        // SSHAgent: the agent-signature figures speak the agent protocol to both agents.
        .executableTarget(name: "keychain-bench", dependencies: ["KeychainClient", "KeychainProtocol", "SSHAgent"]),
        .target(name: "GitCredential", dependencies: ["KeychainClient"]),
        // A person asked through pinentry (Assuan): the bridge's unlock dialog and keychaind's
        // prompts for items that ask first (issue 29).
        .target(name: "PersonPrompt", dependencies: ["KeychainModel"]),
        // The Secret Service on the session bus, served from keychaind (docs/secret-service.md).
        .target(name: "SecretService", dependencies: ["KeychainClient", "DBus", "PersonPrompt", "CLibcrypto", "CSystemShim"]),
        .executableTarget(
            name: "keychain-secret-service",
            dependencies: ["SecretService", "CSystemShim", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // Static like the CLI: git starts it for every fetch and push.
        .executableTarget(
            name: "git-credential-keychain", dependencies: ["GitCredential", "CProcessArguments"],
            linkerSettings: [.unsafeFlags(["-static-executable"])]
        ),
        // What KeychainStoreTests and KeychainSyncTests share (the store fixture, the schema history
        // their migration tests walk back): a library for test targets only, over public API, so
        // release builds it.
        .target(
            name: "StoreTestSupport", dependencies: ["KeychainStore", "KeychainStorage", "KeychainCrypto", "KeychainModel"],
            path: "Tests/StoreTestSupport"
        ),
        .testTarget(name: "KeychainModelTests", dependencies: ["KeychainModel"]),
        // Runs toml-test's cases, which scripts/fetch-toml-test puts in .build/toml-test.
        .testTarget(name: "TOMLTests", dependencies: ["TOML"]),
        .testTarget(name: "KeychainCryptoTests", dependencies: ["KeychainCrypto"]),
        // Spawns the real keychaind and keychain binaries, which `swift build --build-tests`
        // (and so `swift test`) builds with every other product. Not dependencies: the CLI's
        // static-link flags must not reach the test bundle.
        // KeychainStorage: to damage a stopped daemon's database the way a test needs.
        // KeychainStore: to run one SecItem behaviour suite against the store in process and the daemon.
        // DBus: BusConnection against a private bus.
        // CSodium: to check signatures and sealed boxes with libsodium itself.
        .testTarget(name: "IntegrationTests", dependencies: ["KeychainClient", "KeychainProtocol", "KeychainStorage", "KeychainStore", "DBus", "CSodium"]),
        // Against a throw-away PostgreSQL cluster that each test starts with scripts/pg-cluster.
        .testTarget(name: "KeychainSyncTests", dependencies: ["KeychainSync", "KeychainModel", "KeychainCrypto", "KeychainStore", "KeychainStorage", "StoreTestSupport"]),
        .testTarget(name: "SecretServiceTests", dependencies: ["SecretService", "KeychainModel"]),
        .testTarget(name: "KeychainServerTests", dependencies: [
            "KeychainServer", "KeychainProtocol", "KeychainStore", "KeychainCrypto", "KeychainModel", "DBus",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Crypto: the in-memory key source signs and verifies the way keychaind does.
        .testTarget(name: "SSHAgentTests", dependencies: [
            "SSHAgent", "KeychainModel", "KeychainProtocol", .product(name: "Crypto", package: "swift-crypto"),
        ]),
        .testTarget(
            name: "KeychainStoreTests",
            dependencies: ["KeychainStore", "KeychainStorage", "KeychainCrypto", "CSodium", "StoreTestSupport"]
        ),
        .testTarget(name: "KeychainCertificatesTests", dependencies: [
            "KeychainCertificates", "PKCS10", "KeychainModel",
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
        ]),
    ]
)
