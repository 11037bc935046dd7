import KeychainModel

/// A second way into the passcode classes, LUKS-style: the same class keys the passcode wraps,
/// wrapped again under a key derived from the user's login password, so that a login can
/// unlock the keychain (docs/security.md, "The login slot"). Kept beside the keybag record,
/// not in it: the record's format, its vectors and its readers stay as they are.
///
/// Stale when the login password changed and the slot could not follow (a reset by root, a
/// failed rewrap): its wrapped keys are then dropped, so that the old password opens nothing.
public enum LoginSlot: Sendable, Equatable {
    case current(Sealed)
    case stale

    public struct Sealed: Sendable, Equatable {
        public var salt: [UInt8]
        public var argon2: Argon2Parameters
        public var wrappedKeys: [Protection: [UInt8]]
    }

    public static let formatVersion: UInt8 = 1

    /// `none`, `current` or `stale`: the status field's words.
    public static func stateName(_ slot: LoginSlot?) -> String {
        switch slot {
        case nil: "none"
        case .current: "current"
        case .stale: "stale"
        }
    }

    public func encoded() -> [UInt8] {
        var w = ByteWriter()
        w.u8(Self.formatVersion)
        switch self {
        case .stale:
            w.u8(2)
        case .current(let sealed):
            w.u8(1)
            w.lengthPrefixed(sealed.salt)
            w.u64(sealed.argon2.opsLimit)
            w.u64(UInt64(sealed.argon2.memLimitBytes))
            w.u8(UInt8(sealed.wrappedKeys.count))
            for pdmn in sealed.wrappedKeys.keys.sorted() {
                w.u8(pdmn.keyClassNumber)
                w.lengthPrefixed(sealed.wrappedKeys[pdmn]!)
            }
        }
        return w.bytes
    }

    public init(decoding bytes: [UInt8]) throws(KeychainError) {
        var r = ByteReader(bytes, failure: .decode)
        let version = try r.u8()
        guard version == Self.formatVersion else {
            throw KeychainError(.notAvailable, "login slot version \(version) is not supported by this keychaind (supports \(Self.formatVersion))")
        }
        switch try r.u8() {
        case 2:
            self = .stale
        case 1:
            let salt = try r.lengthPrefixedArray(max: 64)
            let params = Argon2Parameters(opsLimit: try r.u64(), memLimitBytes: Int(clamping: try r.u64()))
            guard params.isValid else { throw KeychainError(.decode, "login slot Argon2id parameters are out of range") }
            var keys: [Protection: [UInt8]] = [:]
            for _ in 0..<Int(try r.u8()) {
                let number = try r.u8()
                guard let pdmn = Protection.allCases.first(where: { $0.keyClassNumber == number }), pdmn.isPasscodeProtected else {
                    throw KeychainError(.decode, "login slot names key class \(number), which it never holds")
                }
                guard keys.updateValue(try r.lengthPrefixedArray(max: 256), forKey: pdmn) == nil else {
                    throw KeychainError(.decode, "login slot names key class \(pdmn.rawValue) twice")
                }
            }
            self = .current(Sealed(salt: salt, argon2: params, wrappedKeys: keys))
        default:
            throw KeychainError(.decode, "login slot state is invalid")
        }
        guard r.isAtEnd else { throw KeychainError(.decode, "login slot has trailing bytes") }
    }
}

extension Argon2Parameters {
    /// At least as costly as both, in time and in memory: a login slot is never a cheaper
    /// guessing oracle than the passcode it sits beside.
    public func atLeast(_ other: Argon2Parameters) -> Argon2Parameters {
        Argon2Parameters(opsLimit: max(opsLimit, other.opsLimit), memLimitBytes: max(memLimitBytes, other.memLimitBytes))
    }
}

extension Keybag {
    /// A login slot wrapping every passcode class key under `password`, at `parameters` or
    /// the passcode's own cost, whichever is higher. Needs a passcode and every class loaded.
    public func sealingLoginSlot(_ password: some ContiguousByteBuffer, parameters: Argon2Parameters,
                                 deviceKey: SecureKey) throws(KeychainError) -> LoginSlot {
        guard let passcode = record.passcode else {
            throw KeychainError(.param, "no passcode is set: without one the keychain is never locked, so a login has nothing to unlock; set one with `keychain passcode set`")
        }
        var keys: [Protection: SecureKey] = [:]
        for pdmn in record.wrappedKeys.keys where pdmn.isPasscodeProtected {
            guard let key = loaded[pdmn] else {
                throw KeychainError(.interactionNotAllowed, "the keychain is locked; unlock it first")
            }
            keys[pdmn] = key
        }
        return try Self.seal(keys, password: password, parameters: parameters.atLeast(passcode.argon2), deviceKey: deviceKey)
    }

    /// The passcode classes' keys, unwrapped through `slot` with the login password: a change
    /// that loads them, as a passcode unlock's does. errSecAuthFailed for a wrong password.
    public func unlocking(through slot: LoginSlot, password: some ContiguousByteBuffer,
                          deviceKey: SecureKey) throws(KeychainError) -> KeybagChange {
        guard record.hasPasscode else { return KeybagChange(base: record, record: record) }
        let keys = try Self.open(slot, password: password, deviceKey: deviceKey)
        // A slot that does not hold every passcode class of this keybag is not this keybag's.
        for pdmn in record.wrappedKeys.keys where pdmn.isPasscodeProtected && keys[pdmn] == nil {
            throw KeychainError(.decode, "the login slot lacks the \(pdmn.rawValue) class key: remove it and add it again")
        }
        return KeybagChange(base: record, record: record, loads: keys)
    }

    /// `slot` rewrapped under `new`, after the login password changed from `old`. Loads nothing.
    public func rewrappingLoginSlot(_ slot: LoginSlot, old: some ContiguousByteBuffer, new: some ContiguousByteBuffer,
                                    parameters: Argon2Parameters, deviceKey: SecureKey) throws(KeychainError) -> LoginSlot {
        guard let passcode = record.passcode else { throw KeychainError(.param, "no passcode is set") }
        let keys = try Self.open(slot, password: old, deviceKey: deviceKey)
        return try Self.seal(keys, password: new, parameters: parameters.atLeast(passcode.argon2), deviceKey: deviceKey)
    }

    private static func seal(_ keys: [Protection: SecureKey], password: some ContiguousByteBuffer, parameters: Argon2Parameters,
                             deviceKey: SecureKey) throws(KeychainError) -> LoginSlot {
        let salt = Sodium.randomBytes(Argon2Parameters.saltBytes)
        let kek = try loginKEK(password: password, salt: salt, parameters: parameters, deviceKey: deviceKey)
        var wrapped: [Protection: [UInt8]] = [:]
        for (pdmn, key) in keys {
            wrapped[pdmn] = AEAD.seal(key, associatedData: loginAssociatedData(pdmn), key: kek,
                                      nonce: Sodium.randomBytes(AEAD.nonceBytes))
        }
        return .current(LoginSlot.Sealed(salt: salt, argon2: parameters, wrappedKeys: wrapped))
    }

    private static func open(_ slot: LoginSlot, password: some ContiguousByteBuffer,
                             deviceKey: SecureKey) throws(KeychainError) -> [Protection: SecureKey] {
        guard case .current(let sealed) = slot else {
            throw KeychainError(.notAvailable, "the login slot is stale (the login password changed without it): unlock with the passcode, then `keychain passcode login-slot add`")
        }
        let kek = try loginKEK(password: password, salt: sealed.salt, parameters: sealed.argon2, deviceKey: deviceKey)
        var keys: [Protection: SecureKey] = [:]
        for (pdmn, wrapped) in sealed.wrappedKeys {
            guard let raw = AEAD.open(wrapped, associatedData: loginAssociatedData(pdmn), key: kek),
                  raw.count == SecureKey.byteCount else {
                throw KeychainError(.authFailed, "the login password does not open the login slot")
            }
            keys[pdmn] = SecureKey(copying: raw)
        }
        return keys
    }

    /// As the passcode's KEK, under its own label: the same password in both slots gives two
    /// unrelated keys.
    private static func loginKEK(password: some ContiguousByteBuffer, salt: [UInt8], parameters: Argon2Parameters,
                                 deviceKey: SecureKey) throws(KeychainError) -> SecureKey {
        guard password.count > 0 else { throw KeychainError(.param, "the login password is empty") }
        let pk = try PasswordKDF.derive(passcode: password, salt: salt, parameters: parameters)
        var message = ByteWriter(capacity: 56)
        message.raw("keychaind/v1/login-kek".utf8)
        pk.withUnsafeBytes { message.raw($0) }
        return deviceKey.hashToKey(message.finish())
    }

    private static func loginAssociatedData(_ pdmn: Protection) -> [UInt8] {
        Array("keychaind/v1/login-slot".utf8) + [pdmn.keyClassNumber]
    }
}
