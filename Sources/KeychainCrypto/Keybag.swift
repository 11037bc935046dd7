import KeychainModel

/// The persisted keybag: every class key wrapped, plus how the passcode key is derived.
/// Stored as one row in the database, so that a passcode change replaces it in a single
/// transaction: after a crash the keybag opens with the old passcode or the new, never neither.
public struct KeybagRecord: Sendable, Equatable {
    public static let currentVersion: UInt8 = 1

    /// Salt and cost of the passcode's Argon2id, or nil when no passcode is set.
    public var passcode: PasscodeParameters?
    public var wrappedKeys: [Protection: [UInt8]]

    public struct PasscodeParameters: Sendable, Equatable {
        public var salt: [UInt8]
        public var argon2: Argon2Parameters
    }

    public var hasPasscode: Bool { passcode != nil }

    public func encoded() -> [UInt8] {
        var w = ByteWriter()
        w.u8(Self.currentVersion)
        if let p = passcode {
            w.u8(1)
            w.lengthPrefixed(p.salt)
            w.u64(p.argon2.opsLimit)
            w.u64(UInt64(p.argon2.memLimitBytes))
        } else {
            w.u8(0)
        }
        w.u8(UInt8(wrappedKeys.count))
        for pdmn in wrappedKeys.keys.sorted() {
            w.u8(pdmn.keyClassNumber)
            w.lengthPrefixed(wrappedKeys[pdmn]!)
        }
        return w.bytes
    }

    public init(passcode: PasscodeParameters?, wrappedKeys: [Protection: [UInt8]]) {
        self.passcode = passcode
        self.wrappedKeys = wrappedKeys
    }

    public init(decoding bytes: [UInt8]) throws(KeychainError) {
        var r = ByteReader(bytes, failure: .decode)
        let version = try r.u8()
        guard version == Self.currentVersion else {
            throw KeychainError(.notAvailable, "keybag version \(version) is not supported by this keychaind (supports \(Self.currentVersion))")
        }
        switch try r.u8() {
        case 0: passcode = nil
        case 1:
            let salt = try r.lengthPrefixedArray(max: 64)
            let ops = try r.u64()
            let mem = try r.u64()
            let params = Argon2Parameters(opsLimit: ops, memLimitBytes: Int(clamping: mem))
            guard params.isValid else { throw KeychainError(.decode, "keybag Argon2id parameters are out of range") }
            passcode = PasscodeParameters(salt: salt, argon2: params)
        default: throw KeychainError(.decode, "keybag passcode flag is invalid")
        }
        let count = Int(try r.u8())
        var keys: [Protection: [UInt8]] = [:]
        for _ in 0..<count {
            let number = try r.u8()
            guard let pdmn = Protection.allCases.first(where: { $0.keyClassNumber == number }) else {
                throw KeychainError(.decode, "keybag names unknown key class \(number)")
            }
            guard keys.updateValue(try r.lengthPrefixedArray(max: 256), forKey: pdmn) == nil else {
                throw KeychainError(.decode, "keybag names key class \(pdmn.rawValue) twice")
            }
        }
        guard r.isAtEnd else { throw KeychainError(.decode, "keybag has trailing bytes") }
        // Every class key must be there (akpu exactly when a passcode is set): a record that
        // lost one is damaged, not a keychain where that class is merely unavailable.
        for pdmn in Protection.allCases where keys[pdmn] == nil {
            guard pdmn == .whenPasscodeSetThisDeviceOnly && passcode == nil else {
                throw KeychainError(.decode, "keybag lacks the \(pdmn.rawValue) class key")
            }
        }
        if passcode == nil && keys[.whenPasscodeSetThisDeviceOnly] != nil {
            throw KeychainError(.decode, "keybag holds an akpu key without a passcode")
        }
        wrappedKeys = keys
    }
}

/// The class keys in memory, and the rules for wrapping them (docs/security.md):
/// passcode classes under KEK = BLAKE2b(DK, "keychaind/v1/kek" || Argon2id(passcode)) when a
/// passcode is set, else under the device-derived wrap key; Always classes under the
/// device-derived key only. A value type: each operation returns the new record to persist,
/// and the caller adopts the new state only once that record is durable.
public struct Keybag: Sendable {
    /// Keys derived from the device key.
    private let wrapKey: SecureKey
    /// Class keys currently loaded; a class not here is unavailable (errSecInteractionNotAllowed).
    public private(set) var loaded: [Protection: SecureKey] = [:]
    public private(set) var record: KeybagRecord

    public init(deviceKey: SecureKey, record: KeybagRecord) throws(KeychainError) {
        self.wrapKey = Self.deviceWrapKey(deviceKey)
        self.record = record
        // Always keys load at start; with no passcode everything does.
        for (pdmn, wrapped) in record.wrappedKeys where !pdmn.isPasscodeProtected || !record.hasPasscode {
            loaded[pdmn] = try unwrap(wrapped, pdmn: pdmn, with: wrapKey, passcodeWrapped: false)
        }
    }

    /// A new keybag: fresh random class keys, no passcode (so no akpu key: that class cannot
    /// exist without a passcode).
    public static func create(deviceKey: SecureKey) throws(KeychainError) -> Keybag {
        let wrapKey = deviceWrapKey(deviceKey)
        var wrapped: [Protection: [UInt8]] = [:]
        for pdmn in Protection.allCases where pdmn != .whenPasscodeSetThisDeviceOnly {
            wrapped[pdmn] = wrap(SecureKey.random(), pdmn: pdmn, with: wrapKey, passcodeWrapped: false)
        }
        return try Keybag(deviceKey: deviceKey, record: KeybagRecord(passcode: nil, wrappedKeys: wrapped))
    }

    public func key(for pdmn: Protection) -> SecureKey? { loaded[pdmn] }

    /// Unwraps the passcode classes. Wrong passcode: errSecAuthFailed, nothing changes.
    public mutating func unlock(passcode: some ContiguousByteBuffer, deviceKey: SecureKey) throws(KeychainError) {
        try apply(unlocking(passcode: passcode, deviceKey: deviceKey))
    }

    /// Drops the WhenUnlocked-style class keys (ak, aku, akpu): their guarded memory is zeroed
    /// and freed once no call is still using them.
    public mutating func purgeWhenUnlockedKeys() {
        for pdmn in Protection.allCases where pdmn.isPurgedOnLock { loaded[pdmn] = nil }
    }

    /// Drops every loaded class key for which `mayHold` says no: how the daemon makes the
    /// keybag agree with its lock state after every event.
    public mutating func keepOnly(_ mayHold: (Protection) -> Bool) {
        for pdmn in Array(loaded.keys) where !mayHold(pdmn) { loaded[pdmn] = nil }
    }

    /// Sets a passcode where there was none. Needs every class key loaded; creates the akpu key.
    public mutating func setPasscode(_ passcode: some ContiguousByteBuffer, parameters: Argon2Parameters, deviceKey: SecureKey) throws(KeychainError) {
        try apply(settingPasscode(passcode, parameters: parameters, deviceKey: deviceKey))
    }

    /// Replaces the passcode. Items are untouched: only the class keys are rewrapped. The
    /// keychain stays exactly as locked as it was (docs/security.md, "A passcode change never
    /// unlocks").
    public mutating func changePasscode(old: some ContiguousByteBuffer, new: some ContiguousByteBuffer, parameters: Argon2Parameters, deviceKey: SecureKey) throws(KeychainError) {
        try apply(changingPasscode(old: old, new: new, parameters: parameters, deviceKey: deviceKey))
    }

    /// Removes the passcode: passcode classes go back under the device key and the akpu key is
    /// destroyed (the caller deletes the akpu items in the same transaction).
    public mutating func removePasscode(current: some ContiguousByteBuffer, deviceKey: SecureKey) throws(KeychainError) {
        try apply(removingPasscode(current: current, deviceKey: deviceKey))
    }

    // MARK: passcode operations in two steps

    // Each operation is computed from a copy of the keybag (Argon2id: about half a second at
    // the default cost) by whoever holds that copy, without the store's lock, then applied
    // to the live keybag under it: the lock is held for microseconds, not for Argon2id.

    /// The passcode classes' keys, unwrapped. Wrong passcode: errSecAuthFailed. Without a
    /// passcode there is nothing to unwrap: a change that does nothing.
    public func unlocking(passcode: some ContiguousByteBuffer, deviceKey: SecureKey) throws(KeychainError) -> KeybagChange {
        guard record.hasPasscode else { return KeybagChange(base: record, record: record) }
        return KeybagChange(base: record, record: record, loads: try unwrapPasscodeClasses(passcode, deviceKey: deviceKey))
    }

    /// The record with `passcode` set where there was none, and a new akpu key. Needs every
    /// class key loaded.
    public func settingPasscode(_ passcode: some ContiguousByteBuffer, parameters: Argon2Parameters, deviceKey: SecureKey) throws(KeychainError) -> KeybagChange {
        guard !record.hasPasscode else {
            throw KeychainError(.param, "a passcode is already set; change it instead")
        }
        try requireAllPasscodeClassesLoaded()
        let akpu = SecureKey.random()
        var keys = loaded
        keys[.whenPasscodeSetThisDeviceOnly] = akpu
        return KeybagChange(base: record, record: try rewrapped(keys, passcode: passcode, parameters: parameters, deviceKey: deviceKey),
                            loads: [.whenPasscodeSetThisDeviceOnly: akpu])
    }

    /// The record with the class keys rewrapped under `new`. It loads nothing: the old
    /// passcode unwraps the keys into a copy that is rewrapped and dropped, so the keychain
    /// stays exactly as locked as it was.
    public func changingPasscode(old: some ContiguousByteBuffer, new: some ContiguousByteBuffer, parameters: Argon2Parameters, deviceKey: SecureKey) throws(KeychainError) -> KeybagChange {
        guard record.hasPasscode else { throw KeychainError(.param, "no passcode is set; set one instead") }
        let keys = loaded.merging(try unwrapPasscodeClasses(old, deviceKey: deviceKey)) { _, unwrapped in unwrapped }
        return KeybagChange(base: record, record: try rewrapped(keys, passcode: new, parameters: parameters, deviceKey: deviceKey))
    }

    /// The record with every class under the device key and no akpu key; loads every other
    /// class (without a passcode there is nothing to lock).
    public func removingPasscode(current: some ContiguousByteBuffer, deviceKey: SecureKey) throws(KeychainError) -> KeybagChange {
        guard record.hasPasscode else { throw KeychainError(.param, "no passcode is set") }
        var keys = loaded.merging(try unwrapPasscodeClasses(current, deviceKey: deviceKey)) { _, unwrapped in unwrapped }
        keys[.whenPasscodeSetThisDeviceOnly] = nil
        var wrapped: [Protection: [UInt8]] = [:]
        for (pdmn, key) in keys {
            wrapped[pdmn] = Self.wrap(key, pdmn: pdmn, with: wrapKey, passcodeWrapped: false)
        }
        return KeybagChange(base: record, record: KeybagRecord(passcode: nil, wrappedKeys: wrapped),
                            loads: keys, unloads: [.whenPasscodeSetThisDeviceOnly])
    }

    /// Adopts `change`: its record, and the keys it loads or destroys. Refused, changing
    /// nothing, if this keybag's record is no longer the one the change was computed from
    /// (another passcode operation was applied in between): the change's keys would be
    /// wrapped under, or checked against, a passcode that is no longer the keychain's.
    public mutating func apply(_ change: KeybagChange) throws(KeychainError) {
        guard record == change.base else { throw KeybagChange.superseded }
        record = change.record
        for pdmn in change.unloads { loaded[pdmn] = nil }
        loaded.merge(change.loads) { _, new in new }
    }

    private func unwrapPasscodeClasses(_ passcode: some ContiguousByteBuffer, deviceKey: SecureKey) throws(KeychainError) -> [Protection: SecureKey] {
        guard let params = record.passcode else { return [:] }
        let kek = try Self.kek(passcode: passcode, params: params, deviceKey: deviceKey)
        var unwrapped: [Protection: SecureKey] = [:]
        for (pdmn, wrapped) in record.wrappedKeys where pdmn.isPasscodeProtected {
            do {
                unwrapped[pdmn] = try unwrap(wrapped, pdmn: pdmn, with: kek, passcodeWrapped: true)
            } catch {
                throw KeychainError(.authFailed, "the passcode is not correct")
            }
        }
        return unwrapped
    }

    private func rewrapped(_ keys: [Protection: SecureKey], passcode: some ContiguousByteBuffer, parameters: Argon2Parameters, deviceKey: SecureKey) throws(KeychainError) -> KeybagRecord {
        let params = KeybagRecord.PasscodeParameters(salt: Sodium.randomBytes(Argon2Parameters.saltBytes), argon2: parameters)
        let kek = try Self.kek(passcode: passcode, params: params, deviceKey: deviceKey)
        var wrapped: [Protection: [UInt8]] = [:]
        for (pdmn, key) in keys {
            let byPasscode = pdmn.isPasscodeProtected
            wrapped[pdmn] = Self.wrap(key, pdmn: pdmn, with: byPasscode ? kek : wrapKey, passcodeWrapped: byPasscode)
        }
        return KeybagRecord(passcode: params, wrappedKeys: wrapped)
    }

    private func requireAllPasscodeClassesLoaded() throws(KeychainError) {
        for pdmn in record.wrappedKeys.keys where loaded[pdmn] == nil {
            throw KeychainError(.interactionNotAllowed, "the keychain is locked; unlock it first")
        }
    }

    static func kek(passcode: some ContiguousByteBuffer, params: KeybagRecord.PasscodeParameters, deviceKey: SecureKey) throws(KeychainError) -> SecureKey {
        let pk = try PasswordKDF.derive(passcode: passcode, salt: params.salt, parameters: params.argon2)
        var message = ByteWriter(capacity: 48)
        message.raw("keychaind/v1/kek".utf8)
        pk.withUnsafeBytes { message.raw($0) }
        return deviceKey.hashToKey(message.finish())
    }

    private static func associatedData(_ pdmn: Protection, passcodeWrapped: Bool) -> [UInt8] {
        Array("keychaind/v1/classkey".utf8) + [pdmn.keyClassNumber, passcodeWrapped ? 1 : 0]
    }

    static func wrap(_ key: SecureKey, pdmn: Protection, with wrapping: SecureKey, passcodeWrapped: Bool) -> [UInt8] {
        wrap(key, pdmn: pdmn, with: wrapping, passcodeWrapped: passcodeWrapped, nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    /// A wrap under a given nonce: how golden-vector tests (@testable) pin the format byte for
    /// byte. The product always wraps with a random one, above.
    static func wrap(_ key: SecureKey, pdmn: Protection, with wrapping: SecureKey, passcodeWrapped: Bool, nonce: [UInt8]) -> [UInt8] {
        AEAD.seal(key, associatedData: associatedData(pdmn, passcodeWrapped: passcodeWrapped), key: wrapping, nonce: nonce)
    }

    /// The key that wraps the classes a passcode does not protect (and all of them without one).
    static func deviceWrapKey(_ deviceKey: SecureKey) -> SecureKey {
        deviceKey.derive(id: 1, context: "keybag__")
    }

    private func unwrap(_ wrapped: [UInt8], pdmn: Protection, with wrapping: SecureKey, passcodeWrapped: Bool) throws(KeychainError) -> SecureKey {
        guard let raw = AEAD.open(wrapped, associatedData: Self.associatedData(pdmn, passcodeWrapped: passcodeWrapped), key: wrapping),
              raw.count == SecureKey.byteCount else {
            throw KeychainError(.decode, "class key \(pdmn.rawValue) does not unwrap: wrong key or altered keybag")
        }
        return SecureKey(copying: raw)
    }
}

/// What a passcode operation does to a keybag (unlock, set, change, removal): computed from a
/// copy, applied with `Keybag.apply` to the keybag it was computed from.
public struct KeybagChange: Sendable {
    /// The record the change was computed from; a random salt and nonces make every new record
    /// unique, so an equal record is the same keybag state, never an earlier one come back.
    public let base: KeybagRecord
    /// The record to persist: the base itself when only keys are loaded (an unlock).
    public let record: KeybagRecord
    /// Class keys the change makes available.
    let loads: [Protection: SecureKey]
    /// Class keys the change destroys.
    let unloads: [Protection]

    init(base: KeybagRecord, record: KeybagRecord, loads: [Protection: SecureKey] = [:], unloads: [Protection] = []) {
        self.base = base
        self.record = record
        self.loads = loads
        self.unloads = unloads
    }

    /// Another change was applied since this one's base was copied.
    public static let superseded = KeychainError(
        .notAvailable, "the passcode was set, changed or removed while this call was checking it; nothing was done: try again")

    /// Whether there is a new record to persist.
    public var changesRecord: Bool { record != base }
    /// Whether the change destroys `pdmn`'s key (the caller deletes that class's items with it).
    public func destroys(_ pdmn: Protection) -> Bool { unloads.contains(pdmn) }
}
