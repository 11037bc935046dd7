import KeychainModel

/// CCK(e) wrapped by a member M to a device N (docs/sync.md, section 3):
///
///     shared  = X25519(M.kx_sk, N.kx_pk)
///     wrapKey = BLAKE2b-256(key = shared, "keychaind/v1/sync-wrap" ‖ M.kx_pk ‖ N.kx_pk ‖ circle id ‖ u32 e)
///     wrapped = nonce ‖ XChaCha20-Poly1305(CCK(e), wrapKey, AAD = circle id ‖ u32 e ‖ N id ‖ M id)
///     sig     = Ed25519(M, "keychaind/v1/sync-wrapped-key" ‖ circle id ‖ u32 e ‖ N id ‖ M id ‖ wrapped)
///
/// The signature names M to everyone (the store cannot pass off a wrap as another member's);
/// only N can open it.
public struct SyncWrappedKey: Sendable, Hashable {
    public var circleID: SyncCircleID
    public var epoch: UInt32
    public var recipient: SyncDeviceID
    public var wrapper: SyncDeviceID
    public var wrapped: [UInt8]
    public var signature: [UInt8]

    public init(circleID: SyncCircleID, epoch: UInt32, recipient: SyncDeviceID, wrapper: SyncDeviceID,
                wrapped: [UInt8], signature: [UInt8]) {
        self.circleID = circleID
        self.epoch = epoch
        self.recipient = recipient
        self.wrapper = wrapper
        self.wrapped = wrapped
        self.signature = signature
    }

    /// `circleKey` wrapped by `wrapper` to `recipient`.
    public static func wrap(_ circleKey: SyncCircleKey, to recipient: SyncDeviceKeys,
                            by wrapper: SyncDeviceIdentity) throws(KeychainError) -> SyncWrappedKey {
        try wrap(circleKey, to: recipient, by: wrapper, nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    static func wrap(_ circleKey: SyncCircleKey, to recipient: SyncDeviceKeys, by wrapper: SyncDeviceIdentity,
                     nonce: [UInt8]) throws(KeychainError) -> SyncWrappedKey {
        let key = try wrapKey(wrapper.sharedSecret(with: recipient), wrapperKeys: wrapper.keys, recipientKeys: recipient,
                              circleID: circleKey.circleID, epoch: circleKey.epoch)
        var out = SyncWrappedKey(circleID: circleKey.circleID, epoch: circleKey.epoch, recipient: recipient.id,
                                 wrapper: wrapper.id, wrapped: [], signature: [])
        out.wrapped = AEAD.seal(circleKey.key, associatedData: out.associatedData, key: key, nonce: nonce)
        out.signature = wrapper.sign(out.signedMessage)
        return out
    }

    /// CCK(e) for `recipient`, who must be the device it was wrapped to. The wrapper must be a
    /// member of `roster`, and the wrap of the roster's epoch: a removed device's wraps, and
    /// keys of an epoch that has passed, are refused (errSecDecode), as is anything altered.
    public func unwrap(as recipient: SyncDeviceIdentity, roster: SyncRoster) throws(KeychainError) -> SyncCircleKey {
        guard circleID == roster.circleID, epoch == roster.epoch else {
            throw KeychainError(.decode, "the wrapped key is of epoch \(epoch); the circle is at \(roster.epoch)")
        }
        guard recipient.id == self.recipient, roster.members[recipient.id] != nil else {
            throw KeychainError(.decode, "the wrapped key is not for a member that is this device")
        }
        guard let wrapperKeys = roster.members[wrapper] else {
            throw KeychainError(.decode, "the wrapped key's signer \(wrapper) is not a member")
        }
        guard wrapperKeys.verify(signature, of: signedMessage) else {
            throw KeychainError(.decode, "the wrapped key's signature does not verify")
        }
        let key = try Self.wrapKey(recipient.sharedSecret(with: wrapperKeys), wrapperKeys: wrapperKeys,
                                   recipientKeys: recipient.keys, circleID: circleID, epoch: epoch)
        guard let raw = AEAD.open(wrapped, associatedData: associatedData, key: key), raw.count == SecureKey.byteCount else {
            throw KeychainError(.decode, "the wrapped key does not open")
        }
        return SyncCircleKey(circleID: circleID, epoch: epoch, key: SecureKey(copying: raw))
    }

    private static func wrapKey(_ shared: SecureKey, wrapperKeys: SyncDeviceKeys, recipientKeys: SyncDeviceKeys,
                                circleID: SyncCircleID, epoch: UInt32) -> SecureKey {
        var w = ByteWriter()
        w.raw("keychaind/v1/sync-wrap".utf8)
        w.raw(wrapperKeys.agreementPublicKey)
        w.raw(recipientKeys.agreementPublicKey)
        w.raw(circleID.bytes)
        w.u32(epoch)
        return shared.hashToKey(w.bytes)
    }

    var associatedData: [UInt8] {
        var w = ByteWriter()
        w.raw(circleID.bytes)
        w.u32(epoch)
        w.raw(recipient.bytes)
        w.raw(wrapper.bytes)
        return w.bytes
    }

    var signedMessage: [UInt8] {
        Array("keychaind/v1/sync-wrapped-key".utf8) + associatedData + wrapped
    }
}

/// A device's signed head (docs/sync.md, section 6): how far its writes go and which roster it
/// had verified when it last pushed. Remembered per writer, heads are what lets a device tell
/// a rolled-back store from a quiet one.
///
///     sig = Ed25519(device, "keychaind/v1/head" ‖ circle id ‖ u32 epoch ‖ device id ‖ i64 counter
///                   ‖ u32 roster length ‖ roster hash (32))
public struct SyncHead: Sendable, Hashable {
    public var circleID: SyncCircleID
    public var epoch: UInt32
    public var device: SyncDeviceID
    public var counter: Int64
    public var rosterLength: UInt32
    public var rosterHash: [UInt8]
    public var signature: [UInt8]

    public init(circleID: SyncCircleID, epoch: UInt32, device: SyncDeviceID, counter: Int64,
                rosterLength: UInt32, rosterHash: [UInt8], signature: [UInt8]) {
        self.circleID = circleID
        self.epoch = epoch
        self.device = device
        self.counter = counter
        self.rosterLength = rosterLength
        self.rosterHash = rosterHash
        self.signature = signature
    }

    /// `identity`'s head at its write `counter`, over the roster it holds.
    public static func signed(by identity: SyncDeviceIdentity, counter: Int64, roster: SyncRoster) -> SyncHead {
        var head = SyncHead(circleID: roster.circleID, epoch: roster.epoch, device: identity.id, counter: counter,
                            rosterLength: UInt32(roster.length), rosterHash: roster.hash, signature: [])
        head.signature = identity.sign(head.signedMessage)
        return head
    }

    /// Checks the head against this device's roster: signed by a current member; naming, if
    /// the roster is no longer than ours, exactly our entry at that length (else a fork). A
    /// head naming a longer roster passes: SyncStoreState reads it as a partition.
    public func verify(roster: SyncRoster) throws(KeychainError) -> SyncHeadPosition {
        guard circleID == roster.circleID, epoch <= roster.epoch || Int(rosterLength) > roster.length else {
            throw KeychainError(.decode, "the head is of another circle, or of an epoch this roster has not reached")
        }
        guard let keys = roster.members[device] else {
            throw KeychainError(.decode, "the head's device \(device) is not a member")
        }
        guard keys.verify(signature, of: signedMessage) else {
            throw KeychainError(.decode, "the head's signature does not verify")
        }
        guard rosterLength >= 1 else { throw KeychainError(.decode, "the head names an empty roster") }
        if let ours = roster.hash(atLength: Int(rosterLength)), ours != rosterHash {
            throw KeychainError(.decode, "roster fork: device \(device)'s head names another roster of \(rosterLength) entries")
        }
        return SyncHeadPosition(counter: counter, rosterLength: Int(rosterLength))
    }

    var signedMessage: [UInt8] {
        var w = ByteWriter()
        w.raw("keychaind/v1/head".utf8)
        w.raw(circleID.bytes)
        w.u32(epoch)
        w.raw(device.bytes)
        w.u64(UInt64(bitPattern: counter))
        w.u32(rosterLength)
        w.raw(rosterHash)
        return w.bytes
    }
}
