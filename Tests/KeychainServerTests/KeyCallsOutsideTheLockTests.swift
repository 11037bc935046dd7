#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
import Testing
@testable import KeychainServer
@testable import KeychainStore

/// Issue 30: a signature takes its key out under the store's lock and is made outside it, so
/// that signers use every core. What the handler (which runs under the lock) does with a sign
/// call is the specification: it finds and opens the key, and leaves the signing to its caller.
@Suite("A signature is made outside the store's lock")
struct SignatureOutsideTheLockTests {
    static let ed25519 = "algid:sign:EdDSA:message-Ed25519"

    func sign(_ label: String) -> Request {
        .keySign(query: ["labl": .string(label)],
                 parameters: ["algorithm": .string(Self.ed25519), "data": .data(SecretBytes(Array("message".utf8)))])
    }

    @Test func theHandlerHandsBackTheOpenedKeyAndSignsNothingItself() throws {
        let h = try LockInvariantTests.Harness()
        #expect(h.call(.keyGenerate(["type": .int(105), "labl": .string("signer")])) == 0)
        guard case .sign(let prepared) = h.handler.begin(sign("signer"), from: h.caller, policy: h.policy) else {
            Issue.record("the handler did not leave the signing to its caller")
            return
        }
        // The store can be gone by the time the signature is made: it needs nothing of it.
        h.handler = nil
        let response = RequestHandler.signed(prepared)
        #expect(response.status == 0)
        guard case .single(.data(let signature)) = response.result else {
            Issue.record("no signature in \(response.result)")
            return
        }
        #expect(signature.count == 64)
    }

    @Test func aKeyTheCallerCannotUseIsRefusedUnderTheLockWithoutAKeyOut() throws {
        let h = try LockInvariantTests.Harness()
        guard case .answered(let response) = h.handler.begin(sign("absent"), from: h.caller, policy: h.policy) else {
            Issue.record("a missing key was handed out for signing")
            return
        }
        #expect(response.status == KeychainStatus.itemNotFound.rawValue)
    }
}
