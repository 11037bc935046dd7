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
        .library(name: "KeychainStore", targets: ["KeychainStore"]),
        .library(name: "KeychainModel", targets: ["KeychainModel"]),
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
        .executableTarget(name: "Keychaind", dependencies: ["KeychainStore"]),
        .testTarget(name: "KeychainModelTests", dependencies: ["KeychainModel"]),
        .testTarget(name: "KeychainCryptoTests", dependencies: ["KeychainCrypto"]),
        .testTarget(
            name: "KeychainStoreTests",
            dependencies: ["KeychainStore", "KeychainStorage", "KeychainCrypto"]
        ),
    ]
)
