import KeychainModel

/// The public half of a device's sync identity (docs/sync.md, 2.1), as the roster and the
/// store carry it. Its id and fingerprint are computed from the two keys, never taken on trust.
public struct SyncDeviceKeys: Sendable, Hashable {
    public let signPublicKey: [UInt8]
    public let agreementPublicKey: [UInt8]
    public let id: SyncDeviceID
    /// The digits people compare before approving the device.
    public let fingerprint: SyncFingerprint

    public init(signPublicKey: [UInt8], agreementPublicKey: [UInt8]) throws(KeychainError) {
        guard signPublicKey.count == Ed25519.publicKeyBytes, agreementPublicKey.count == X25519.publicKeyBytes else {
            throw KeychainError(.decode, "a sync device's public keys are 32 bytes each")
        }
        self.signPublicKey = signPublicKey
        self.agreementPublicKey = agreementPublicKey
        let h = PublicHash.blake2b256(Array("keychaind/v1/device".utf8), signPublicKey, agreementPublicKey)
        id = try SyncDeviceID(Array(h[0..<16]))
        fingerprint = SyncFingerprint(hashBytes: Array(h[16..<32]))
    }

    /// Whether `signature` is this device's over `message`.
    public func verify(_ signature: [UInt8], of message: [UInt8]) -> Bool {
        Ed25519.verify(signature, of: message, publicKey: signPublicKey)
    }
}

/// A device's own sync identity: an Ed25519 signing key (kept as its 32-byte seed) and an
/// X25519 agreement key, both in guarded memory. ThisDeviceOnly by nature: sealed locally
/// under CK[ck] and never in a backup (a restored machine is a new device).
public struct SyncDeviceIdentity: Sendable {
    let signSeed: SecureKey
    let agreementSecret: SecureKey
    public let keys: SyncDeviceKeys

    public static func generate() -> SyncDeviceIdentity {
        SyncDeviceIdentity(signSeed: .random(), agreementSecret: .random())
    }

    /// From given secrets: golden vectors (@testable) and `opening`.
    init(signSeed: SecureKey, agreementSecret: SecureKey) {
        self.signSeed = signSeed
        self.agreementSecret = agreementSecret
        // Lengths are fixed by the primitives, so this cannot throw.
        keys = try! SyncDeviceKeys(signPublicKey: Ed25519.publicKey(seed: signSeed),
                                   agreementPublicKey: X25519.publicKey(secret: agreementSecret))
    }

    public var id: SyncDeviceID { keys.id }

    public func sign(_ message: [UInt8]) -> [UInt8] { Ed25519.sign(message, seed: signSeed) }

    /// The X25519 point shared with `peer`, or errSecDecode for a key that gives none.
    func sharedSecret(with peer: SyncDeviceKeys) throws(KeychainError) -> SecureKey {
        guard let shared = X25519.sharedSecret(agreementSecret, peer.agreementPublicKey) else {
            throw KeychainError(.decode, "device \(peer.id)'s agreement key is of small order")
        }
        return shared
    }

    // MARK: kept locally under CK[ck]

    /// The two secrets (seed, then scalar) sealed under `classKey` (CK[ck]), bound to the id.
    public func sealed(under classKey: SecureKey) -> [UInt8] {
        sealed(under: classKey, nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    func sealed(under classKey: SecureKey, nonce: [UInt8]) -> [UInt8] {
        var w = ByteWriter(capacity: 2 * SecureKey.byteCount)
        signSeed.withUnsafeBytes { w.raw($0) }
        agreementSecret.withUnsafeBytes { w.raw($0) }
        return AEAD.seal(w.finish(), associatedData: Self.localAssociatedData(keys.id), key: classKey, nonce: nonce)
    }

    /// Opens what `sealed` wrote for device `id`; errSecDecode if it was altered or is another's.
    public init(opening sealed: [UInt8], id: SyncDeviceID, classKey: SecureKey) throws(KeychainError) {
        guard let secrets = AEAD.open(sealed, associatedData: Self.localAssociatedData(id), key: classKey),
              secrets.count == 2 * SecureKey.byteCount else {
            throw KeychainError(.decode, "the sync identity does not open: altered, or another device's")
        }
        func key(at offset: Int) -> SecureKey {
            SecureKey { dst in secrets.withUnsafeBytes { dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + SecureKey.byteCount)])) } }
        }
        self.init(signSeed: key(at: 0), agreementSecret: key(at: SecureKey.byteCount))
        guard keys.id == id else { throw KeychainError(.decode, "the sync identity's keys do not give its id") }
    }

    static func localAssociatedData(_ id: SyncDeviceID) -> [UInt8] {
        Array("keychaind/v1/sync-identity".utf8) + id.bytes
    }
}
