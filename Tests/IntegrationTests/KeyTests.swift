import CSodium
import Crypto
import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Keys inside the real daemon through KeychainKey and the CLI (docs/keys.md): generated,
/// used and kept there; signatures checked with libsodium and swift-crypto, not keychaind.
@Suite("Keys through the daemon", .serialized)
struct KeyTests {
    @Test func anEd25519KeySignsAndLibsodiumVerifies() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "deploy", connection: c)
        #expect(key.type == .ed25519 && key.label == "deploy" && key.publicKey.count == 32 && !key.extractable)
        let message = bytes("sign me")
        let signature = try key.sign(message, algorithm: .ed25519)
        #expect(crypto_sign_verify_detached(signature, message, UInt64(message.count), key.publicKey) == 0)
        #expect(try key.verify(signature, for: message, algorithm: .ed25519))
        #expect(try !key.verify(signature, for: bytes("other"), algorithm: .ed25519))
    }

    @Test func aP256KeySignsAndSwiftCryptoVerifies() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.p256, label: "tls", connection: c)
        let publicKey = try P256.Signing.PublicKey(x963Representation: key.publicKey)
        let message = bytes("sign me")
        let signature = try P256.Signing.ECDSASignature(derRepresentation: try key.sign(message, algorithm: .ecdsaMessageX962SHA256))
        #expect(publicKey.isValidSignature(signature, for: message))
        let digest = Array(SHA256.hash(data: message))
        let overDigest = try P256.Signing.ECDSASignature(derRepresentation: try key.sign(digest, algorithm: .ecdsaDigestX962SHA256))
        #expect(publicKey.isValidSignature(overDigest, for: message))
    }

    @Test func agreementEqualsThePeersComputation() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let x = try KeychainKey.generate(.x25519, label: "x", connection: c)
        let xPeer = Curve25519.KeyAgreement.PrivateKey()
        let xExpected = try xPeer.sharedSecretFromKeyAgreement(with: .init(rawRepresentation: x.publicKey)).withUnsafeBytes { Array($0) }
        #expect(Array(try x.agree(with: Array(xPeer.publicKey.rawRepresentation))) == xExpected)
        let p = try KeychainKey.generate(.p256, label: "p", connection: c)
        let pPeer = P256.KeyAgreement.PrivateKey()
        let pExpected = try pPeer.sharedSecretFromKeyAgreement(with: .init(x963Representation: p.publicKey))
            .x963DerivedSymmetricKey(using: SHA256.self, sharedInfo: bytes("info"), outputByteCount: 32).withUnsafeBytes { Array($0) }
        let derived = try p.agree(with: Array(pPeer.publicKey.x963Representation), algorithm: .standardX963SHA256,
                                  requestedSize: 32, sharedInfo: bytes("info"))
        #expect(Array(derived) == pExpected)
    }

    @Test func findReturnsTheKeysWithTheirPublicKeysAndTags() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let made = try KeychainKey.generate(.ed25519, label: "ssh-key", applicationTag: KeychainKey.sshTag, connection: c)
        _ = try KeychainKey.generate(.p256, label: "other", connection: c)
        let found = try KeychainKey.find(applicationTag: KeychainKey.sshTag, connection: c)
        #expect(found.map(\.publicKey) == [made.publicKey])
        #expect(found.first?.applicationTag == KeychainKey.sshTag)
        #expect(try KeychainKey.find(connection: c).count == 2)
        try made.delete()
        #expect(try KeychainKey.find(label: "ssh-key", connection: c).isEmpty)
    }

    @Test func aUsageFlagThatIsOffIsErrSecParam() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "k", connection: c)
        try c.update(["class": .string("keys"), "labl": .string("k")], ["sign": .int(0)])
        #expect(throws: KeychainError(.param, "")) { _ = try key.sign([1], algorithm: .ed25519) }
    }

    @Test func aWhenUnlockedKeyCannotSignWhileLocked() throws {
        let d = try RunningDaemon(config: "lock_grace_seconds = 0")
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "k", connection: c)
        try c.setPasscode(bytes("1234"))
        try c.lock()
        #expect(throws: KeychainError(.interactionNotAllowed, "")) { _ = try key.sign([1], algorithm: .ed25519) }
        try c.unlock(passcode: bytes("1234"))
        #expect(try key.sign([1], algorithm: .ed25519).count == 64)
    }

    @Test func aMalformedImportIsErrSecParam() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        #expect(throws: KeychainError(.param, "")) {
            _ = try KeychainKey.importPrivateKey(SecretBytes([UInt8](repeating: 1, count: 96)), type: .p256, label: "bad", connection: c)
        }
    }

    /// A non-extractable key imported from known bytes: no answer frame on the socket holds its
    /// scalar, whatever a caller asks for.
    @Test func aNonExtractableKeysBytesAreInNoAnswerOnTheSocket() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let original = P256.Signing.PrivateKey()
        let stored = Array(original.x963Representation)
        let scalar = Array(original.rawRepresentation)
        let key = try KeychainKey.importPrivateKey(SecretBytes(stored), type: .p256, label: "sealed", connection: c)
        #expect(key.publicKey == Array(stored.prefix(65)))
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        let keys: AttributeDictionary = ["class": .string("keys"), "labl": .string("sealed")]
        let requests: [Request] = [
            .copyMatching(keys.merging(["r_Data": .bool(true)]) { $1 }),
            .copyMatching(keys.merging(["r_Data": .bool(true), "r_Attributes": .bool(true)]) { $1 }),
            .copyMatching(keys.merging(["r_Data": .bool(true), "r_Attributes": .bool(true), "m_Limit": .string("m_LimitAll")]) { $1 }),
            .copyMatching(["class": .string("idnt"), "r_Data": .bool(true), "r_Attributes": .bool(true)]),
            .keyPublic(keys),
            .keySign(query: keys, parameters: ["algorithm": .string(KeySigningAlgorithm.ecdsaMessageX962SHA256.rawValue), "data": .data([1])]),
        ]
        for request in requests {
            try socket.writeAll(WireCodec.frame(request))
            let answer = try #require(try Frame.read(from: socket, idleTimeoutMs: 5000, frameTimeoutMs: 5000))
            #expect(!contains(Array(answer), scalar), "\(request.operation)")
        }
    }

    @Test func aBackupCarriesExtractableKeysAndLeavesNonExtractableOnesOut() throws {
        let a = try RunningDaemon(), b = try RunningDaemon()
        let ca = KeychainConnection(socketPath: a.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        let sealed = try KeychainKey.generate(.ed25519, label: "sealed", connection: ca)
        let open = try KeychainKey.generate(.ed25519, label: "open", extractable: true, connection: ca)
        let file = a.root + "/backup.kcb"
        let made = try a.cli(["backup", "--out", file, "--json"], input: bytes("pw") + [10])
        #expect(made.status == Exit.success, "\(made.stderr)")
        #expect(made.text.contains("\"excluded\":1"), "\(made.text)")
        #expect(try b.cli(["restore", file], input: bytes("pw") + [10]).status == Exit.success)
        let restored = try KeychainKey.find(connection: cb)
        #expect(restored.map(\.publicKey) == [open.publicKey])
        #expect(!restored.contains { $0.publicKey == sealed.publicKey })
    }

    @Test func theCLIGeneratesListsShowsSignsAndDeletes() throws {
        let d = try RunningDaemon()
        let made = try d.cli(["key", "generate", "--type", "ed25519", "--label", "laptop", "--ssh"])
        #expect(made.status == Exit.success, "\(made.stderr)")
        #expect(made.text.hasPrefix("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5") && made.text.hasSuffix(" laptop\n"))
        #expect(try d.cli(["key", "public", "--label", "laptop"]).text == made.text)
        let raw = try d.cli(["key", "public", "--label", "laptop", "--format", "raw"]).stdout
        #expect(raw.count == 32)
        let pem = try d.cli(["key", "public", "--label", "laptop", "--format", "pem"]).text
        #expect(pem.hasPrefix("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA"))
        let list = try d.cli(["key", "list"]).text
        #expect(list.contains("ed25519\tlaptop\t") && list.contains("non-extractable,ssh"))
        let message = bytes("data to sign\n")
        let signed = try d.cli(["key", "sign", "--label", "laptop"], input: message)
        #expect(signed.status == Exit.success, "\(signed.stderr)")
        #expect(crypto_sign_verify_detached(signed.stdout, message, UInt64(message.count), raw) == 0)
        #expect(try d.cli(["key", "delete", "--label", "laptop"]).status == Exit.success)
        #expect(try d.cli(["key", "sign", "--label", "laptop"], input: message).status == Exit.notFound)
    }

    @Test func anotherAppsKeyIsNotFound() throws {
        let (d, appA, appB) = try RunningDaemon.withTwoApps()
        #expect(try d.cli(["key", "generate", "--type", "p256", "--label", "a-key"], asUser: appA).status == Exit.success)
        #expect(try d.cli(["key", "sign", "--label", "a-key"], input: [1], asUser: appB).status == Exit.notFound)
        #expect(try d.cli(["key", "public", "--label", "a-key"], asUser: appB).status == Exit.notFound)
        #expect(try d.cli(["key", "sign", "--label", "a-key"], input: [1], asUser: appA).status == Exit.success)
    }

    /// The free() hook of SecretMemoryTests in the daemon while it imports, lists and uses keys
    /// whose private bytes hold the marker: no freed block holds them.
    @Test func theDaemonFreesNoBlockHoldingAPrivateKey() throws {
        var template = Array("/tmp/kcfk.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let report = scratch + "/report"
        let d = try RunningDaemon(environment: [
            "LD_PRELOAD": try SecretMemoryTests.buildHook(into: scratch),
            "FREESCAN_MARKER": SecretMemoryTests.marker, "FREESCAN_REPORT": report,
        ])
        let c = KeychainConnection(socketPath: d.socketPath)
        // 32 bytes with the marker in them: a valid Ed25519 seed, X25519 scalar and P-256 scalar.
        let raw = bytes(SecretMemoryTests.marker) + [UInt8](repeating: 0x42, count: 32 - SecretMemoryTests.marker.utf8.count)
        let p256 = Array(try P256.Signing.PrivateKey(rawRepresentation: raw).x963Representation)
        let ed = try KeychainKey.importPrivateKey(SecretBytes(raw), type: .ed25519, label: "ed", connection: c)
        let x = try KeychainKey.importPrivateKey(SecretBytes(raw), type: .x25519, label: "x", connection: c)
        let p = try KeychainKey.importPrivateKey(SecretBytes(p256), type: .p256, label: "p", connection: c)
        for _ in 0..<3 {
            _ = try ed.sign(bytes("m"), algorithm: .ed25519)
            _ = try p.sign(bytes("m"), algorithm: .ecdsaMessageX962SHA256)
            _ = try p.verify([0x30, 0x00], for: bytes("m"), algorithm: .ecdsaMessageX962SHA256)
            _ = try x.agree(with: Array(Curve25519.KeyAgreement.PrivateKey().publicKey.rawRepresentation))
            _ = try p.agree(with: Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation), algorithm: .standardX963SHA256, requestedSize: 32)
            // Decryption too uses the key outside the store's lock (the public key, in find's answer).
            for key in [x, p] { _ = try key.decrypt(try key.encrypt(SecretBytes([1, 2, 3]))) }
            _ = try KeychainKey.find(connection: c)
        }
        _ = try KeychainKey.generate(.p256, label: "fresh", connection: c).sign([1], algorithm: .ecdsaMessageX962SHA256)
        for key in [ed, x, p] { try key.delete() }
        #expect(d.stop() == 0)
        let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("start ") }, "the hook did not load")
        let hits = lines.filter { $0.hasPrefix("hit ") }
        #expect(hits.isEmpty, "\(hits.count) freed block(s) held a private key: \(hits.prefix(5))")
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { Array(haystack[$0..<($0 + needle.count)]) == needle }
    }
}

extension RunningDaemon {
    /// A daemon open to two test users, each its own app with a private group (a.private, b.private).
    static func withTwoApps() throws -> (RunningDaemon, appA: UInt32, appB: UInt32) {
        let appA = try MultiUserTests.user("kcapp-a"), appB = try MultiUserTests.user("kcapp-b")
        let d = try RunningDaemon(config: """
            socket_mode = "0666"
            admin_uids = [0]
            [[app]]
            id = "app.a"
            uids = [\(appA)]
            groups = ["a.private"]
            [[app]]
            id = "app.b"
            uids = [\(appB)]
            groups = ["b.private"]
            """)
        return (d, appA, appB)
    }
}
