import Crypto
#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
import SSHAgent
import Synchronization
import Testing

/// What each request does, against the in-memory key source.
@Suite("The SSH agent's answers")
struct AgentTests {
    let source = MemoryKeySource()
    let logged = LogLines()
    var agent: KeyAgent { KeyAgent(source: source, log: logged.append) }

    func send(_ agent: KeyAgent, _ message: [UInt8]) -> AgentResponse { agent.answer(SecretBytes(message)) }
    func listed(_ agent: KeyAgent) -> [AgentIdentity] {
        guard case .identities(let list) = send(agent, [11]) else { return [] }
        return list
    }

    @Test func anAddedEd25519KeyIsListedWithItsComment() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        #expect(send(agent, TestKeys.addMessage(key, comment: "me@laptop")) == .success)
        #expect(listed(agent) == [AgentIdentity(key: pub, comment: "me@laptop")])
    }

    @Test func anEd25519SignatureVerifiesOverTheRawData() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        let data = Array("session id and userauth request".utf8)
        guard case .signature(let signature) = send(agent, TestKeys.signMessage(pub, data)) else {
            Issue.record("no signature")
            return
        }
        #expect(TestKeys.verifies(signature, data, by: pub))
    }

    @Test func aP256SignatureVerifiesAsSSHDefinesIt() {
        let agent = agent
        let (key, pub) = TestKeys.p256()
        #expect(send(agent, TestKeys.addMessage(key, comment: "k")) == .success)
        let data = Array("to sign".utf8)
        for _ in 0..<20 {  // r and s with and without their top bit set
            guard case .signature(let signature) = send(agent, TestKeys.signMessage(pub, data)) else {
                Issue.record("no signature")
                return
            }
            #expect(TestKeys.verifies(signature, data, by: pub))
        }
    }

    @Test func rsaSignatureFlagsAreRefused() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        #expect(send(agent, TestKeys.signMessage(pub, [1], flags: 2)) == .failure)
        #expect(send(agent, TestKeys.signMessage(pub, [1], flags: 4)) == .failure)
    }

    @Test func aKeyTheSourceDoesNotHoldIsNotSignedWith() {
        #expect(send(agent, TestKeys.signMessage(TestKeys.ed25519().1, [1])) == .failure)
    }

    @Test func aLifetimeOrDestinationConstraintFailsAndStoresNothing() {
        let agent = agent
        let (key, _) = TestKeys.ed25519()
        #expect(send(agent, TestKeys.addMessage(key, comment: "k", constraints: [1, 0, 0, 0, 60])) == .failure)
        #expect(send(agent, TestKeys.addMessage(key, comment: "k", constraints: [2, 1, 0, 0, 0, 60])) == .failure)
        #expect(send(agent, TestKeys.addMessage(key, comment: "k", constraints: [255, 0, 0, 0, 1, 0x78])) == .failure)
        #expect(source.count == 0)
    }

    /// ssh-add -c: the key is stored so that each signature asks the person first (keychaind's
    /// prompt: KeychainKeySource stores it with userPresence).
    @Test func aConfirmConstraintStoresAKeyThatAsksBeforeEachSignature() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        #expect(send(agent, TestKeys.addMessage(key, comment: "k", constraints: [2])) == .success)
        #expect(source.confirmed.withLock { $0 } == [pub])
        #expect(listed(agent).map(\.key) == [pub])
    }

    @Test func aSignatureCarriesTheReasonNamingTheAsker() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        let me = PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid())
        guard case .signature = agent.answer(SecretBytes(TestKeys.signMessage(pub, [1])), from: me) else {
            Issue.record("no signature")
            return
        }
        let reasons = source.reasons.withLock { $0 }
        #expect(reasons.count == 1)
        #expect(reasons.first?.hasPrefix("an SSH signature for /") == true, "\(reasons)")
        #expect(reasons.first?.hasSuffix(" (pid \(getpid())) through keychain ssh-agent") == true, "\(reasons)")
    }

    @Test func aSignatureThePersonRefusesIsAFailure() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k", constraints: [2]))
        source.failure.withLock { $0 = KeychainError(.userCanceled, "the person at the keychain's prompt cancelled") }
        #expect(send(agent, TestKeys.signMessage(pub, [1])) == .failure)
        #expect(logged.lines.withLock { $0.contains { $0.contains("said no") } })
    }

    @Test func anRSAKeyAddFails() {
        var w = Wire()
        w.byte(17)
        w.string(Array("ssh-rsa".utf8))
        w.string([0xc1])
        #expect(send(agent, w.bytes) == .failure)
    }

    @Test func removeHidesTheKeyFromTheAgentButKeepsItInTheSource() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        var remove = Wire()
        remove.byte(18)
        remove.string(pub.blob)
        #expect(send(agent, remove.bytes) == .success)
        #expect(listed(agent).isEmpty)
        #expect(send(agent, TestKeys.signMessage(pub, [1])) == .failure)
        #expect(source.count == 1)
        #expect(send(agent, remove.bytes) == .failure)  // not in view any more
    }

    @Test func addingAHiddenKeyAgainBringsItBackWithoutASecondCopy() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        _ = send(agent, [19])
        #expect(listed(agent).isEmpty)
        #expect(send(agent, TestKeys.addMessage(key, comment: "k")) == .success)
        #expect(listed(agent).map(\.key) == [pub])
        #expect(source.count == 1)
    }

    @Test func removeAllHidesEveryKey() {
        let agent = agent
        _ = send(agent, TestKeys.addMessage(TestKeys.ed25519().0, comment: "a"))
        _ = send(agent, TestKeys.addMessage(TestKeys.p256().0, comment: "b"))
        #expect(send(agent, [19]) == .success)
        #expect(listed(agent).isEmpty)
        #expect(source.count == 2)
    }

    func lockMessage(_ type: UInt8, _ passphrase: String) -> [UInt8] {
        var w = Wire()
        w.byte(type)
        w.string(Array(passphrase.utf8))
        return w.bytes
    }

    @Test func aLockedAgentListsNothingAndSignsNothingUntilUnlockedWithThePassphrase() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        #expect(send(agent, lockMessage(22, "pw")) == .success)
        #expect(send(agent, lockMessage(22, "pw")) == .failure)  // already locked
        #expect(listed(agent).isEmpty)
        #expect(send(agent, TestKeys.signMessage(pub, [1])) == .failure)
        #expect(send(agent, TestKeys.addMessage(TestKeys.p256().0, comment: "x")) == .failure)
        #expect(send(agent, lockMessage(23, "wrong")) == .failure)
        #expect(send(agent, lockMessage(23, "pw")) == .success)
        #expect(listed(agent).map(\.key) == [pub])
        #expect(send(agent, lockMessage(23, "pw")) == .failure)  // not locked
    }

    @Test func everyExtensionGetsFailure() {
        var w = Wire()
        w.byte(27)
        w.string(Array("session-bind@openssh.com".utf8))
        #expect(send(agent, w.bytes) == .failure)
        var q = Wire()
        q.byte(27)
        q.string(Array("query".utf8))
        #expect(send(agent, q.bytes) == .failure)
    }

    @Test func unknownAndSmartcardMessagesGetFailure() {
        for type: UInt8 in [0, 1, 20, 21, 26, 99, 255] {
            #expect(send(agent, [type]) == .failure)
        }
    }

    @Test func aMalformedRequestGetsFailure() {
        #expect(send(agent, [13, 0, 0, 0, 9, 1]) == .failure)
        #expect(send(agent, [11, 0]) == .failure)
    }

    @Test func aLockedKeychainFailsTheSignatureAndLogsHowToUnlock() {
        let agent = agent
        let (key, pub) = TestKeys.ed25519()
        _ = send(agent, TestKeys.addMessage(key, comment: "k"))
        source.failure.withLock { $0 = KeychainError(.interactionNotAllowed, "locked") }
        #expect(send(agent, TestKeys.signMessage(pub, [1])) == .failure)
        #expect(logged.lines.withLock { $0 }.contains { $0.contains("keychain unlock") })
    }
}

/// What the agent logged.
final class LogLines: Sendable {
    let lines = Mutex<[String]>([])
    @Sendable func append(_ line: String) { lines.withLock { $0.append(line) } }
}
