import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Keys with the accc flag applicationPassword (issue 29): the private key's bytes are sealed
/// under the application password of the context that made or imported the key, and each
/// signature, decryption and key agreement needs a context holding it again; the public key's
/// uses need none. Against the real daemon through KeychainClient.
@Suite("Keys sealed under an application password")
struct KeysSealedUnderAnApplicationPasswordTests {
    static let password = SecretBytes(Array("correct horse".utf8))
    static let sealed = try! AccessControl(protection: .whenUnlocked, flags: .applicationPassword)
    static let message = Array("release 1.0".utf8)

    /// A connection (to a daemon whose idle time-out outlives the test) and a context on it
    /// holding `password`.
    static func connection(_ d: RunningDaemon, password: SecretBytes = password) throws -> (KeychainConnection, AuthenticationContext) {
        let c = KeychainConnection(socketPath: d.socketPath)
        let context = try AuthenticationContext(connection: c)
        try context.setApplicationPassword(password)
        return (c, context)
    }

    static func daemon() throws -> RunningDaemon { try RunningDaemon(config: "idle_timeout_seconds = 60") }

    static func generated(_ type: KeyType = .ed25519, in d: RunningDaemon, extractable: Bool = false) throws -> KeychainKey {
        let (c, context) = try connection(d)
        return try KeychainKey.generate(type, label: "release signing", extractable: extractable, accessControl: sealed,
                                        context: context, connection: c)
    }

    @Test func aKeyMadeWithThePasswordSignsWithAContextHoldingIt() throws {
        let d = try Self.daemon()
        _ = try Self.generated(in: d)
        let (c, context) = try Self.connection(d)
        let key = try #require(try KeychainKey.find(label: "release signing", connection: c).first)
        #expect(key.attributes["accc"] == .string("ak;2147483648"))
        let signature = try key.sign(Self.message, algorithm: .ed25519, context: context)
        #expect(try key.verify(signature, for: Self.message, algorithm: .ed25519))
    }

    @Test func withoutThePasswordASignatureIsInteractionNotAllowed() throws {
        let d = try Self.daemon()
        let key = try Self.generated(in: d)
        expectStatus(.interactionNotAllowed) { _ = try key.sign(Self.message, algorithm: .ed25519) }
        let empty = try AuthenticationContext(connection: key.connection)
        expectStatus(.interactionNotAllowed) { _ = try key.sign(Self.message, algorithm: .ed25519, context: empty) }
    }

    /// The guesser, as for items: four wrong passwords are errSecAuthFailed, the fifth starts
    /// the key's delay, during which the right password from a new connection is refused too.
    @Test func wrongPasswordsAreAuthFailedThenDelayedForThatKey() throws {
        let d = try Self.daemon()
        let key = try Self.generated(in: d)
        let (c, wrong) = try Self.connection(d, password: SecretBytes(Array("tr0ub4dor".utf8)))
        let guessed = key.using(c)
        for _ in 1...4 {
            do throws(KeychainError) {
                _ = try guessed.sign(Self.message, algorithm: .ed25519, context: wrong)
                Issue.record("a wrong password signed")
            } catch {
                #expect(error.status == .authFailed && error.message == "the application password is not correct", "\(error)")
            }
        }
        expectStatus(.authFailed) { _ = try guessed.sign(Self.message, algorithm: .ed25519, context: wrong) }
        let (other, right) = try Self.connection(d)
        do throws(KeychainError) {
            _ = try key.using(other).sign(Self.message, algorithm: .ed25519, context: right)
            Issue.record("signed during the key's delay")
        } catch {
            #expect(error.status == .authFailed && error.message.contains("try again in"), "\(error)")
            #expect(!error.message.contains("correct horse") && !error.message.contains("tr0ub4dor"))
        }
    }

    @Test func thePublicKeyVerifyAndEncryptNeedNoPassword() throws {
        let d = try Self.daemon()
        let made = try Self.generated(.x25519, in: d)
        let c = KeychainConnection(socketPath: d.socketPath)
        let found = try #require(try KeychainKey.find(label: "release signing", connection: c).first)
        #expect(found.publicKey == made.publicKey && found.publicKey.count == 32)
        let ciphertext = try found.encrypt(SecretBytes(Array("hello".utf8)))
        expectStatus(.interactionNotAllowed) { _ = try found.decrypt(ciphertext) }
        let (owner, context) = try Self.connection(d)
        #expect(Array(try found.using(owner).decrypt(ciphertext, context: context)) == Array("hello".utf8))
    }

    @Test func keyAgreementNeedsThePassword() throws {
        let d = try Self.daemon()
        let key = try Self.generated(.x25519, in: d)
        let peer = try KeychainKey.generate(.x25519, label: "peer", connection: KeychainConnection(socketPath: d.socketPath))
        expectStatus(.interactionNotAllowed) { _ = try key.agree(with: peer.publicKey) }
        let (c, context) = try Self.connection(d)
        let ours = try key.using(c).agree(with: peer.publicKey, context: context)
        #expect(Array(ours) == Array(try peer.agree(with: key.publicKey)))
    }

    @Test func anImportedKeyIsSealedUnderThePasswordToo() throws {
        let d = try Self.daemon()
        let (c, context) = try Self.connection(d)
        let bytes = SecretBytes([UInt8](repeating: 7, count: 32))
        let key = try KeychainKey.importPrivateKey(bytes, type: .ed25519, label: "imported", accessControl: Self.sealed,
                                                   context: context, connection: c)
        expectStatus(.interactionNotAllowed) { _ = try key.sign(Self.message, algorithm: .ed25519) }
        let signature = try key.sign(Self.message, algorithm: .ed25519, context: context)
        #expect(try key.verify(signature, for: Self.message, algorithm: .ed25519))
    }

    @Test func anImportWithoutThePasswordStoresNothing() throws {
        let d = try Self.daemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.interactionNotAllowed) {
            _ = try KeychainKey.importPrivateKey(SecretBytes([UInt8](repeating: 7, count: 32)), type: .ed25519, label: "imported",
                                                 accessControl: Self.sealed, connection: c)
        }
        expectStatus(.interactionNotAllowed) {
            _ = try KeychainKey.generate(.ed25519, label: "made", accessControl: Self.sealed, connection: c)
        }
        #expect(try KeychainKey.find(connection: c).isEmpty)
    }

    @Test func anExtractableKeysBytesAreReadWithThePasswordOnly() throws {
        let d = try Self.daemon()
        let (c, context) = try Self.connection(d)
        let bytes = SecretBytes([UInt8](repeating: 9, count: 32))
        _ = try KeychainKey.importPrivateKey(bytes, type: .ed25519, label: "exportable", extractable: true, accessControl: Self.sealed,
                                             context: context, connection: c)
        let query: AttributeDictionary = ["class": .string("keys"), "labl": .string("exportable"), "r_Data": .bool(true)]
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(query) }
        #expect(try c.copyMatching(query, context: context) == .single(.data(bytes)))
    }

    @Test func theDerivedPublicKeyAttributeCannotBeForged() throws {
        let d = try Self.daemon()
        let (c, context) = try Self.connection(d)
        let item: AttributeDictionary = [
            "class": .string("keys"), "kcls": .int(1), "type": .int(KeyType.ed25519.attributeNumber), "labl": .string("forged"),
            "accc": .string("ak;2147483648"), "xpub": .data(SecretBytes([UInt8](repeating: 1, count: 32))),
            "v_Data": .data(SecretBytes([UInt8](repeating: 7, count: 32))),
        ]
        expectStatus(.param) { try c.add(context.applied(to: item)) }
    }
}
