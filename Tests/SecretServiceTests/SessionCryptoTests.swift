import Foundation
import KeychainModel
@testable import SecretService
import Testing

/// The DH session crypto against python3-secretstorage's own client code (Tests/SecretServiceScripts/dh_peer.py):
/// keys must agree both ways, including the 1-in-256 cases where a public value or the shared
/// value has a leading zero byte.
@Suite("Secret Service session crypto")
struct SessionCryptoTests {
    @Test func keysAgreeWithSecretstorage() throws {
        let peer = try PythonPeer()
        for n in 0..<20 { try roundTrip(peer, n, clientKey: "any") }
    }

    @Test func aShortClientPublicValueIsAccepted() throws {
        let peer = try PythonPeer()
        for n in 0..<3 { try roundTrip(peer, n, clientKey: "short") }
    }

    @Test func aShortSharedValueIsLeftPadded() throws {
        let peer = try PythonPeer()
        let clientPublic = try hex(peer.ask("new any"))
        // Search for a server exponent whose shared value has a leading zero byte.
        var found: (serverPublic: [UInt8], z: SecretBytes)?
        for _ in 0..<4096 {
            let exponent = SecretBytes((0..<128).map { _ in UInt8.random(in: 0...255) })
            let attempt = try SessionCrypto.agreement(clientPublic: clientPublic, exponent: exponent)
            if attempt.z[0] == 0 { found = attempt; break }
        }
        let agreed = try #require(found)
        try exchange(peer, serverPublic: agreed.serverPublic, key: SessionCrypto.hkdf(agreed.z), plaintext: Array("short Z".utf8))
    }

    @Test(arguments: [[UInt8](), [1], [0, 1], [UInt8](repeating: 0xFF, count: 128), [UInt8](repeating: 2, count: 129)])
    func aPublicValueOutsideTheGroupIsRefused(_ value: [UInt8]) {
        #expect(throws: KeychainError(.param, "")) { try SessionCrypto.agree(clientPublic: value) }
    }

    @Test func pMinusOneIsRefused() {
        // p − 1 ends in …FE: the one public value whose powers are ±1.
        let p = SessionCryptoTests.prime
        let pMinusOne = Array(p.dropLast()) + [p.last! - 1]
        #expect(throws: KeychainError(.param, "")) { try SessionCrypto.agree(clientPublic: pMinusOne) }
    }

    @Test func sixteenBytesEncryptToThirtyTwo() throws {
        let key = SecretBytes([UInt8](repeating: 7, count: 16))
        let sealed = try SessionCrypto.encrypt(SecretBytes([UInt8](repeating: 1, count: 16)), key: key)
        #expect(sealed.iv.count == 16 && sealed.ciphertext.count == 32)
        #expect(Array(try SessionCrypto.decrypt(sealed.ciphertext, iv: sealed.iv, key: key)) == [UInt8](repeating: 1, count: 16))
    }

    @Test func anEmptySecretEncryptsToOneBlock() throws {
        let key = SecretBytes([UInt8](repeating: 7, count: 16))
        let sealed = try SessionCrypto.encrypt(.empty, key: key)
        #expect(sealed.ciphertext.count == 16)
        #expect(try SessionCrypto.decrypt(sealed.ciphertext, iv: sealed.iv, key: key).isEmpty)
    }

    @Test func badIVEmptyValueAndBadPaddingAreParamErrors() throws {
        let key = SecretBytes([UInt8](repeating: 7, count: 16))
        let sealed = try SessionCrypto.encrypt(SecretBytes(Array("value".utf8)), key: key)
        #expect(throws: KeychainError(.param, "")) { try SessionCrypto.decrypt(sealed.ciphertext, iv: Array(sealed.iv.prefix(15)), key: key) }
        #expect(throws: KeychainError(.param, "")) { try SessionCrypto.decrypt([], iv: sealed.iv, key: key) }
        #expect(throws: KeychainError(.param, "")) { try SessionCrypto.decrypt(Array(sealed.ciphertext.prefix(15)), iv: sealed.iv, key: key) }
        let wrongKey = SecretBytes([UInt8](repeating: 8, count: 16))
        // A wrong key leaves valid padding 1 time in about 256: three tries make a false pass unlikely.
        var refused = 0
        for _ in 0..<3 {
            let again = try SessionCrypto.encrypt(SecretBytes(Array("value".utf8)), key: key)
            if (try? SessionCrypto.decrypt(again.ciphertext, iv: again.iv, key: wrongKey)) == nil { refused += 1 }
        }
        #expect(refused >= 2)
    }

    // MARK: Helpers

    static let prime: [UInt8] = hex("""
        FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD\
        EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED\
        EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF
        """)

    private func roundTrip(_ peer: PythonPeer, _ n: Int, clientKey: String) throws {
        let clientPublic = try hex(peer.ask("new \(clientKey)"))
        if clientKey == "short" { #expect(clientPublic.count < 128) }
        let agreed = try SessionCrypto.agree(clientPublic: clientPublic)
        #expect(agreed.serverPublic.count == 128)
        try exchange(peer, serverPublic: agreed.serverPublic, key: agreed.key, plaintext: Array("secret \(n)".utf8))
    }

    private func exchange(_ peer: PythonPeer, serverPublic: [UInt8], key: SecretBytes, plaintext: [UInt8]) throws {
        let sealed = try SessionCrypto.encrypt(SecretBytes(plaintext), key: key)
        let answer = try peer.ask("server \(hexString(serverPublic)) \(hexString(sealed.iv)) \(hexString(sealed.ciphertext))")
            .split(separator: " ").map(String.init)
        try #require(answer.count == 3)
        #expect(hex(answer[0]) == plaintext, "the client decrypted something else")
        let back = try SessionCrypto.decrypt(hex(answer[2]), iv: hex(answer[1]), key: key)
        #expect(Array(back) == plaintext, "the client's encryption did not decrypt")
    }
}

/// dh_peer.py, kept running for one test.
final class PythonPeer {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var buffered: [UInt8] = []

    init() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../SecretServiceScripts/dh_peer.py").standardized.path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")  // Debian's, with python3-secretstorage
        process.arguments = [script]
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    deinit {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    func ask(_ line: String) throws -> String {
        try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
        while true {
            if let newline = buffered.firstIndex(of: 10) {
                let answer = String(decoding: buffered[..<newline], as: UTF8.self)
                buffered.removeFirst(newline + 1)
                return answer
            }
            let more = output.fileHandleForReading.availableData
            guard !more.isEmpty else { throw KeychainError(.io, "dh_peer.py stopped answering") }
            buffered += more
        }
    }
}

func hex(_ text: String) -> [UInt8] {
    let digits = Array(text.utf8)
    return stride(from: 0, to: digits.count - 1, by: 2).map { UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)! }
}

func hexString(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
