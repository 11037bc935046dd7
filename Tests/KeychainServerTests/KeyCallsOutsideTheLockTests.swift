#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Foundation
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import Synchronization
import Testing
@testable import KeychainServer
@testable import KeychainStore

/// Issue 30: a key call (sign, verify, agree, encrypt, decrypt, public key) takes its key out
/// under the store's lock and uses it outside it, so that key users use every core and a slow
/// one holds nobody up. What the handler (which runs under the lock) does with a key call is
/// the specification: it finds and opens the key, and leaves its use to its caller.
@Suite("Key calls are made outside the store's lock")
struct KeyCallsOutsideTheLockTests {
    static let ed25519 = "algid:sign:EdDSA:message-Ed25519"

    func sign(_ label: String) -> Request {
        .keySign(query: ["labl": .string(label)],
                 parameters: ["algorithm": .string(Self.ed25519), "data": .data(SecretBytes(Array("message".utf8)))])
    }

    /// One of each key call on an X25519 key "x" (agree, encrypt, decrypt, public key) and an
    /// Ed25519 key "e" (sign, verify), with the data each needs.
    static func keyCalls(peer: [UInt8], ciphertext: [UInt8]) -> [Request] {
        let x: AttributeDictionary = ["labl": .string("x")]
        let e: AttributeDictionary = ["labl": .string("e")]
        let sealed = KeyEncryptionAlgorithm.sealedBoxX25519XSalsa20Poly1305.rawValue
        return [
            .keyPublic(x),
            .keySign(query: e, parameters: ["algorithm": .string(ed25519), "data": .data([1])]),
            .keyVerify(query: e, parameters: ["algorithm": .string(ed25519), "data": .data([1]), "signature": .data([UInt8](repeating: 0, count: 64))]),
            .keyAgree(query: x, parameters: ["algorithm": .string(KeyAgreementAlgorithm.standard.rawValue), "peer": .data(SecretBytes(peer))]),
            .keyEncrypt(query: x, parameters: ["algorithm": .string(sealed), "data": .data([1, 2])]),
            .keyDecrypt(query: x, parameters: ["algorithm": .string(sealed), "data": .data(SecretBytes(ciphertext))]),
        ]
    }

    @Test func theHandlerHandsBackTheOpenedKeyAndSignsNothingItself() throws {
        let h = try LockInvariantTests.Harness()
        #expect(h.call(.keyGenerate(["type": .int(105), "labl": .string("signer")])) == 0)
        guard case .useKey(let prepared) = h.handler.begin(sign("signer"), from: h.caller, policy: h.policy) else {
            Issue.record("the handler did not leave the signing to its caller")
            return
        }
        // The store can be gone by the time the signature is made: it needs nothing of it.
        h.handler = nil
        let response = RequestHandler.answer(prepared)
        #expect(response.status == 0)
        guard case .single(.data(let signature)) = response.result else {
            Issue.record("no signature in \(response.result)")
            return
        }
        #expect(signature.count == 64)
    }

    @Test func everyKeyCallLeavesTheKeysUseToItsCallerAndAnswersAsBefore() throws {
        let h = try LockInvariantTests.Harness()
        #expect(h.call(.keyGenerate(["type": .int(Int64(KeyType.x25519.attributeNumber)), "labl": .string("x")])) == 0)
        #expect(h.call(.keyGenerate(["type": .int(Int64(KeyType.ed25519.attributeNumber)), "labl": .string("e")])) == 0)
        let peer = PrivateKey.generate(.x25519)
        guard case .single(.data(let ours)) = h.handler.handle(.keyPublic(["labl": .string("x")]), from: h.caller, policy: h.policy).result else {
            Issue.record("no public key")
            return
        }
        let ciphertext = try PublicKeyEncryptor.encrypt([7], to: Array(ours), type: .x25519,
                                                        algorithm: .sealedBoxX25519XSalsa20Poly1305)
        for request in Self.keyCalls(peer: peer.publicKey, ciphertext: ciphertext) {
            guard case .useKey(let prepared) = h.handler.begin(request, from: h.caller, policy: h.policy) else {
                Issue.record("\(request.operation) was made under the store's lock")
                continue
            }
            let response = RequestHandler.answer(prepared)
            #expect(response.status == 0, "\(request.operation): \(response.message)")
            if case .keyDecrypt = request { #expect(response.result == .single(.data([7]))) }
            if case .keyVerify = request { #expect(response.result == .single(.attributes(["valid": .bool(false)]))) }
            if case .keyAgree = request {
                let expected = try peer.agree(with: Array(ours), algorithm: .standard, requestedSize: nil, sharedInfo: [])
                #expect(response.result == .single(.data(expected)))
            }
        }
    }

    @Test func aKeyTheCallerCannotUseIsRefusedUnderTheLockWithoutAKeyOut() throws {
        let h = try LockInvariantTests.Harness()
        guard case .answered(let response) = h.handler.begin(sign("absent"), from: h.caller, policy: h.policy) else {
            Issue.record("a missing key was handed out for signing")
            return
        }
        #expect(response.status == KeychainStatus.itemNotFound.rawValue)
    }

    /// A key named by its persistent reference, as every client names one, is one row read
    /// under the lock, opened after it. The lock state still decides: while the keychain is
    /// locked that read refuses the key (its class key is not loaded), and no row leaves the
    /// store for it; once unlocked the same call signs.
    @Test func aLockedKeychainRefusesASignatureByPersistentReferenceUnderTheLock() throws {
        // No grace period: the lock call purges the class key at once.
        let h = try LockInvariantTests.Harness(grace: 0)
        let generated = h.handler.handle(.keyGenerate(["type": .int(105), "labl": .string("signer")]), from: h.caller, policy: h.policy)
        guard case .single(.attributes(let attributes)) = generated.result, let ref = attributes["v_PersistentRef"] else {
            Issue.record("no key generated: \(generated.message)")
            return
        }
        let sign = Request.keySign(query: ["v_PersistentRef": ref],
                                   parameters: ["algorithm": .string(Self.ed25519), "data": .data([1, 2, 3])])
        let passcode = SecretBytes(Array("1111".utf8))
        #expect(h.call(.setPasscode(new: passcode)) == 0)
        #expect(h.call(.lock) == 0)
        guard case .answered(let refused) = h.handler.begin(sign, from: h.caller, policy: h.policy) else {
            Issue.record("a locked key's row left the store")
            return
        }
        #expect(refused.status == KeychainStatus.interactionNotAllowed.rawValue)
        #expect(h.call(.unlock(passcode: passcode)) == 0)
        guard case .useKey(let found) = h.handler.begin(sign, from: h.caller, policy: h.policy) else {
            Issue.record("the unlocked key was not handed out")
            return
        }
        #expect(RequestHandler.answer(found).status == 0)
    }

    /// The attack: a client sends a key call that takes long (an X9.63 KDF over a frame of
    /// shared info hashes a megabyte 2,048 times, about 2 s of CPU) to hold every other client
    /// up; before issue 30's change every key call but a signature ran under the store's lock.
    /// Here the key call is held at a barrier where its key is used, until another client's get
    /// has been answered: under the store's lock that get could not be answered, and the two
    /// would wait for each other (made under the lock, the call never reaches the barrier). The waits are bounded only so that such a deadlock fails the test rather
    /// than hanging the run; a passing run never waits for them.
    @Test func aKeyCallInProgressDoesNotHoldUpAnotherClientsGet() throws {
        var template = Array("/tmp/kckey.XXXXXX".utf8CString)
        let directory = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keyInUse = DispatchSemaphore(value: 0)
        let getAnswered = DispatchSemaphore(value: 0)
        let heldUntilTheGet = Atomic<Bool>(false)
        let deadlock: DispatchTime = .now() + 120
        let executor = try StoreExecutor(
            store: try ItemStore(configuration: StoreConfiguration(stateDirectory: directory, argon2: .testingOnly)),
            policy: AccessPolicy(), lockPolicy: LockPolicy(), audit: nil,
            useKey: { call in
                keyInUse.signal()
                heldUntilTheGet.store(getAnswered.wait(timeout: deadlock) == .success, ordering: .relaxed)
                return RequestHandler.answer(call)
            },
            log: { _ in })
        defer { executor.stop() }
        let agreer = Caller(pid: getpid(), uid: getuid(), gid: getgid(), executable: nil)
        let reader = Caller(pid: getpid(), uid: getuid(), gid: getgid(), executable: nil)
        #expect(executor.submit(.keyGenerate(["type": .int(Int64(KeyType.x25519.attributeNumber)), "labl": .string("slow")]), from: agreer).status == 0)
        #expect(executor.submit(.add(["class": .string("genp"), "svce": .string("s"), "acct": .string("a"), "v_Data": .data([1])]), from: reader).status == 0)

        // What the attacker sends: a megabyte of shared info, 64 KiB asked for (2,048 hashes).
        let slowAgreement = Request.keyAgree(query: ["labl": .string("slow")], parameters: [
            "algorithm": .string(KeyAgreementAlgorithm.standardX963SHA256.rawValue),
            "peer": .data(SecretBytes(PrivateKey.generate(.x25519).publicKey)),
            "requestedSize": .int(1 << 16), "sharedInfo": .data(SecretBytes([UInt8](repeating: 7, count: 1 << 20)))])
        let agreed = Mutex<Response?>(nil)
        let agreementEnded = DispatchSemaphore(value: 0)
        let agreeing = Thread {
            agreed.withLock { $0 = executor.submit(slowAgreement, from: agreer) }
            agreementEnded.signal()
        }
        agreeing.start()
        try #require(keyInUse.wait(timeout: deadlock) == .success, "the key call never reached the key's use")
        let got = executor.submit(.copyMatching(["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true)]), from: reader)
        getAnswered.signal()
        #expect(got.result == .single(.data([1])))
        agreementEnded.wait()
        let answeredDuringTheKeyCall = heldUntilTheGet.load(ordering: .relaxed)
        #expect(answeredDuringTheKeyCall, "the get was answered only once the key call had ended")
        #expect(agreed.withLock { $0?.status } == 0)
    }
}
