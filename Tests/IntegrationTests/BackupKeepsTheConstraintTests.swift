import Foundation
import KeychainClient
import Testing

/// A backup of an item that asks first (issue 29): making it asks the person, since the file
/// holds the secret under a password the caller chose; restored elsewhere the item still asks,
/// and its constraint still cannot be edited away in the database.
@Suite("Backup keeps the constraint")
struct BackupKeepsTheConstraintTests {
    static let item: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "labl": .string("prod token"),
        "accc": .string("ak;1"), "v_Data": .data(Array("s3cret".utf8)),
    ]
    static let secretQuery: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "r_Data": .bool(true),
    ]
    static let password = Array("backup password".utf8)

    /// The attack: a process of the keychain's user (an admin of its own keychaind) makes a
    /// backup with a password it knows, to read the secret from the file without the person.
    @Test func aBackupHoldingAnItemThatAsksFirstAsksThePersonFirst() throws {
        let prompt = try ScriptedPrompt(answers: ["cancel"])
        let c = KeychainConnection(socketPath: prompt.daemon.socketPath)
        try c.add(Self.item)
        expectStatus(.userCanceled) { _ = try c.backup(password: Self.password) }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(prompt.said.contains("SETDESC \(executable) (pid \(getpid())) wants to make a backup of this keychain that holds the secrets of 1 item(s) that ask first or that an application password seals."), "\(prompt.said)")
    }

    @Test func aBackupOfPlainItemsAsksNobody() throws {
        let prompt = try ScriptedPrompt(answers: [])
        let c = KeychainConnection(socketPath: prompt.daemon.socketPath)
        try c.add(["class": .string("genp"), "svce": .string("plain"), "v_Data": .data([1])])
        _ = try c.backup(password: Self.password)
        #expect(prompt.prompts == 0)
    }

    @Test func restoredIntoAFreshKeychainTheItemStillAsks() throws {
        let source = try ScriptedPrompt(answers: [ScriptedPrompt.passcode])
        let c = KeychainConnection(socketPath: source.daemon.socketPath)
        try c.add(Self.item)
        let (file, _) = try c.backup(password: Self.password)

        let target = try ScriptedPrompt(answers: ["cancel", ScriptedPrompt.passcode])
        let restored = KeychainConnection(socketPath: target.daemon.socketPath)
        _ = try restored.restore(file, password: Self.password)
        let found = try restored.copyMatching(["class": .string("genp"), "svce": .string("prod"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let attributes)) = found else { Issue.record("\(found)"); return }
        #expect(AccessControl(attributes: attributes)?.asksFirst == true)
        #expect(attributes["accc"] == .string("ak;1"))
        expectStatus(.userCanceled) { _ = try restored.copyMatching(Self.secretQuery) }
        #expect(try restored.copyMatching(Self.secretQuery) == .single(.data(Array("s3cret".utf8))))
        #expect(target.said.contains("the keychain item \u{201C}prod token\u{201D}"), "\(target.said)")
        var failing = Self.secretQuery
        failing["u_AuthUI"] = .string("u_AuthUIF")
        expectStatus(.interactionNotAllowed) { _ = try restored.copyMatching(failing) }
    }

    /// After a restore, dropping the constraint in the database still opens for nobody.
    @Test func aRestoredItemsConstraintCannotBeEditedAway() throws {
        let source = try ScriptedPrompt(answers: [ScriptedPrompt.passcode])
        try KeychainConnection(socketPath: source.daemon.socketPath).add(Self.item)
        let (file, _) = try KeychainConnection(socketPath: source.daemon.socketPath).backup(password: Self.password)

        let target = try ScriptedPrompt(answers: [])
        _ = try KeychainConnection(socketPath: target.daemon.socketPath).restore(file, password: Self.password)
        try ItemsThatAskFirstTests.expectDroppedConstraintIsDecode(target.daemon)
    }
}
