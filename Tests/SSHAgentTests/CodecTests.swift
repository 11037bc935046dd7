import KeychainModel
@testable import SSHAgent
import Testing

@Suite("The SSH agent wire codec")
struct CodecTests {
    func mpint(_ magnitude: [UInt8]) -> [UInt8] {
        var w = SSHWriter()
        w.unsignedMPInt(magnitude)
        return w.bytes
    }

    @Test func anMPIntWithTheTopBitSetGetsOneZeroByteInFront() {
        #expect(mpint([0x80, 0x01]) == [0, 0, 0, 3, 0x00, 0x80, 0x01])
    }

    @Test func anMPIntDropsLeadingZerosAndZeroIsEmpty() {
        #expect(mpint([0, 0, 0x7f]) == [0, 0, 0, 1, 0x7f])
        #expect(mpint([0, 0]) == [0, 0, 0, 0])
    }

    @Test func aNegativeOrPaddedMPIntIsRefused() {
        for body: [UInt8] in [[0x80], [0x00, 0x01], [0x00]] {
            var w = Wire()
            w.string(body)
            var r = SSHReader(SecretBytes(w.bytes))
            #expect(throws: KeychainError(.decode, "")) { try r.unsignedMPInt("x") }
        }
    }

    @Test func aStringLongerThanTheMessageIsADecodeErrorNotATrap() {
        var r = SSHReader(SecretBytes([0xff, 0xff, 0xff, 0xff, 1, 2]))
        #expect(throws: KeychainError(.decode, "")) { try r.string("x") }
        var short = SSHReader(SecretBytes([0, 0]))
        #expect(throws: KeychainError(.decode, "")) { try short.uint32() }
    }

    @Test func keyBlobsRoundTripForBothTypes() throws {
        for key in [TestKeys.ed25519().1, TestKeys.p256().1] {
            #expect(try SSHPublicKey(blob: key.blob) == key)
        }
    }

    @Test func anEd25519BlobIsTypeThenKey() {
        let key = try! SSHPublicKey(type: .ed25519, bytes: [UInt8](repeating: 7, count: 32))
        var w = Wire()
        w.string(Array("ssh-ed25519".utf8))
        w.string([UInt8](repeating: 7, count: 32))
        #expect(key.blob == w.bytes)
    }

    @Test func aP256BlobNamesTheCurveBeforeThePoint() {
        let point = [4] + [UInt8](repeating: 9, count: 64)
        let key = try! SSHPublicKey(type: .ecdsaP256, bytes: point)
        var w = Wire()
        w.string(Array("ecdsa-sha2-nistp256".utf8))
        w.string(Array("nistp256".utf8))
        w.string(point)
        #expect(key.blob == w.bytes)
    }

    @Test func anRSABlobIsUnimplemented() {
        var w = Wire()
        w.string(Array("ssh-rsa".utf8))
        w.string([1, 0, 1])
        w.string([0x00, 0xc1])
        #expect(throws: KeychainError(.unimplemented, "")) { try SSHPublicKey(blob: w.bytes) }
    }

    @Test func aBlobWithTrailingBytesOrAShortKeyIsRefused() {
        let key = TestKeys.ed25519().1
        #expect(throws: KeychainError(.decode, "")) { try SSHPublicKey(blob: key.blob + [0]) }
        var w = Wire()
        w.string(Array("ssh-ed25519".utf8))
        w.string([1, 2, 3])
        #expect(throws: KeychainError(.decode, "")) { try SSHPublicKey(blob: w.bytes) }
    }

    @Test func aDERSignatureBecomesTwoMPIntsInsideTheBlob() throws {
        // r has its top bit set (DER pads it with 0x00), s is short.
        let r: [UInt8] = [0x80] + [UInt8](repeating: 1, count: 31)
        let s: [UInt8] = [0x05]
        let der: [UInt8] = [0x30, UInt8(2 + 33 + 2 + 1), 0x02, 33, 0x00] + r + [0x02, 1, 0x05]
        let signature = try SSHSignature.ecdsaP256(der: der)
        #expect(signature == .ecdsaP256(r: r, s: s))
        var inner = Wire()
        inner.string([0] + r)
        inner.string(s)
        var blob = Wire()
        blob.string(Array("ecdsa-sha2-nistp256".utf8))
        blob.string(inner.bytes)
        #expect(signature.blob == blob.bytes)
        #expect(try SSHSignature(blob: signature.blob) == signature)
    }

    @Test func malformedDERIsADecodeError() {
        for der: [UInt8] in [[], [0x30], [0x30, 5, 2, 1, 1], [0x30, 3, 2, 1, 0x80], [0x31, 0], [0x30, 6, 2, 1, 1, 2, 1, 1, 0]] {
            #expect(throws: KeychainError(.decode, "")) { try SSHSignature.ecdsaP256(der: der) }
        }
    }

    @Test func anEd25519AddWhosePrivateHalfNamesAnotherPublicKeyIsRefused() {
        let (key, _) = TestKeys.ed25519()
        var message = TestKeys.addMessage(key, comment: "c")
        // The last byte of seed‖A sits just before the comment (4-byte length + "c").
        message[message.count - 6] ^= 1
        #expect(throws: KeychainError(.decode, "")) { try AgentRequest(message: SecretBytes(message)) }
    }

    @Test func aP256AddKeepsTheScalarPaddedTo32Bytes() throws {
        // Try keys until one has a leading zero byte, which the mpint drops.
        var key = TestKeys.p256().0
        while key.rawRepresentation.first != 0 { key = TestKeys.p256().0 }
        guard case .add(let parsed, let comment, let constraints) = try AgentRequest(message: SecretBytes(TestKeys.addMessage(key, comment: "laptop"))) else {
            Issue.record("not an add")
            return
        }
        #expect(Array(parsed.privateBytes) == Array(key.rawRepresentation))
        #expect(comment == "laptop")
        #expect(constraints.isEmpty)
    }

    @Test func constraintsAreDecodedAndAnUnknownOneIsAnError() throws {
        let (key, _) = TestKeys.ed25519()
        let withLifetime = TestKeys.addMessage(key, comment: "c", constraints: [1, 0, 0, 0, 60, 2])
        guard case .add(_, _, let constraints) = try AgentRequest(message: SecretBytes(withLifetime)) else {
            Issue.record("not an add")
            return
        }
        #expect(constraints == [.lifetime(seconds: 60), .confirm])
        let unknown = TestKeys.addMessage(key, comment: "c", constraints: [9])
        #expect(throws: KeychainError(.decode, "")) { try AgentRequest(message: SecretBytes(unknown)) }
    }

    @Test func theExtensionNameIsReadAndItsRawFieldsIgnored() throws {
        var w = Wire()
        w.byte(27)
        w.string(Array("session-bind@openssh.com".utf8))
        w.string([1, 2, 3])
        w.byte(0)
        guard case .extension(let name) = try AgentRequest(message: SecretBytes(w.bytes)) else {
            Issue.record("not an extension")
            return
        }
        #expect(name == "session-bind@openssh.com")
    }

    @Test func anIdentitiesAnswerRoundTrips() throws {
        let list = [AgentIdentity(key: TestKeys.ed25519().1, comment: "a"), AgentIdentity(key: TestKeys.p256().1, comment: "b")]
        #expect(try AgentResponse(message: AgentResponse.identities(list).message) == .identities(list))
    }

    @Test func base64MatchesTheStandardAlphabetWithPadding() {
        #expect(Base64.encode(Array("".utf8)) == "")
        #expect(Base64.encode(Array("f".utf8)) == "Zg==")
        #expect(Base64.encode(Array("fo".utf8)) == "Zm8=")
        #expect(Base64.encode(Array("foobar".utf8)) == "Zm9vYmFy")
        #expect(Base64.encode([0xfb, 0xff]) == "+/8=")
    }
}
