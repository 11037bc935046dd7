import Foundation
import KeychainClient
import KeychainModel
import KeychainStorage
import Testing

/// Items whose access control asks the person first (issue 29), against the real daemon with
/// a scripted pinentry (Tests/SecretServiceScripts/fake_pinentry.py) that answers each GETPIN
/// in turn and records what it was told, so a test can see who the prompt named.
@Suite("Items that ask first")
struct ItemsThatAskFirstTests {
    static let passcode = "1234"

    /// A keychaind with a passcode and a [prompt] whose pinentry answers `answers`.
    static func daemon(answers: [String], prompt: Bool = true) throws -> (RunningDaemon, log: String) {
        let pinentry = try ScriptedPinentry(answers: answers)
        let d = try RunningDaemon(config: prompt ? pinentry.promptSection : "")
        #expect(try d.cli(["passcode", "set"], input: bytes(passcode + "\n")).status == 0)
        return (d, pinentry.log)
    }

    static let item: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "labl": .string("prod token"),
        "accc": .string("ak;1"), "v_Data": .data(Array("s3cret".utf8)),
    ]
    static let secretQuery: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "r_Data": .bool(true),
    ]

    static func said(_ log: String) -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    @Test func readingTheSecretAsksAndTheFirstLineNamesTheCallersExecutable() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        var query = Self.secretQuery
        query["u_OpPrompt"] = .string("rotate the deploy key")
        #expect(try c.copyMatching(query) == .single(.data(Array("s3cret".utf8))))
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let said = Self.said(log)
        #expect(said.contains("SETDESC \(executable) (pid \(getpid())) wants to use the keychain item \u{201C}prod token\u{201D}.%0AIts reason: rotate the deploy key"), "\(said)")
        #expect(!said.contains(Self.passcode))
    }

    @Test func attributesAloneDoNotAskAndCarryTheConstraint() throws {
        let (d, log) = try Self.daemon(answers: [])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        let found = try c.copyMatching(["class": .string("genp"), "svce": .string("prod"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let attributes)) = found else { Issue.record("\(found)"); return }
        #expect(attributes["accc"] == .string("ak;1"))
        #expect(attributes["v_Data"] == nil)
        #expect(!Self.said(log).contains("GETPIN"))
    }

    @Test func thePersonCancellingIsUserCanceled() throws {
        let (d, _) = try Self.daemon(answers: ["cancel"])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        expectStatus(.userCanceled) { _ = try c.copyMatching(Self.secretQuery) }
    }

    @Test func threeWrongPasscodesAreAuthFailedAndCountInTheDelays() throws {
        let (d, _) = try Self.daemon(answers: ["a", "b", "c"])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        expectStatus(.authFailed) { _ = try c.copyMatching(Self.secretQuery) }
        #expect(d.log.contains("wrong passcode (3 in a row)"), "\(d.log)")
    }

    @Test func failAnswersInteractionNotAllowedWithoutAsking() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        var query = Self.secretQuery
        query["u_AuthUI"] = .string("u_AuthUIF")
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(query) }
        #expect(!Self.said(log).contains("GETPIN"))
    }

    @Test func skipLeavesTheItemOutWithoutAsking() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        try c.add(["class": .string("genp"), "svce": .string("prod"), "acct": .string("plain"), "v_Data": .data([7])])
        let found = try c.copyMatching(["class": .string("genp"), "svce": .string("prod"), "r_Data": .bool(true),
                                        "m_Limit": .string("m_LimitAll"), "u_AuthUI": .string("u_AuthUIS")])
        #expect(found == .list([.data([7])]))
        #expect(!Self.said(log).contains("GETPIN"))
    }

    @Test func withNowhereToAskItIsInteractionNotAllowed() throws {
        let (d, _) = try Self.daemon(answers: [], prompt: false)
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(Self.secretQuery) }
    }

    /// The attack: the database edited to turn the constrained blob into a plain one.
    @Test func droppingTheConstraintInTheDatabaseIsErrSecDecode() throws {
        let (d, _) = try Self.daemon(answers: [])
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        try Self.expectDroppedConstraintIsDecode(d)
    }

    /// The database editor's attack on `d`'s one item (of `item`'s service): its constrained
    /// (format-2) blob rewritten as a plain one, then every read of it is errSecDecode.
    /// The sealed blob of the one item in the database of `d`, which is stopped.
    static func storedBlob(_ d: RunningDaemon) throws -> [UInt8] {
        let db = try SQLiteDatabase(path: d.stateDirectory + "/keychain.db")
        return try db.query("SELECT data FROM items") { (s) throws(KeychainError) -> [UInt8] in
            _ = try s.step()
            return s.blob(0)
        }
    }

    static func expectDroppedConstraintIsDecode(_ d: RunningDaemon) throws {
        #expect(d.stop() == 0)
        do {
            let blob = try storedBlob(d)
            let db = try SQLiteDatabase(path: d.stateDirectory + "/keychain.db")
            #expect(blob.first == 2)
            try db.run("UPDATE items SET data = ?", [.blob([1] + blob.dropFirst(5))])
        }
        try d.start()
        #expect(try d.cli(["unlock"], input: bytes(passcode + "\n")).status == 0)
        let again = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.decode) { _ = try again.copyMatching(secretQuery) }
        expectStatus(.decode) { _ = try again.copyMatching(["class": .string("genp"), "svce": .string("prod"), "r_Attributes": .bool(true)]) }
    }
}
