import Foundation
@testable import KeychainClient
import KeychainModel
import Testing

@Suite("KeychainClient against the real daemon", .serialized)
struct ClientTests {
    @Test func aConnectionDoesNotBusyPollUnlessAsked() {
        #expect(KeychainConnection(socketPath: "/nonexistent").busyPollMicroseconds == 0)
    }

    /// Back-to-back reads are where both sides watch instead of sleeping (BusyPoll on the
    /// daemon, ReadPace in the client): answers must be the same either way.
    @Test func backToBackReadsAnswerTheSameWhetherTheClientWatchesOrSleeps() throws {
        let d = try RunningDaemon()
        let watching = KeychainConnection(socketPath: d.socketPath, busyPollMicroseconds: 40)  // opt-in
        let sleeping = KeychainConnection(socketPath: d.socketPath, busyPollMicroseconds: 0)
        for i in 0..<20 {
            try watching.add(["class": .string("genp"), "svce": .string("b2b"), "acct": .string("a\(i)"),
                              "v_Data": .data(bytes("secret \(i)"))])
        }
        for round in 0..<300 {
            let i = round % 20
            let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("b2b"),
                                              "acct": .string("a\(i)"), "r_Data": .bool(true)]
            #expect(try watching.copyMatching(query) == .single(.data(bytes("secret \(i)"))))
            #expect(try sleeping.copyMatching(query) == .single(.data(bytes("secret \(i)"))))
        }
        // The answers agree either way, so only the connections can tell which wait they used.
        #expect(watching.watchedReads > 0, "the opted-in connection never watched for an answer")
        #expect(sleeping.watchedReads == 0, "a connection watched without being asked to")
        expectStatus(.itemNotFound) {
            _ = try watching.copyMatching(["class": .string("genp"), "svce": .string("b2b"), "acct": .string("none")])
        }
    }

    @Test func aClientLeavingRightAfterBackToBackCallsIsACleanDisconnect() throws {
        let d = try RunningDaemon()
        for _ in 0..<5 {
            var connection: KeychainConnection? = KeychainConnection(socketPath: d.socketPath)
            for _ in 0..<50 { _ = try connection!.status() }
            connection = nil  // closes the socket while the daemon may be watching it
            _ = connection
        }
        _ = try KeychainConnection(socketPath: d.socketPath).status()
        #expect(!d.log.contains("mid-frame"), "a close between frames was logged as a failure")
    }

    @Test func errorsCarryTheDaemonsStatusAndMessage() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        do {
            try c.add(["class": .string("genp"), "srvr": .string("x")])
            Issue.record("expected an error")
        } catch {
            #expect(error.status == .noSuchAttribute)
            #expect(error.message.contains("srvr"))
        }
    }

    @Test func typedKeychainGetsSetsAndRemoves() throws {
        let d = try RunningDaemon()
        let keychain = Keychain(service: "api.example.com", connection: KeychainConnection(socketPath: d.socketPath))
        #expect(try keychain.string(forKey: "alice") == nil)
        try keychain.set("token-1", forKey: "alice")
        try keychain.set("token-2", forKey: "alice")  // replaces
        try keychain.set([0, 1, 2], forKey: "bob")
        #expect(try keychain.string(forKey: "alice") == "token-2")
        #expect(try keychain.data(forKey: "bob") == [0, 1, 2])
        #expect(try keychain.allKeys().sorted() == ["alice", "bob"])
        #expect(try keychain.contains("bob"))
        try keychain.remove(forKey: "bob")
        try keychain.remove(forKey: "bob")  // absent: no error
        #expect(try keychain.allKeys() == ["alice"])
        try keychain.removeAll()
        #expect(try keychain.allKeys() == [])
    }

    @Test func typedKeychainSetChangesAccessibility() throws {
        let d = try RunningDaemon()
        let connection = KeychainConnection(socketPath: d.socketPath)
        let keychain = Keychain(service: "s", connection: connection)
        try keychain.set("v", forKey: "k")
        try keychain.accessibility(.afterFirstUnlock).set("v", forKey: "k")
        guard case .single(.attributes(let a)) = try connection.copyMatching(
            ["class": .string("genp"), "svce": .string("s"), "r_Attributes": .bool(true)]) else {
            Issue.record("no attributes")
            return
        }
        #expect(a["pdmn"] == .string("ck"))
    }

    @Test func oneConnectionIsSafeToShareAcrossThreads() async throws {
        let d = try RunningDaemon()
        let keychain = Keychain(service: "shared", connection: KeychainConnection(socketPath: d.socketPath))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<16 {
                group.addTask {
                    try await keychain.set("value-\(i)", forKey: "key-\(i)")
                    #expect(try await keychain.string(forKey: "key-\(i)") == "value-\(i)")
                }
            }
            try await group.waitForAll()
        }
        #expect(try await keychain.allKeys().count == 16)
    }

    @Test func theSameConnectionReconnectsAfterADaemonRestart() throws {
        let d = try RunningDaemon()
        let keychain = Keychain(service: "s", connection: KeychainConnection(socketPath: d.socketPath))
        try keychain.set("kept", forKey: "k")
        try d.restart()
        #expect(try keychain.string(forKey: "k") == "kept")
        try keychain.set("after", forKey: "k2")  // a write on the renewed connection
        #expect(try keychain.string(forKey: "k2") == "after")
    }

    @Test func unreachableDaemonIsServiceNotAvailableWithAHint() throws {
        let c = KeychainConnection(socketPath: "/tmp/no-such-keychaind.sock")
        do {
            _ = try c.status()
            Issue.record("expected an error")
        } catch {
            #expect(error.status == .serviceNotAvailable)
            #expect(error.message.contains("keychaind"))
        }
    }

    @Test func socketPathComesFromTheEnvironmentWhenNotGiven() throws {
        setenv("KEYCHAIN_SOCKET", "/tmp/from-env.sock", 1)
        defer { unsetenv("KEYCHAIN_SOCKET") }
        #expect(KeychainConnection().socketPath == "/tmp/from-env.sock")
        #expect(KeychainConnection(socketPath: "/tmp/explicit.sock").socketPath == "/tmp/explicit.sock")
    }

    @Test func statusReportsVersionLockStateAndPasscode() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        var info = try c.status()
        #expect(info["state"] == .string("unlocked"))
        #expect(info["passcode"] == .bool(false))
        #expect(info["version"] != nil)
        try c.setPasscode(bytes("pin"))
        try d.restart()
        info = try c.status()
        #expect(info["state"] == .string("lockedSinceBoot"))
        #expect(info["passcode"] == .bool(true))
        try c.unlock(passcode: bytes("pin"))
        #expect(try c.status()["state"] == .string("unlocked"))
        try c.lock()
        #expect(try c.status()["state"] == .string("locked"))
    }
}
