import KeychainModel
import Testing
@testable import KeychainStore
import StoreTestSupport

/// A key whose item asks first (userPresence or devicePasscode in its accc) is opened (off the
/// store's lock: `FoundKeyCall.opened`) with the question its use must ask; whatever path runs
/// the call, it signs, decrypts or agrees only once the person's yes is on it (the daemon's
/// prompt gives it: StoreExecutor).
@Suite("Key uses that ask first")
struct KeyUseQuestionTests {
    static let sign: AttributeDictionary = ["algorithm": .string(KeySigningAlgorithm.ed25519.rawValue), "data": .data([1, 2])]

    @Test func aSignatureWithAKeyThatAsksRunsOnlyWithThePersonsYes() throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, .ed25519, ["accc": .string("ak;1")])
        var query = KeyTests.ref(attrs)
        query["u_OpPrompt"] = .string("deploy")
        let call = try t.store.keys.signature(query, parameters: Self.sign, scope: TemporaryStore.app).opened()
        #expect(call.question == KeyUseQuestion(label: "k", reason: "deploy", mayAsk: true))
        expectStatus(.interactionNotAllowed) { _ = try call.run() }
        expectStatus(.interactionNotAllowed) { _ = try t.store.keys.sign(query, parameters: Self.sign, scope: TemporaryStore.app) }
        guard case .data(let signature) = try call.allowedByPerson().run() else { Issue.record("no signature"); return }
        #expect(signature.count == 64)
    }

    @Test func failIsCarriedAndSkipIsParam() throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, .ed25519, ["accc": .string("ak;16")])
        var query = KeyTests.ref(attrs)
        query["u_AuthUI"] = .string("u_AuthUIF")
        #expect(try t.store.keys.signature(query, parameters: Self.sign, scope: TemporaryStore.app).opened().question?.mayAsk == false)
        query["u_AuthUI"] = .string("u_AuthUIS")
        expectStatus(.param) { _ = try t.store.keys.signature(query, parameters: Self.sign, scope: TemporaryStore.app) }
    }

    @Test func publicKeyAndVerificationAskNothingAndAPlainKeyNothingAtAll() throws {
        let t = try TemporaryStore()
        let asking = try KeyTests.generate(t, .ed25519, label: "a", ["accc": .string("ak;1")])
        #expect(try t.store.keys.publicKeyExport(KeyTests.ref(asking), scope: TemporaryStore.app).opened().question == nil)
        let verify: AttributeDictionary = Self.sign.merging(["signature": .data([UInt8](repeating: 0, count: 64))]) { $1 }
        #expect(try t.store.keys.verification(KeyTests.ref(asking), parameters: verify, scope: TemporaryStore.app).opened().question == nil)
        let plain = try KeyTests.generate(t, .ed25519, label: "p")
        #expect(try t.store.keys.signature(KeyTests.ref(plain), parameters: Self.sign, scope: TemporaryStore.app).opened().question == nil)
    }
}
