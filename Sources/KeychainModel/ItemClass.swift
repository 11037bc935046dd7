/// kSecClass values. Identity is virtual: a certificate joined with its private key.
public enum ItemClass: String, Sendable, CaseIterable, Hashable {
    case genericPassword = "genp"
    case internetPassword = "inet"
    case certificate = "cert"
    case key = "keys"
    case identity = "idnt"

    /// The classes that have rows of their own.
    public static let stored: [ItemClass] = [.genericPassword, .internetPassword, .certificate, .key]

    /// iOS defaults to WhenUnlocked, except certificates, which are public and default to Always.
    public var defaultProtection: Protection {
        self == .certificate ? .always : .whenUnlocked
    }
}

/// kSecAttrAccessible: the protection domain (pdmn) whose class key seals an item.
public enum Protection: String, Sendable, CaseIterable, Hashable, Comparable {
    case whenUnlocked = "ak"
    case afterFirstUnlock = "ck"
    case always = "dk"
    case whenUnlockedThisDeviceOnly = "aku"
    case afterFirstUnlockThisDeviceOnly = "cku"
    case alwaysThisDeviceOnly = "dku"
    case whenPasscodeSetThisDeviceOnly = "akpu"

    /// Apple's keyclass numbers (6...12), used as stable small ids in key derivation and AAD.
    public var keyClassNumber: UInt8 {
        switch self {
        case .whenUnlocked: 6
        case .afterFirstUnlock: 7
        case .always: 8
        case .whenUnlockedThisDeviceOnly: 9
        case .afterFirstUnlockThisDeviceOnly: 10
        case .alwaysThisDeviceOnly: 11
        case .whenPasscodeSetThisDeviceOnly: 12
        }
    }

    public var isThisDeviceOnly: Bool { rawValue.hasSuffix("u") }

    /// The name people read in messages and give the CLI: the case in kebab case
    /// (`when-unlocked`, `after-first-unlock-this-device-only`).
    public var name: String {
        var out = ""
        for c in "\(self)" {
            if c.isUppercase { out += "-" + c.lowercased() } else { out.append(c) }
        }
        return out
    }

    /// Class keys that a passcode protects (wrapped under the passcode-tangled key when one is
    /// set). Always keys are wrapped by the device key alone.
    public var isPasscodeProtected: Bool {
        switch self {
        case .always, .alwaysThisDeviceOnly: false
        default: true
        }
    }

    /// WhenUnlocked-style keys are purged on lock; AfterFirstUnlock and Always keys stay.
    public var isPurgedOnLock: Bool {
        switch self {
        case .whenUnlocked, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly: true
        default: false
        }
    }

    public static func < (a: Protection, b: Protection) -> Bool { a.keyClassNumber < b.keyClassNumber }
}

/// What a restore does with an item whose primary key is already taken.
public enum ConflictPolicy: String, Sendable, CaseIterable {
    /// Keep the existing item.
    case skip
    /// Replace it with the backup's.
    case replace
    /// Restore nothing at all if any item conflicts (the default).
    case fail
}
