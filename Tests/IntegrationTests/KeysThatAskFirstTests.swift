import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Keys whose access control asks the person first (issue 29): each signature, decryption and
/// key agreement asks at keychaind's prompt, against the real daemon with the scripted
/// pinentry of ItemsThatAskFirstTests, whose log holds one SETDESC per prompt.
@Suite("Keys that ask first")
struct KeysThatAskFirstTests {
    static let presence = AccessControl(protection: .whenUnlocked, flags: AccessControl.Flag.userPresence)
    static let passcode = AccessControl(protection: .whenUnlocked, flags: AccessControl.Flag.devicePasscode)

    static func prompts(_ log: String) -> Int {
        ItemsThatAskFirstTests.said(log).components(separatedBy: "\n").filter { $0.hasPrefix("SETDESC ") }.count
    }

    /// One call's status, sent as is (a query with u_AuthUI, which KeychainKey does not send).
    static func status(_ d: RunningDaemon, _ request: Request) throws -> Int32 {
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        try socket.writeAll(WireCodec.frame(request))
        let payload = try #require(try Frame.read(from: socket, idleTimeoutMs: 30_000, frameTimeoutMs: 30_000))
        return try WireCodec.decodeResponse(payload).status
    }

    static let signEd25519: AttributeDictionary = ["algorithm": .string(KeySigningAlgorithm.ed25519.rawValue), "data": .data([1, 2, 3])]

    @Test func eachSignatureAsksOnceNamingTheKeyAndTheReason() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "release signing", accessControl: Self.presence, connection: c)
        #expect(key.attributes["accc"] == .string("ak;1"))
        #expect(Self.prompts(log) == 0)  // making it and reading its public key ask nothing
        for n in 1...2 {
            let signature = try key.sign([UInt8]("v\(n)".utf8), algorithm: .ed25519, reason: "tag release \(n)")
            #expect(try key.verify(signature, for: [UInt8]("v\(n)".utf8), algorithm: .ed25519))
            #expect(Self.prompts(log) == n)
        }
        let said = ItemsThatAskFirstTests.said(log)
        #expect(said.contains("wants to use the keychain item \u{201C}release signing\u{201D}.%0AIts reason: tag release 2"), "\(said)")
    }

    @Test func aKeyOfDevicePasscodeAsksToDecryptButNotToEncryptVerifyOrShowItsPublicKey() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.p256, label: "mail", accessControl: Self.passcode, connection: c)
        #expect(key.attributes["accc"] == .string("ak;16"))
        let ciphertext = try key.encrypt(SecretBytes(Array("hello".utf8)))
        #expect(try !key.verify([0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01], for: [1], algorithm: .ecdsaMessageX962SHA256))
        #expect(Self.prompts(log) == 0)
        #expect(Array(try key.decrypt(ciphertext)) == Array("hello".utf8))
        #expect(Self.prompts(log) == 1)
    }

    @Test func aKeyAgreementAsks() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.x25519, label: "agree", accessControl: Self.presence, connection: c)
        let peer = try KeychainKey.generate(.x25519, label: "peer", connection: c)
        let shared = try key.agree(with: peer.publicKey)
        #expect(Self.prompts(log) == 1)
        #expect(Array(shared) == Array(try peer.agree(with: key.publicKey)))
        #expect(Self.prompts(log) == 1)  // the peer's key asks nothing
    }

    @Test func anImportedKeyKeepsItsConstraintAndAsks() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.importPrivateKey(SecretBytes([UInt8](repeating: 7, count: 32)), type: .ed25519, label: "imported",
                                                   accessControl: Self.presence, connection: c)
        #expect(key.attributes["accc"] == .string("ak;1"))
        _ = try key.sign([1], algorithm: .ed25519)
        #expect(Self.prompts(log) == 1)
    }

    @Test func thePersonCancellingIsUserCanceledAndNoSignatureIsMade() throws {
        let (d, _) = try ItemsThatAskFirstTests.daemon(answers: ["cancel"])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "k", accessControl: Self.presence, connection: c)
        expectStatus(.userCanceled) { _ = try key.sign([1], algorithm: .ed25519) }
    }

    @Test func failIsInteractionNotAllowedWithoutAskingAndSkipIsParam() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "k", accessControl: Self.presence, connection: c)
        let ref: AttributeValue = .data(key.persistentRef)
        #expect(try Self.status(d, .keySign(query: ["v_PersistentRef": ref, "u_AuthUI": .string("u_AuthUIF")], parameters: Self.signEd25519))
                == KeychainStatus.interactionNotAllowed.rawValue)
        #expect(try Self.status(d, .keySign(query: ["v_PersistentRef": ref, "u_AuthUI": .string("u_AuthUIS")], parameters: Self.signEd25519))
                == KeychainStatus.param.rawValue)
        #expect(Self.prompts(log) == 0)
    }

    @Test func withNowhereToAskASignatureIsInteractionNotAllowed() throws {
        let (d, _) = try ItemsThatAskFirstTests.daemon(answers: [], prompt: false)
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "k", accessControl: Self.presence, connection: c)
        expectStatus(.interactionNotAllowed) { _ = try key.sign([1], algorithm: .ed25519) }
    }

    /// A non-extractable key's bytes never leave, so reading it asks nothing; an extractable
    /// one's bytes are a secret like a password's, read after the person's yes.
    @Test func readingAKeyAsksOnlyWhenItsBytesWouldLeave() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let sealed = try KeychainKey.generate(.ed25519, label: "sealed", accessControl: Self.presence, connection: c)
        let found = try c.copyMatching(["v_PersistentRef": .data(sealed.persistentRef), "r_Attributes": .bool(true), "r_Data": .bool(true)])
        guard case .single(.attributes(let attributes)) = found else { Issue.record("\(found)"); return }
        #expect(attributes["v_Data"] == nil)
        #expect(Self.prompts(log) == 0)
        let open = try KeychainKey.generate(.ed25519, label: "open", extractable: true, accessControl: Self.presence, connection: c)
        let bytes = try c.copyMatching(["v_PersistentRef": .data(open.persistentRef), "r_Data": .bool(true)])
        guard case .single(.data(let seed)) = bytes else { Issue.record("\(bytes)"); return }
        #expect(seed.count == 32)
        #expect(Self.prompts(log) == 1)
    }

    /// The test certificate added with its P-256 key, imported extractable and asking first:
    /// an identity; the key's bytes, which reading it returns.
    static func identityWhoseKeyAsksFirst(_ d: RunningDaemon, _ c: KeychainConnection) throws -> (CertificateTests, [UInt8]) {
        let certificates = CertificateTests()
        let privateKey = try certificates.expected("p256.private")
        _ = try KeychainKey.importPrivateKey(SecretBytes(privateKey), type: .p256, label: "tls key",
                                             extractable: true, accessControl: Self.presence, connection: c)
        #expect(try d.cli(["cert", "add", certificates.pemPath]).status == 0)
        return (certificates, privateKey)
    }

    /// An identity whose extractable key asks first: its key bytes are read after the
    /// person's yes (asked outside the lock, after the join), once per call; Fail refuses
    /// and Skip leaves it out, neither asking; its attributes and certificate ask nothing.
    @Test func anIdentitysKeyBytesAskThePersonOnce() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let (certificates, privateKey) = try Self.identityWhoseKeyAsksFirst(d, c)
        let identity: AttributeDictionary = ["class": .string("idnt"), "r_Data": .bool(true)]
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(identity.merging(["u_AuthUI": .string("u_AuthUIF")]) { $1 }) }
        expectStatus(.itemNotFound) { _ = try c.copyMatching(identity.merging(["u_AuthUI": .string("u_AuthUIS")]) { $1 }) }
        guard case .single(.attributes(let attributes)) = try c.copyMatching(["class": .string("idnt"), "r_Attributes": .bool(true)]) else {
            Issue.record("no identity")
            return
        }
        #expect(attributes["certdata"] == .data(try certificates.der))
        #expect(Self.prompts(log) == 0)
        #expect(try c.copyMatching(identity.merging(["u_OpPrompt": .string("serve TLS")]) { $1 }) == .single(.data(privateKey)))
        #expect(Self.prompts(log) == 1)
        #expect(ItemsThatAskFirstTests.said(log).contains("%0AIts reason: serve TLS"))
    }

    /// An authentication context spares an identity's key bytes the prompt, as a read's.
    @Test func anAuthenticatedContextReadsAnIdentitysKeyBytesWithoutAPrompt() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let (_, privateKey) = try Self.identityWhoseKeyAsksFirst(d, c)
        let context = try AuthenticationContext(connection: c)
        try context.authenticate(reason: "serve TLS")
        let identity: AttributeDictionary = ["class": .string("idnt"), "r_Data": .bool(true), "u_AuthUI": .string("u_AuthUIF")]
        #expect(try c.copyMatching(identity, context: context) == .single(.data(privateKey)))
        #expect(Self.prompts(log) == 1)
    }

    /// LAContext with SecKey: an authenticated context spares each use the prompt for its
    /// life; a new one is authenticated by the first use's prompt.
    @Test func aContextAsksOnceForTwoSignatures() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "release signing", accessControl: Self.presence, connection: c)
        let context = try AuthenticationContext(connection: c)
        let signing = key.using(context)
        for n in 1...2 {
            let signature = try signing.sign([UInt8]("v\(n)".utf8), algorithm: .ed25519, reason: "tag release \(n)")
            #expect(try key.verify(signature, for: [UInt8]("v\(n)".utf8), algorithm: .ed25519))
        }
        #expect(Self.prompts(log) == 1)
        _ = try key.sign([1], algorithm: .ed25519)  // without the context: asks again
        #expect(Self.prompts(log) == 2)
    }

    @Test func anAuthenticatedContextSignsAndDecryptsWithoutAPromptEvenUnderFail() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = try RawConnection(d)
        let key = try KeychainKey.generate(.p256, label: "mail", accessControl: Self.passcode, connection: KeychainConnection(socketPath: d.socketPath))
        let reference = try c.createContext()
        #expect(try c.send(.contextAuthenticate(reference: reference, reason: "read mail")).status == 0)
        let query: AttributeDictionary = ["v_PersistentRef": .data(key.persistentRef), "u_CredRef": .data(reference), "u_AuthUI": .string("u_AuthUIF")]
        let signed = try c.send(.keySign(query: query, parameters: ["algorithm": .string(KeySigningAlgorithm.ecdsaMessageX962SHA256.rawValue), "data": .data([1])]))
        #expect(signed.status == 0)
        let ciphertext = try key.encrypt(SecretBytes(Array("hello".utf8)))
        let opened = try c.send(.keyDecrypt(query: query, parameters: ["algorithm": .string(try #require(key.defaultEncryptionAlgorithm).rawValue), "data": .data(SecretBytes(ciphertext))]))
        #expect(opened.result == .single(.data(Array("hello".utf8))))
        #expect(Self.prompts(log) == 1)
    }

    /// The attack: a context learnt by another connection, carried by a key call, is
    /// refused before the key is opened, and nobody is asked.
    @Test func aContextOfAnotherConnectionIsRefusedForKeyUse() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let key = try KeychainKey.generate(.ed25519, label: "k", accessControl: Self.presence, connection: KeychainConnection(socketPath: d.socketPath))
        let mine = try RawConnection(d), other = try RawConnection(d)
        let reference = try mine.createContext()
        #expect(try mine.send(.contextAuthenticate(reference: reference, reason: "")).status == 0)
        let query: AttributeDictionary = ["v_PersistentRef": .data(key.persistentRef), "u_CredRef": .data(reference)]
        #expect(try other.send(.keySign(query: query, parameters: Self.signEd25519)).status == KeychainStatus.param.rawValue)
        #expect(try mine.send(.keySign(query: query, parameters: Self.signEd25519)).status == 0)
        #expect(Self.prompts(log) == 1)
    }

    /// An extractable key travels in a backup with its constraint, sealed again on restore:
    /// on the other device it still asks before each signature. The backup itself asks once
    /// (it holds a secret that asks first: docs/security.md, "A backup asks too").
    @Test func aBackupAndRestoreKeepTheKeysConstraint() throws {
        let (a, aLog) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let (b, bLog) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let ca = KeychainConnection(socketPath: a.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        _ = try KeychainKey.generate(.ed25519, label: "travels", extractable: true, accessControl: Self.presence, connection: ca)
        let password = bytes("backup password")
        let (file, _) = try ca.backup(password: password) { _, _ in }
        #expect(Self.prompts(aLog) == 1)
        #expect(try cb.restore(file, password: password)["restored"] == .int(1))
        let key = try #require(try KeychainKey.find(label: "travels", connection: cb).first)
        #expect(key.attributes["accc"] == .string("ak;1"))
        #expect(Self.prompts(bLog) == 0)
        _ = try key.sign([1], algorithm: .ed25519)
        #expect(Self.prompts(bLog) == 1)
    }

    @Test func theCLIsRequirePresenceMakesAKeyThatAsks() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let made = try d.cli(["key", "generate", "--type", "ed25519", "--label", "cli-key", "--require", "presence"])
        #expect(made.status == 0, "\(made.stderr)")
        let c = KeychainConnection(socketPath: d.socketPath)
        #expect(try KeychainKey.find(label: "cli-key", connection: c).first?.attributes["accc"] == .string("ak;1"))
        let signed = try d.cli(["key", "sign", "--label", "cli-key"], input: [1, 2, 3])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(Self.prompts(log) == 1)
        #expect(try d.cli(["key", "generate", "--type", "ed25519", "--label", "x", "--require", "biometry"]).status != 0)
    }
}
