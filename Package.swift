// swift-tools-version:6.1
import PackageDescription

// Dependencies run one way: KeychainModel is pure Swift and shared by everything;
// only KeychainCrypto imports libsodium and only KeychainStorage imports SQLite;
// KeychainStore is the SecItem engine built on the three; executables are thin mains.
let package = Package(
    name: "keychaind",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "keychaind", targets: ["Keychaind"]),
        .executable(name: "keychain", targets: ["keychain"]),
        .executable(name: "keychain-bench", targets: ["keychain-bench"]),
        .library(name: "KeychainClient", targets: ["KeychainClient"]),
        .library(name: "KeychainStore", targets: ["KeychainStore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
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
        .target(name: "KeychainModel"),
        .target(name: "KeychainCrypto", dependencies: ["CSodium", "KeychainModel"]),
        .target(name: "KeychainStorage", dependencies: ["CSQLite", "KeychainModel"]),
        .target(
            name: "KeychainStore",
            dependencies: ["KeychainModel", "KeychainCrypto", "KeychainStorage"]
        ),
        // Linux calls Swift's Glibc module lacks (SO_PEERCRED, prctl): used by the daemon only.
        .target(name: "CSystemShim"),
        // Wire format and socket I/O, shared by daemon and client (no crypto, no storage).
        .target(name: "KeychainProtocol", dependencies: ["KeychainModel"]),
        .target(
            name: "KeychainServer",
            dependencies: [
                "KeychainStore", "KeychainProtocol", "KeychainCrypto", "CSystemShim",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "KeychainClient", dependencies: ["KeychainProtocol", "KeychainModel"]),
        .target(
            name: "KeychainCLI",
            dependencies: ["KeychainClient", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "Keychaind",
            dependencies: ["KeychainServer", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(name: "keychain", dependencies: ["KeychainCLI"]),
        .executableTarget(name: "keychain-bench", dependencies: ["KeychainClient"]),
        .testTarget(name: "KeychainModelTests", dependencies: ["KeychainModel"]),
        .testTarget(name: "KeychainCryptoTests", dependencies: ["KeychainCrypto"]),
        // Spawns the real keychaind and keychain binaries; depends on them so they are built.
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["KeychainClient", "KeychainProtocol", "Keychaind", "keychain"]
        ),
        .testTarget(name: "KeychainServerTests", dependencies: ["KeychainServer"]),
        .testTarget(
            name: "KeychainStoreTests",
            dependencies: ["KeychainStore", "KeychainStorage", "KeychainCrypto"]
        ),
    ]
)
