import Crypto
import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Synchronization
import Testing

/// A hostile local caller against the daemon's keys and identities (docs/security.md, "Attacks
/// tried: keys and the ssh-agent"): each test is one attempt, and says what must hold.
@Suite("Attacks on keys through the daemon", .serialized)
struct KeyAttackTests {
    /// Tests/Certificates' P-256 key (Apple's 97-byte form) and the certificate made for it.
    func knownKeyAndCertificate() throws -> (stored: [UInt8], scalar: [UInt8], der: [UInt8]) {
        let stored = try CertificateTests().expected("p256.private")
        let der = Array(try Data(contentsOf: URL(fileURLWithPath: CertificateTests.directory + "/p256.der")))
        return (stored, Array(stored.suffix(32)), der)
    }

    /// One raw request and its raw answer frame, so that nothing in the client can hide bytes.
    func rawAnswer(_ socket: UnixSocket, _ request: Request) throws -> [UInt8] {
        try socket.writeAll(WireCodec.frame(request))
        return Array(try #require(try Frame.read(from: socket, idleTimeoutMs: 5000, frameTimeoutMs: 5000)))
    }

    func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { Array(haystack[$0..<($0 + needle.count)]) == needle }
    }

    /// Every subset of the return keys, one and all matches, by class, by persistent reference
    /// alone and as an identity: no answer frame holds the non-extractable key's scalar.
    @Test func noCombinationOfReturnKeysYieldsANonExtractableKeysScalar() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let (stored, scalar, der) = try knownKeyAndCertificate()
        _ = try KeychainKey.importPrivateKey(SecretBytes(stored), type: .p256, label: "sealed", connection: c)
        _ = try c.add(["class": .string("cert"), "v_Data": .data(der)])
        guard case .single(.persistentRef(let ref)) = try c.copyMatching(["class": .string("keys"), "r_PersistentRef": .bool(true)]) else {
            Issue.record("no persistent reference")
            return
        }
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        let returnKeys = ["r_Data", "r_Attributes", "r_PersistentRef", "r_Ref"]
        let targets: [AttributeDictionary] = [
            ["class": .string("keys")], ["class": .string("keys"), "kcls": .int(1)],
            ["v_PersistentRef": .data(ref)], ["class": .string("keys"), "v_PersistentRef": .data(ref)],
            ["class": .string("idnt")],
        ]
        var asked = 0
        for target in targets {
            for mask in 1..<(1 << returnKeys.count) {
                for limit in [nil, "m_LimitAll"] {
                    var query = target
                    for (bit, key) in returnKeys.enumerated() where mask & (1 << bit) != 0 { query[key] = .bool(true) }
                    if let limit { query["m_Limit"] = .string(limit) }
                    let answer = try rawAnswer(socket, .copyMatching(query))
                    #expect(!contains(answer, scalar), "\(query.keys.sorted())")
                    asked += 1
                }
            }
        }
        #expect(asked == 150)
        // The key calls answer with public values only.
        let keys: AttributeDictionary = ["class": .string("keys")]
        for request: Request in [.keyPublic(keys), .keyPublic(["v_PersistentRef": .data(ref)]),
                                 .keySign(query: keys, parameters: ["algorithm": .string(KeySigningAlgorithm.ecdsaDigestX962SHA256.rawValue),
                                                                    "data": .data([UInt8](repeating: 0, count: 32))])] {
            #expect(!contains(try rawAnswer(socket, request), scalar))
        }
    }

    /// Updates that would make the key extractable, replace or retype its bytes, or rename what
    /// it is, by the key's own query and through the identity, are errSecParam and change nothing.
    @Test func updatesThatWouldFreeOrRetypeASealedKeyAreRefused() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let (stored, _, der) = try knownKeyAndCertificate()
        let key = try KeychainKey.importPrivateKey(SecretBytes(stored), type: .p256, label: "sealed", connection: c)
        _ = try c.add(["class": .string("cert"), "v_Data": .data(der)])
        let changes: [AttributeDictionary] = [
            ["extr": .int(1)], ["extr": .string("1")], ["extr": .bool(true)], ["extr": .string("yes")],
            ["v_Data": .data([UInt8](repeating: 7, count: 97))], ["kcls": .int(2)], ["type": .int(106)], ["type": .int(105)],
            ["klbl": .data([1, 2, 3])], ["bsiz": .int(1)],
        ]
        for change in changes {
            for query: AttributeDictionary in [["class": .string("keys"), "labl": .string("sealed")], ["class": .string("idnt")]] {
                #expect(throws: KeychainError(.param, ""), "\(change) via \(query)") { try c.update(query, change) }
            }
        }
        #expect(throws: KeychainError(.param, "")) { _ = try c.copyMatching(["class": .string("keys"), "r_Data": .bool(true)]) }
        #expect(try KeychainKey.find(connection: c).map(\.publicKey) == [key.publicKey])
        // Moving it to another group of the caller's, or another class key, leaves it sealed.
        try c.update(["class": .string("keys")], ["pdmn": .string("ck")])
        #expect(throws: KeychainError(.param, "")) { _ = try c.copyMatching(["class": .string("keys"), "r_Data": .bool(true)]) }
    }

    /// A caller that brings a key's bytes and says extr 0 gets the same sealed key: it is stored
    /// and read back like a generated one (the caller knew the bytes; no one else learns them).
    @Test func aKeyAddedWithItsBytesAndExtrZeroIsSealedOnReadBack() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let seed = [UInt8](repeating: 9, count: 32)
        _ = try c.add(["class": .string("keys"), "kcls": .string("1"), "type": .string("105"), "extr": .int(0),
                       "labl": .string("brought"), "v_Data": .data(seed)])
        #expect(throws: KeychainError(.param, "")) { _ = try c.copyMatching(["class": .string("keys"), "r_Data": .bool(true)]) }
        guard case .single(.attributes(let a)) = try c.copyMatching(["class": .string("keys"), "r_Attributes": .bool(true), "r_Data": .bool(true)]) else {
            Issue.record("no attributes")
            return
        }
        #expect(a["v_Data"] == nil && a["extr"] == .int(0) && a["sens"] == .int(1))
    }

    /// An X25519 key given the sign flag still cannot sign as Ed25519 (type confusion); a
    /// low-order peer point gets errSecParam, not a shared secret that depends on no key; an
    /// agreement with the key's own public key is a hash-free ECDH value, not the scalar.
    @Test func x25519KeysRefuseTypeConfusionAndLowOrderPoints() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let scalar = Array(Curve25519.KeyAgreement.PrivateKey().rawRepresentation)
        let x = try KeychainKey.importPrivateKey(SecretBytes(scalar), type: .x25519, label: "x", connection: c)
        try c.update(["class": .string("keys"), "labl": .string("x")], ["sign": .int(1)])
        #expect(throws: KeychainError(.param, "")) { _ = try x.sign([1], algorithm: .ed25519) }
        #expect(throws: KeychainError(.param, "")) { _ = try x.sign([1], algorithm: .ecdsaMessageX962SHA256) }
        let lowOrder: [[UInt8]] = [
            [UInt8](repeating: 0, count: 32), [1] + [UInt8](repeating: 0, count: 31),
            // The order-8 point of RFC 7748's tests and p + 0 in non-canonical form.
            [0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4, 0x6a,
             0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49, 0xb8, 0x00],
            [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
        ]
        for point in lowOrder {
            #expect(throws: KeychainError(.param, ""), "\(point.prefix(2))") { _ = try x.agree(with: point) }
        }
        let own = Array(try x.agree(with: x.publicKey))
        #expect(own.count == 32 && own != scalar)
        #expect(throws: KeychainError(.param, "")) { _ = try x.agree(with: [UInt8](repeating: 1, count: 31)) }
    }

    /// A persistent reference forged or naming a deleted key finds nothing, as for any item.
    @Test func aForgedOrStalePersistentReferenceIsNotFound() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "gone", connection: c)
        guard case .single(.persistentRef(let ref)) = try c.copyMatching(["class": .string("keys"), "r_PersistentRef": .bool(true)]) else {
            Issue.record("no persistent reference")
            return
        }
        try key.delete()
        _ = try KeychainKey.generate(.ed25519, label: "other", connection: c)
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        var forged = ref
        forged[forged.count - 1] ^= 1
        let sign: AttributeDictionary = ["algorithm": .string(KeySigningAlgorithm.ed25519.rawValue), "data": .data([1])]
        for r in [ref, forged] {
            for request: Request in [.keySign(query: ["v_PersistentRef": .data(r)], parameters: sign), .keyPublic(["v_PersistentRef": .data(r)]),
                                     .copyMatching(["v_PersistentRef": .data(r), "r_Attributes": .bool(true)])] {
                let answer = try WireCodec.decodeResponse(SecretBytes(try rawAnswer(socket, request)))
                #expect(answer.status == KeychainStatus.itemNotFound.rawValue, "\(request.operation)")
            }
        }
    }

    /// Another app's key by label through every key command: the answer is the one a label no
    /// one uses gets, word for word, so existence in another group is not revealed.
    @Test func anotherAppsKeyLooksExactlyLikeNoKey() throws {
        let (d, appA, appB) = try RunningDaemon.withTwoApps()
        #expect(try d.cli(["key", "generate", "--type", "x25519", "--label", "a-key"], asUser: appA).status == Exit.success)
        for command in [["key", "public", "--label"], ["key", "sign", "--label"], ["key", "delete", "--label"],
                        ["csr", "--subject", "CN=x", "--key"]] {
            let theirs = try d.cli(command + ["a-key"], input: [1], asUser: appB)
            let nobodys = try d.cli(command + ["n-key"], input: [1], asUser: appB)
            #expect(theirs.status == Exit.notFound, "\(command)")
            #expect(theirs.status == nobodys.status && theirs.stderr.replacingOccurrences(of: "a-key", with: "n-key") == nobodys.stderr,
                    "\(command): \(theirs.stderr) vs \(nobodys.stderr)")
        }
        // The owner's own refusal (an X25519 key does not sign) differs: the group filter comes first.
        #expect(try d.cli(["key", "sign", "--label", "a-key"], input: [1], asUser: appA).status != Exit.notFound)
        #expect(try d.cli(["key", "public", "--label", "a-key", "--format", "raw"], asUser: appA).status == Exit.success)
    }

    /// Another app stores a certificate made for this app's key (so its pkhh is the key's
    /// klbl): no identity forms across the two groups, in either app's view.
    @Test func aCertificateInAnotherGroupNeverJoinsThisGroupsKey() throws {
        let appB = try MultiUserTests.user("kcapp-b")
        let d = try RunningDaemon(config: """
            socket_mode = "0666"
            [[app]]
            id = "app.a"
            uids = [0]
            groups = ["a.private"]
            [[app]]
            id = "app.b"
            uids = [\(appB)]
            groups = ["b.private"]
            """)
        let c = KeychainConnection(socketPath: d.socketPath)
        let (stored, _, _) = try knownKeyAndCertificate()
        _ = try KeychainKey.importPrivateKey(SecretBytes(stored), type: .p256, label: "a-key", connection: c)
        let added = try d.cli(["cert", "add", CertificateTests.directory + "/p256.der", "--label", "planted"], asUser: appB)
        #expect(added.status == Exit.success, "\(added.stderr)")
        #expect(throws: KeychainError(.itemNotFound, "")) {
            _ = try c.copyMatching(["class": .string("idnt"), "r_Attributes": .bool(true), "m_Limit": .string("m_LimitAll")])
        }
        #expect(throws: KeychainError(.itemNotFound, "")) { _ = try c.copyMatching(["class": .string("cert"), "r_Attributes": .bool(true)]) }
    }

    /// Certificates built to exhaust the parser: deep nesting, a length far past the data and
    /// a megabyte of junk are refused quickly, and the daemon goes on answering.
    /// Deep nesting, a length of 2 GiB and a megabyte of SEQUENCE tags: each is refused as
    /// what it is (not a certificate) and the daemon goes on answering. The client's own call
    /// timeout bounds a parse that would run away; no wall-clock bound of the test's own
    /// (it failed at 5.2 s once under a loaded machine: docs/flakes.md).
    @Test func hostileCertificateDERIsRefusedAndTheDaemonLives() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        var nested: [UInt8] = [0x05, 0x00]
        for _ in 0..<20_000 {
            let n = nested.count
            nested = [0x30, 0x83, UInt8(n >> 16), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] + nested
        }
        let hostile: [[UInt8]] = [
            nested,
            [0x30, 0x84, 0x7f, 0xff, 0xff, 0xff, 0x30, 0x00],
            [UInt8](repeating: 0x30, count: 1 << 20),
        ]
        for der in hostile {
            let refusal = #expect(throws: KeychainError.self) { _ = try c.add(["class": .string("cert"), "v_Data": .data(der)]) }
            #expect(refusal?.status == .unknownFormat, "\(der.prefix(4)): \(String(describing: refusal))")
            #expect(throws: Never.self) { _ = try c.status() }
        }
        #expect(throws: KeychainError(.itemNotFound, "")) { _ = try c.copyMatching(["class": .string("cert")]) }
    }

    /// The Python client, as a hostile script would use it: every return shape over a key it
    /// imported non-extractable, and the key calls; the seed appears in no result.
    @Test func thePythonClientGetsNoNonExtractableKeyBytes() throws {
        let d = try RunningDaemon()
        let clients = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("clients/python").path
        let script = """
            import sys, keychaind_client as k
            c = k.Connection(sys.argv[1])
            seed = bytes(range(100, 132))
            c.add({"class": "keys", "kcls": 1, "type": 105, "labl": "py", "extr": 0, "v_Data": seed})
            def has(x):
                if isinstance(x, (bytes, bytearray)): return seed in bytes(x)
                if isinstance(x, dict): return any(has(v) for v in x.values())
                if isinstance(x, (list, tuple)): return any(has(v) for v in x)
                return False
            leaks = 0
            for keys in [("r_Data",), ("r_Data", "r_Attributes"), ("r_Data", "r_PersistentRef"),
                         ("r_Data", "r_Attributes", "r_PersistentRef")]:
                for limit in [None, "m_LimitAll"]:
                    q = {"class": "keys", "labl": "py"}
                    for key in keys: q[key] = True
                    if limit: q["m_Limit"] = limit
                    try:
                        leaks += has(c.copy_matching(q))
                    except k.KeychainError as e:
                        assert e.status == -50, e.status
            leaks += has(c.key_public({"class": "keys", "labl": "py"}))
            leaks += has(c.key_sign({"class": "keys", "labl": "py"}, {"algorithm": "algid:sign:EdDSA:message-Ed25519", "data": b"m"}))
            print("leaks", leaks)
            """
        let r = try runExecutable("/usr/bin/python3", ["-c", script, d.socketPath],
                                  environment: ["PYTHONPATH": clients, "PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.text == "leaks 0\n", "\(r.text)")
    }

    /// Two connections signing as fast as they can (both cores busy) while another caller reads:
    /// each sign holds the store's lock for one signature only, so the reader's calls are
    /// answered between signatures, not after the flood. Each flooder stops by itself after
    /// 20,000 signatures, some thousand times what 20 fairly served reads wait behind, and the
    /// reads must all be answered while the flood still runs. How fast they are is the
    /// benchmark's question, not this test's.
    @Test func aSignFloodOnBothCoresLeavesOtherCallersServed() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        _ = try KeychainKey.generate(.p256, label: "busy", connection: c)
        _ = try c.add(["class": .string("genp"), "svce": .string("s"), "acct": .string("a"), "v_Data": .data([1])])
        let stop = Atomic<Bool>(false)
        let signed = Atomic<Int>(0)
        let floodersDone = Atomic<Int>(0)
        let flooders = (0..<2).map { _ in
            Thread {
                defer { floodersDone.add(1, ordering: .relaxed) }
                let own = KeychainConnection(socketPath: d.socketPath)
                guard let key = try? KeychainKey.find(label: "busy", connection: own).first else { return }
                for _ in 0..<20_000 where !stop.load(ordering: .relaxed) {
                    if (try? key.sign([1, 2, 3], algorithm: .ecdsaMessageX962SHA256)) != nil { signed.add(1, ordering: .relaxed) }
                }
            }
        }
        flooders.forEach { $0.start() }
        defer { stop.store(true, ordering: .relaxed) }
        for _ in 0..<1000 where signed.load(ordering: .relaxed) < 20 && floodersDone.load(ordering: .relaxed) == 0 { usleep(10_000) }
        try #require(signed.load(ordering: .relaxed) >= 20 && floodersDone.load(ordering: .relaxed) == 0, "the flood did not start")
        let signedBefore = signed.load(ordering: .relaxed)
        for i in 0..<20 {
            let found = try c.copyMatching(["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true)])
            #expect(found == .single(.data([1])), "read \(i)")
        }
        let floodStillRunning = floodersDone.load(ordering: .relaxed) == 0
        let signedDuringReads = signed.load(ordering: .relaxed) - signedBefore
        stop.store(true, ordering: .relaxed)
        #expect(floodStillRunning, "the reads were answered only once a flooder had made its 20,000 signatures")
        #expect(signedDuringReads > 0, "no signature was made while the reads were answered: they did not overlap the flood")
    }
}
