import KeychainProtocol

/// A private key that lives in keychaind: made or imported there, used there (sign, verify,
/// agree), and, unless made extractable, never handed out. The public key travels as bytes:
/// raw 32 bytes for Ed25519 and X25519, an uncompressed X9.63 point for P-256.
///
///     let key = try KeychainKey.generate(.ed25519, label: "deploy")
///     let signature = try key.sign(message, algorithm: .ed25519)
public struct KeychainKey: Sendable {
    public typealias Accessibility = Protection

    public let type: KeyType
    public let label: String
    /// kSecAttrApplicationTag; the bytes "ssh" mark a key for `keychain ssh-agent`.
    public let applicationTag: [UInt8]?
    public let publicKey: [UInt8]
    /// The 20-byte persistent reference of the key's item: how every call names the key.
    public let persistentRef: [UInt8]
    public let accessGroup: String
    public let extractable: Bool
    /// Every attribute of the stored item (kcls, klbl, usage flags...).
    public let attributes: AttributeDictionary
    public let connection: KeychainConnection
    /// The authentication context its calls carry (`using(_:)` with a context), if any.
    var context: AuthenticationContext? = nil

    /// The application tag that marks a key for the ssh-agent.
    public static let sshTag = Array("ssh".utf8)

    // MARK: making and finding keys

    /// A new private key, made inside keychaind and stored there. `accessControl` (Apple's
    /// kSecAttrAccessControl) replaces `accessibility` when given: with userPresence or
    /// devicePasscode, each signature, decryption and agreement asks the person first; with
    /// applicationPassword the key's bytes are sealed under the application password that
    /// `context` holds (AuthenticationContext.setApplicationPassword), and each signature,
    /// decryption and agreement needs a context holding it again. `context` must be on
    /// `connection`.
    public static func generate(_ type: KeyType, label: String, accessibility: Accessibility = .whenUnlocked,
                                accessGroup: String? = nil, extractable: Bool = false, applicationTag: [UInt8]? = nil,
                                accessControl: AccessControl? = nil, context: AuthenticationContext? = nil,
                                connection: KeychainConnection = KeychainConnection()) throws(KeychainError) -> KeychainKey {
        let item = try applying(context, on: connection, to: attributes(type, label: label, accessibility: accessibility, accessGroup: accessGroup,
                                                                       extractable: extractable, applicationTag: applicationTag, accessControl: accessControl))
        return try key(try connection.perform(Calls.attributes(.keyGenerate(item), "key")), connection: connection)
    }

    /// Stores an existing private key (32 raw bytes for Ed25519 and X25519; for P-256 the
    /// 97-byte X9.63 point and scalar); errSecParam when the bytes are not such a key.
    public static func importPrivateKey(_ bytes: SecretBytes, type: KeyType, label: String,
                                        accessibility: Accessibility = .whenUnlocked, accessGroup: String? = nil,
                                        extractable: Bool = false, applicationTag: [UInt8]? = nil,
                                        accessControl: AccessControl? = nil, context: AuthenticationContext? = nil,
                                        connection: KeychainConnection = KeychainConnection()) throws(KeychainError) -> KeychainKey {
        var item = try applying(context, on: connection, to: attributes(type, label: label, accessibility: accessibility, accessGroup: accessGroup,
                                                                       extractable: extractable, applicationTag: applicationTag, accessControl: accessControl))
        item["class"] = .string("keys")
        item["v_Data"] = .data(bytes)
        item["r_Attributes"] = .bool(true)
        item["r_PersistentRef"] = .bool(true)
        return try key(try connection.perform(Calls.attributes(.add(item), "key")), connection: connection)
    }

    /// The private keys of a type keychaind uses, with this label and tag where given, in the
    /// caller's groups. Empty when there are none.
    public static func find(label: String? = nil, applicationTag: [UInt8]? = nil,
                            connection: KeychainConnection = KeychainConnection()) throws(KeychainError) -> [KeychainKey] {
        var query: AttributeDictionary = ["class": .string("keys"), "kcls": .int(1), "r_Attributes": .bool(true),
                                          "r_PersistentRef": .bool(true), "m_Limit": .string("m_LimitAll")]
        if let label { query["labl"] = .string(label) }
        if let applicationTag { query["atag"] = .data(applicationTag) }
        let found: QueryResult
        do {
            found = try connection.copyMatching(query)
        } catch where error.status == .itemNotFound {
            return []
        }
        guard case .list(let items) = found else { throw Response.unexpected("key search") }
        var keys: [KeychainKey] = []
        for case .attributes(let dict) in items {
            guard case .int(let number)? = dict["type"], KeyType(attributeNumber: number) != nil else { continue }
            keys.append(try key(dict, connection: connection))
        }
        return keys
    }

    // MARK: using a key

    /// A signature of `data`: Ed25519's 64 raw bytes, or P-256's DER X9.62 ECDSA signature (as
    /// Apple's SecKeyCreateSignature returns). Needs the key's sign flag and its class key.
    /// A key that asks first makes keychaind's prompt ask the person, showing `reason`
    /// (u_OpPrompt); errSecUserCanceled when they decline. A key sealed under an application
    /// password needs `context` holding it (errSecInteractionNotAllowed without, errSecAuthFailed
    /// for a wrong one, delayed after four as for items); `context` must be on the key's connection.
    public func sign(_ data: [UInt8], algorithm: KeySigningAlgorithm, reason: String? = nil,
                     context: AuthenticationContext? = nil) throws(KeychainError) -> [UInt8] {
        var query = try Self.applying(context, on: connection, to: reference)
        if let reason { query["u_OpPrompt"] = .string(reason) }
        return Array(try connection.perform(Calls.data(.keySign(query: query, parameters: [
            "algorithm": .string(algorithm.rawValue), "data": .data(data)]), "signature")))
    }

    /// Whether `signature` is a valid signature of `data` by this key.
    public func verify(_ signature: [UInt8], for data: [UInt8], algorithm: KeySigningAlgorithm) throws(KeychainError) -> Bool {
        let answer = try connection.perform(Calls.attributes(.keyVerify(query: reference, parameters: [
            "algorithm": .string(algorithm.rawValue), "data": .data(data), "signature": .data(signature)]), "verification"))
        guard case .bool(let valid)? = answer["valid"] else { throw Response.unexpected("verification") }
        return valid
    }

    /// The shared secret with a peer's public key (X25519 or P-256), raw or through the X9.63
    /// KDF (`requestedSize` bytes). Needs the key's derive flag and its class key, and, for a
    /// key sealed under an application password, `context` holding it (as `sign`).
    public func agree(with peerPublicKey: [UInt8], algorithm: KeyAgreementAlgorithm = .standard,
                      requestedSize: Int? = nil, sharedInfo: [UInt8] = [],
                      context: AuthenticationContext? = nil) throws(KeychainError) -> SecretBytes {
        var parameters: AttributeDictionary = ["algorithm": .string(algorithm.rawValue), "peer": .data(peerPublicKey)]
        if let requestedSize { parameters["requestedSize"] = .int(Int64(requestedSize)) }
        if !sharedInfo.isEmpty { parameters["sharedInfo"] = .data(sharedInfo) }
        return try connection.perform(Calls.data(.keyAgree(query: try Self.applying(context, on: connection, to: reference),
                                                           parameters: parameters), "shared secret"))
    }

    /// The same key, called through `connection` (another thread's, say).
    public func using(_ connection: KeychainConnection) -> KeychainKey {
        KeychainKey(type: type, label: label, applicationTag: applicationTag, publicKey: publicKey, persistentRef: persistentRef,
                    accessGroup: accessGroup, extractable: extractable, attributes: attributes, connection: connection)
    }

    /// Deletes the key from the keychain.
    public func delete() throws(KeychainError) {
        try connection.delete(reference)
    }

    // MARK: internals

    /// How every call names this key: its persistent reference, with the context's `u_CredRef`.
    var reference: AttributeDictionary {
        let named: AttributeDictionary = ["v_PersistentRef": .data(persistentRef)]
        return context?.applied(to: named) ?? named
    }

    /// `query` carrying `context` (u_CredRef), which must be `connection`'s.
    static func applying(_ context: AuthenticationContext?, on connection: KeychainConnection,
                         to query: AttributeDictionary) throws(KeychainError) -> AttributeDictionary {
        guard let context else { return query }
        guard context.connection === connection else {
            throw KeychainError(.param, "an authentication context is used on the connection that made it")
        }
        return context.applied(to: query)
    }

    private static func attributes(_ type: KeyType, label: String, accessibility: Accessibility, accessGroup: String?,
                                   extractable: Bool, applicationTag: [UInt8]?, accessControl: AccessControl?) -> AttributeDictionary {
        var item: AttributeDictionary = [
            "type": .int(type.attributeNumber), "kcls": .int(1), "labl": .string(label),
            "pdmn": .string(accessibility.rawValue), "extr": .int(extractable ? 1 : 0),
        ]
        if let accessControl {
            // accc carries the protection class; pdmn beside flags is a conflict (errSecParam).
            item["pdmn"] = nil
            item["accc"] = .string(accessControl.stored)
        }
        if let accessGroup { item["agrp"] = .string(accessGroup) }
        if let applicationTag { item["atag"] = .data(applicationTag) }
        return item
    }

    /// A key from its item's attributes (with v_PersistentRef); its public key is asked for.
    private static func key(_ dict: AttributeDictionary, connection: KeychainConnection) throws(KeychainError) -> KeychainKey {
        guard case .data(let ref)? = dict["v_PersistentRef"], case .int(let number)? = dict["type"],
              let type = KeyType(attributeNumber: number) else { throw Response.unexpected("key") }
        let persistentRef = Array(ref)
        let publicKey = try connection.perform(Calls.data(.keyPublic(["v_PersistentRef": .data(persistentRef)]), "public key"))
        var label = ""
        switch dict["labl"] {
        case .string(let s)?: label = s
        case .data(let d)?: label = String(decoding: Array(d), as: UTF8.self)
        default: break
        }
        var tag: [UInt8]?
        switch dict["atag"] {
        case .data(let d)? where !d.isEmpty: tag = Array(d)
        case .string(let s)? where !s.isEmpty: tag = Array(s.utf8)
        default: break
        }
        return KeychainKey(type: type, label: label, applicationTag: tag, publicKey: Array(publicKey), persistentRef: persistentRef,
                           accessGroup: dict["agrp"]?.stringValue ?? "", extractable: dict["extr"] == .int(1),
                           attributes: dict, connection: connection)
    }
}

// MARK: public key encodings

extension KeychainKey {
    /// The OpenSSH public key blob (RFC 8709 for Ed25519, RFC 5656 for P-256): what an
    /// authorized_keys line carries in base64 and what ssh-agent lists. nil for X25519, which
    /// SSH does not use as a key.
    public var sshPublicKeyBlob: [UInt8]? {
        func string(_ bytes: [UInt8]) -> [UInt8] {
            withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { Array($0) } + bytes
        }
        switch type {
        case .ed25519: return string(Array("ssh-ed25519".utf8)) + string(publicKey)
        case .p256: return string(Array("ecdsa-sha2-nistp256".utf8)) + string(Array("nistp256".utf8)) + string(publicKey)
        case .x25519: return nil
        }
    }

    /// The key type name of `sshPublicKeyBlob`.
    public var sshKeyType: String? {
        switch type {
        case .ed25519: "ssh-ed25519"
        case .p256: "ecdsa-sha2-nistp256"
        case .x25519: nil
        }
    }

    /// The DER SubjectPublicKeyInfo (RFC 8410 for the 25519 keys, RFC 5480 for P-256): the
    /// body of a "PUBLIC KEY" PEM block.
    public var subjectPublicKeyInfo: [UInt8] {
        // Each prefix is the fixed DER up to the key bytes: SEQUENCE { AlgorithmIdentifier,
        // BIT STRING header with no unused bits }.
        let prefix: [UInt8]
        switch type {
        case .ed25519: prefix = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]
        case .x25519: prefix = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x03, 0x21, 0x00]
        case .p256: prefix = [0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01,
                              0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00]
        }
        return prefix + publicKey
    }
}
