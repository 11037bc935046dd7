// libFuzzer target: the SSH agent's decoders (Sources/SSHAgent), which read whatever a local
// process of the agent's uid sends, and the answers a client of an agent decodes. A request
// must decode to a value or errSecDecode, and the agent must answer it with a message that
// decodes again (an in-memory source stands in for keychaind). Key blobs, signature blobs and
// DER signatures must give a value or a KeychainError, and a value must encode to the input.
import KeychainModel
import SSHAgent

/// Answers every call with fixed values: the fuzzer explores the protocol, not keys.
struct FixedSource: AgentKeySource {
    static let key = try! SSHPublicKey(type: .ed25519, bytes: [UInt8](repeating: 7, count: 32))
    func identities() throws(KeychainError) -> [AgentIdentity] { [AgentIdentity(key: Self.key, comment: "fuzz")] }
    func sign(_ data: [UInt8], with key: SSHPublicKey, reason: String) throws(KeychainError) -> SSHSignature {
        guard key == Self.key else { throw KeychainError(.itemNotFound, "no such key") }
        return .ed25519([UInt8](repeating: 1, count: 64))
    }
    func add(_ key: SSHPrivateKey, comment: String, confirmEachUse: Bool) throws(KeychainError) {}
}

let agent = KeyAgent(source: FixedSource(), log: { _ in })

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let message = SecretBytes(input)
    do {
        _ = try AgentRequest(message: message)
    } catch {
        require(error.status == .decode, "a request failed with \(error.status)")
    }
    // Never the lock: a wrong unlock sleeps, by design.
    if input.first != 22 {
        let answer = agent.answer(message).message
        require((try? AgentResponse(message: answer)) != nil, "the agent's answer does not decode")
    }
    if let response = try? AgentResponse(message: input) {
        require(response.message == input, "an answer does not re-encode to its bytes")
    }
    if let key = try? SSHPublicKey(blob: input) {
        require(key.blob == input, "a key blob does not re-encode to its bytes")
    }
    if let signature = try? SSHSignature(blob: input), case .ed25519 = signature {
        require(signature.blob == input, "a signature blob does not re-encode to its bytes")
    }
    if let signature = try? SSHSignature.ecdsaP256(der: input), case .ecdsaP256(let r, let s) = signature {
        require(r.count <= 32 && s.count <= 32 && r.first != 0 && s.first != 0, "a DER signature gave unnormalised integers")
    }
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        var w = SSHWriter()
        func message(_ build: (inout SSHWriter) -> Void) -> [UInt8] {
            w = SSHWriter()
            build(&w)
            return w.bytes
        }
        let p256 = try! SSHPublicKey(type: .ecdsaP256, bytes: [4] + [UInt8](repeating: 3, count: 64))
        return [
            Seed("request-identities", [11]),
            Seed("sign-ed25519", message { $0.byte(13); $0.string(FixedSource.key.blob); $0.string(Array("data".utf8)); $0.uint32(0) }),
            Seed("sign-rsa-flags", message { $0.byte(13); $0.string(p256.blob); $0.string([1]); $0.uint32(4) }),
            Seed("add-ed25519", message {
                $0.byte(17); $0.string("ssh-ed25519"); $0.string(FixedSource.key.bytes)
                $0.string([UInt8](repeating: 9, count: 32) + FixedSource.key.bytes); $0.string("comment")
            }),
            Seed("add-ecdsa-constrained", message {
                $0.byte(25); $0.string("ecdsa-sha2-nistp256"); $0.string("nistp256"); $0.string(p256.bytes)
                $0.unsignedMPInt([0x80] + [UInt8](repeating: 5, count: 31)); $0.string("c")
                $0.byte(1); $0.uint32(60); $0.byte(2); $0.byte(255); $0.string("restrict-destination-v00@openssh.com")
            }),
            Seed("remove", message { $0.byte(18); $0.string(FixedSource.key.blob) }),
            Seed("remove-all", [19]),
            Seed("unlock", message { $0.byte(23); $0.string("passphrase") }),
            Seed("extension", message { $0.byte(27); $0.string("session-bind@openssh.com"); $0.string([1, 2]); $0.byte(0) }),
            Seed("answer-identities", AgentResponse.identities([AgentIdentity(key: p256, comment: "k")]).message),
            Seed("answer-ecdsa-signature", AgentResponse.signature(.ecdsaP256(r: [0x80, 1], s: [5])).message),
            Seed("der-signature", [0x30, 8, 0x02, 3, 0x00, 0x80, 1, 0x02, 1, 5]),
        ]
    }
    return 0
}
