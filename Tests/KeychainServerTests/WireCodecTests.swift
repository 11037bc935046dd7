import KeychainModel
import KeychainProtocol
import Foundation
import Testing

@Suite("The wire codec")
struct WireCodecTests {
    static let requests: [Request] = [
        .add(["class": .string("genp"), "acct": .string("a"), "v_Data": .data([0, 1, 255])]),
        .copyMatching(["class": .string("inet"), "port": .int(443), "r_Data": .bool(true), "cdat": .date(7.5)]),
        .update(query: ["class": .string("genp")], changes: ["labl": .string("x")]),
        .delete(["class": .string("keys")]),
        .status, .lock,
        .unlock(passcode: [1, 2, 3]), .setPasscode(new: [4]), .changePasscode(old: [5], new: [6]),
        .removePasscode(current: [7]),
        .backupBegin(password: [8]), .backupRead(session: 3, offset: 1 << 33),
        .restoreBegin(size: 99), .restoreWrite(session: 1, offset: 0, bytes: [9, 9]),
        .restoreCommit(session: 2, password: SecretBytes([1]), onConflict: .skip),
        .asCaller(pid: 4242, startTime: 1 << 40, inner: .copyMatching(["class": .string("genp")])),
        .attributeSearch(collection: "login", exact: false, pairs: try! SecretServiceAttributes(["service": "s", "user": "u"])),
        .attributeSearch(collection: "session_2", exact: true, pairs: try! SecretServiceAttributes([:])),
        .attributeAdd(["class": .string("genp"), "xsat": .data([0, 0, 0, 0])], replace: true),
        .portalSecret(appID: "org.example.App"),
        .syncStatus, .syncDevices, .syncNow, .syncCreate(name: "laptop"),
        .syncJoin(circle: "0421 7730 9912 0000 1111 2222 3333 4444", name: "desk"),
        .syncApprove(device: String(repeating: "7", count: 32)),
        .syncRemove(device: "0421 7730 9912 0000 1111 2222 3333 4444"), .syncLeave,
    ]

    @Test func aSyncDeviceNameOrFingerprintTextPastItsLimitIsRefused() {
        for request in [Request.syncCreate(name: String(repeating: "n", count: 65)),
                        .syncJoin(circle: "1", name: String(repeating: "é", count: 33)),
                        .syncApprove(device: String(repeating: "1", count: 129)),
                        .syncRemove(device: String(repeating: "1", count: 129))] {
            #expect(throws: KeychainError(.param, "")) { try WireCodec.decodeRequest(WireCodec.encode(request)) }
        }
    }

    @Test func anAsCallerInsideAnAsCallerIsRefused() {
        let nested = Request.asCaller(pid: 1, startTime: 2, inner: .asCaller(pid: 3, startTime: 4, inner: .status))
        #expect(throws: KeychainError(.param, "")) { try WireCodec.decodeRequest(WireCodec.encode(nested)) }
    }

    @Test func badCollectionNamesAndAppIDsAreRefused() {
        for request in [Request.attributeSearch(collection: "Login", exact: false, pairs: try! SecretServiceAttributes([:])),
                        .attributeSearch(collection: "", exact: false, pairs: try! SecretServiceAttributes([:])),
                        .portalSecret(appID: "../x"), .portalSecret(appID: "")] {
            #expect(throws: KeychainError(.param, "")) { try WireCodec.decodeRequest(WireCodec.encode(request)) }
        }
    }

    @Test(arguments: requests)
    func everyRequestRoundTrips(request: Request) throws {
        #expect(try WireCodec.decodeRequest(WireCodec.encode(request)) == request)
    }

    @Test func responsesRoundTripInEveryShape() throws {
        for result: QueryResult in [.none, .single(.data([1])), .single(.persistentRef([2, 3])),
                                    .list([.attributes(["acct": .string("a")]), .data([])])] {
            let response = Response(status: -25300, message: "m", result: result)
            #expect(try WireCodec.decodeResponse(WireCodec.encode(response)) == response)
        }
    }

    /// Random bytes and mutated valid requests: the decoder returns a request or throws a
    /// KeychainError, never crashes or loops (the daemon feeds it whatever a client sends).
    /// Seeded (KEYCHAIN_FUZZ_SEED replays a run; the seed is in every failure message).
    @Test func arbitraryInputNeverCrashesTheDecoder() {
        let seed = ProcessInfo.processInfo.environment["KEYCHAIN_FUZZ_SEED"].flatMap(UInt64.init) ?? 0x6B65_7963_6861_696E
        var rng = SeededGenerator(state: seed)
        var decoded = 0
        var rejected = 0
        for i in 0..<20_000 {
            var bytes: [UInt8]
            if i % 2 == 0 {
                bytes = (0..<Int.random(in: 0...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                if !bytes.isEmpty { bytes[0] = 1 }  // mostly the right version, to get further in
            } else {
                bytes = Array(WireCodec.encode(Self.requests[i % Self.requests.count]))
                for _ in 0..<Int.random(in: 1...4, using: &rng) where !bytes.isEmpty {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                }
                if Bool.random(using: &rng) { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &rng))) }
            }
            do {
                _ = try WireCodec.decodeRequest(bytes)
                decoded += 1
            } catch {
                rejected += 1
                #expect([.param, .unimplemented].contains(error.status), "\(error), seed \(seed)")
            }
        }
        // Both paths are exercised in earnest: most mutations are refused, and a good share of
        // inputs (the mutations that hit nothing that matters) still decode.
        #expect(rejected > 10_000 && decoded > 500, "decoded \(decoded), rejected \(rejected), seed \(seed)")
    }
}
