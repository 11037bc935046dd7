import KeychainModel

/// A device's request to join a circle, as `sync_devices` holds it (docs/sync.md, section 3):
/// its keys and a name for people, self-signed so the store cannot swap the name or the keys
/// of a pending device without the fingerprint the approver types no longer matching.
///
///     sig = Ed25519(device, "keychaind/v1/sync-join" ‖ circle id ‖ device id ‖ sign_pk ‖ kx_pk
///                   ‖ u32 name length ‖ name (UTF-8, at most 64 bytes))
public struct SyncJoinRequest: Sendable, Hashable {
    public static let maxNameBytes = 64

    public var circleID: SyncCircleID
    public var device: SyncDeviceKeys
    public var name: String
    public var signature: [UInt8]

    public init(circleID: SyncCircleID, device: SyncDeviceKeys, name: String, signature: [UInt8]) {
        self.circleID = circleID
        self.device = device
        self.name = name
        self.signature = signature
    }

    /// `identity`'s request to join `circleID` as `name`; errSecParam for a name too long.
    public static func signed(by identity: SyncDeviceIdentity, circleID: SyncCircleID, name: String) throws(KeychainError) -> SyncJoinRequest {
        guard name.utf8.count <= maxNameBytes else {
            throw KeychainError.param("a device name is at most \(maxNameBytes) bytes")
        }
        var request = SyncJoinRequest(circleID: circleID, device: identity.keys, name: name, signature: [])
        request.signature = identity.sign(request.signedMessage)
        return request
    }

    /// Whether this is the device whose fingerprint a person typed, its request intact. The
    /// approver picks the one pending request for which this holds.
    public func isSigned(by fingerprint: SyncFingerprint, for circleID: SyncCircleID) -> Bool {
        self.circleID == circleID && device.fingerprint == fingerprint && name.utf8.count <= Self.maxNameBytes
            && device.verify(signature, of: signedMessage)
    }

    var signedMessage: [UInt8] {
        var w = ByteWriter()
        w.raw("keychaind/v1/sync-join".utf8)
        w.raw(circleID.bytes)
        w.raw(device.id.bytes)
        w.raw(device.signPublicKey)
        w.raw(device.agreementPublicKey)
        w.lengthPrefixed(name.utf8)
        return w.bytes
    }
}
