#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel

/// Where the store keeps its files and how hard the passcode key is to guess.
public struct StoreConfiguration: Sendable {
    /// Holds device.key, keychain.db and keychain.generation (mode 0700; files 0600).
    public var stateDirectory: String
    /// Argon2id cost for a passcode set or changed from now on (existing keybags keep the
    /// cost stored with them until the next change).
    public var argon2: Argon2Parameters

    public init(stateDirectory: String, argon2: Argon2Parameters = .standard) {
        self.stateDirectory = stateDirectory
        self.argon2 = argon2
    }

    /// A device key the service manager supplies (a systemd credential, decrypted by it into
    /// $CREDENTIALS_DIRECTORY): used instead of the state directory's device.key, which then
    /// must not exist or must hold the same key.
    public var deviceKeyCredential: String?

    public var databasePath: String { stateDirectory + "/keychain.db" }
    /// Where the device key is read from: the credential if there is one, else the state
    /// directory's file.
    public var deviceKeyPath: String { deviceKeyCredential ?? stateDeviceKeyPath }
    /// The device key: the credential's, or the state directory's file, made on a first start
    /// (only there: a credential is never written).
    func loadDeviceKey(firstStart: Bool) throws(KeychainError) -> SecureKey {
        if let deviceKeyCredential { return try DeviceKeyFile.loadCredential(path: deviceKeyCredential) }
        return firstStart ? try DeviceKeyFile.loadOrCreate(path: stateDeviceKeyPath)
                          : try DeviceKeyFile.loadExisting(path: stateDeviceKeyPath)
    }

    /// The device key's place in the state directory.
    public var stateDeviceKeyPath: String { stateDirectory + "/" + DeviceKeyFile.fileName }
    public var generationRecordPath: String { stateDirectory + "/" + GenerationRecordFile.fileName }
}

/// The caller's access groups, in order: the first is where items added without agrp go.
/// An empty list is a caller with no access at all (errSecMissingEntitlement).
public struct AccessScope: Sendable, Equatable {
    public let groups: [String]

    public init(groups: [String]) { self.groups = groups }

    var defaultGroup: String? { groups.first }

    /// The groups a call may touch: the one it names (if the caller has it) or all of them.
    func groups(naming explicit: String?) throws(KeychainError) -> [String] {
        guard !groups.isEmpty else {
            throw KeychainError(.missingEntitlement, "the caller has no access groups")
        }
        guard let explicit else { return groups }
        guard groups.contains(explicit) else {
            throw KeychainError(.missingEntitlement, "access group \"\(explicit)\" is not one of the caller's groups")
        }
        return [explicit]
    }
}

extension ItemStore {
    /// CFAbsoluteTime now: seconds since 2001-01-01 UTC.
    public static func absoluteTimeNow() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9 - absoluteTimeIntervalSince1970
    }
}
