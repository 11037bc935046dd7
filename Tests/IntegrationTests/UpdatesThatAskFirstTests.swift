import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import KeychainStorage
import Testing

/// Updates of items that ask first (issue 29) against the real daemon with the scripted
/// pinentry, one answer per prompt: securityd copies every attribute of the old item, secret
/// included, into the new one, so an update of such an item needs the person's yes as a read
/// does, asked once per call outside the store's lock (docs/semantics.md, `accc`).
@Suite("Updates of items that ask first")
struct UpdatesThatAskFirstTests {
    static let passcode = ScriptedPrompt.passcode
    static let match: AttributeDictionary = ["class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy")]
    static let everything = match.merging(["r_Attributes": .bool(true), "r_Data": .bool(true)]) { $1 }

    /// A keychaind whose prompt answers `answers` in turn, holding ItemsThatAskFirstTests.item
    /// (label "prod token", accc ak;1, secret "s3cret").
    static func prompt(_ answers: [String]) throws -> ScriptedPrompt {
        let prompt = try ScriptedPrompt(answers: answers)
        try KeychainConnection(socketPath: prompt.daemon.socketPath).add(ItemsThatAskFirstTests.item)
        return prompt
    }

    /// The item's attributes and secret, read after the person's yes.
    static func stored(_ c: KeychainConnection) throws -> AttributeDictionary {
        guard case .single(.attributes(let attributes)) = try c.copyMatching(everything) else {
            throw KeychainError(.decode, "no item")
        }
        return attributes
    }

    @Test func anUpdateOfTheSecretAsksOnceNamingTheReasonAndUpdates() throws {
        let p = try Self.prompt([Self.passcode, Self.passcode])
        let c = KeychainConnection(socketPath: p.daemon.socketPath)
        try c.update(Self.match.merging(["u_OpPrompt": .string("rotate the deploy token")]) { $1 }, ["v_Data": .data(Array("n3w".utf8))])
        #expect(p.prompts == 1)
        #expect(p.said.contains("wants to use the keychain item \u{201C}prod token\u{201D}.%0AIts reason: rotate the deploy token"), "\(p.said)")
        #expect(try Self.stored(c)["v_Data"] == .data(Array("n3w".utf8)))
        #expect(p.prompts == 2)
    }

    @Test func thePersonsNoIsUserCanceledAndLeavesTheItemAsItWas() throws {
        let p = try Self.prompt(["cancel", Self.passcode])
        let c = KeychainConnection(socketPath: p.daemon.socketPath)
        expectStatus(.userCanceled) { try c.update(Self.match, ["v_Data": .data(Array("n3w".utf8)), "labl": .string("renamed")]) }
        let attributes = try Self.stored(c)
        #expect(attributes["v_Data"] == .data(Array("s3cret".utf8)))
        #expect(attributes["labl"] == .string("prod token"))
        #expect(p.prompts == 2)
    }

    @Test func failIsInteractionNotAllowedWithoutAsking() throws {
        let p = try Self.prompt([Self.passcode])
        let c = KeychainConnection(socketPath: p.daemon.socketPath)
        expectStatus(.interactionNotAllowed) {
            try c.update(Self.match.merging(["u_AuthUI": .string("u_AuthUIF")]) { $1 }, ["v_Data": .data([1])])
        }
        #expect(p.prompts == 0)
    }

    /// Apple's rule: the new item is a copy of the old one, which only the person opens.
    @Test func anUpdateOfOtherAttributesAsksTooAndKeepsTheConstraint() throws {
        let p = try Self.prompt([Self.passcode])
        let c = KeychainConnection(socketPath: p.daemon.socketPath)
        try c.update(Self.match, ["labl": .string("renamed")])
        #expect(p.prompts == 1)
        guard case .single(.attributes(let attributes)) = try c.copyMatching(Self.match.merging(["r_Attributes": .bool(true)]) { $1 }) else {
            Issue.record("no item")
            return
        }
        #expect(attributes["labl"] == .string("renamed"))
        #expect(attributes["accc"] == .string("ak;1"))
    }

    @Test func anAuthenticatedContextSparesThePrompt() throws {
        let p = try Self.prompt([Self.passcode])
        let c = try RawConnection(p.daemon)
        let reference = try c.createContext()
        #expect(try c.send(.contextAuthenticate(reference: reference, reason: "rotate")).status == 0)
        let carrying = Self.match.merging(["u_CredRef": .data(reference)]) { $1 }
        #expect(try c.send(.update(query: carrying, changes: ["v_Data": .data(Array("n3w".utf8))])).status == 0)
        #expect(try c.send(.update(query: carrying, changes: ["labl": .string("renamed")])).status == 0)
        #expect(try c.send(.copyMatching(carrying.merging(["r_Data": .bool(true)]) { $1 })).result == .single(.data(Array("n3w".utf8))))
        #expect(p.prompts == 1)
    }

    /// As an LAContext is evaluated on first use: the update's prompt authenticates it.
    @Test func aNewContextIsAuthenticatedByTheUpdatesPrompt() throws {
        let p = try Self.prompt([Self.passcode])
        let c = try RawConnection(p.daemon)
        let carrying = Self.match.merging(["u_CredRef": .data(try c.createContext())]) { $1 }
        #expect(try c.send(.update(query: carrying, changes: ["v_Data": .data(Array("n3w".utf8))])).status == 0)
        #expect(try c.send(.copyMatching(carrying.merging(["r_Data": .bool(true)]) { $1 })).result == .single(.data(Array("n3w".utf8))))
        #expect(p.prompts == 1)
    }

    /// The attack: a context of another connection carried by an update is refused before
    /// anything is asked or changed.
    @Test func aContextOfAnotherConnectionIsRefused() throws {
        let p = try Self.prompt([Self.passcode])
        let mine = try RawConnection(p.daemon), other = try RawConnection(p.daemon)
        let reference = try mine.createContext()
        #expect(try mine.send(.contextAuthenticate(reference: reference, reason: "")).status == 0)
        let carrying = Self.match.merging(["u_CredRef": .data(reference)]) { $1 }
        #expect(try other.send(.update(query: carrying, changes: ["v_Data": .data([1])])).status == KeychainStatus.param.rawValue)
        #expect(try mine.send(.copyMatching(carrying.merging(["r_Data": .bool(true)]) { $1 })).result == .single(.data(Array("s3cret".utf8))))
        #expect(p.prompts == 1)
    }

    /// The constraint is sealed in the updated row: a new secret and a new class keep it
    /// (format-2 header, flags 1), and the database editor still cannot drop it.
    @Test func theConstraintSurvivesAnUpdateOfTheSecretAndTheClass() throws {
        let p = try Self.prompt([Self.passcode])
        let d = p.daemon
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.update(Self.match, ["v_Data": .data(Array("n3w".utf8)), "pdmn": .string("ck")])
        #expect(p.prompts == 1)
        #expect(d.stop() == 0)
        #expect(Array(try ItemsThatAskFirstTests.storedBlob(d).prefix(5)) == [2, 0, 0, 0, 1])
        try d.start()
        #expect(try d.cli(["unlock"], input: bytes(Self.passcode + "\n")).status == 0)
        guard case .single(.attributes(let attributes)) = try KeychainConnection(socketPath: d.socketPath)
            .copyMatching(Self.match.merging(["r_Attributes": .bool(true)]) { $1 }) else {
            Issue.record("no item")
            return
        }
        #expect(attributes["accc"] == .string("ck;1"))
        #expect(attributes["pdmn"] == .string("ck"))
        try ItemsThatAskFirstTests.expectDroppedConstraintIsDecode(d)
    }

    /// Securityd's copy takes the update's access control: a new constraint replaces the old
    /// one once the person allowed the update (and a constraint given to a plain item asks
    /// from then on).
    @Test func anUpdateWithANewConstraintReplacesItAfterAsking() throws {
        let p = try Self.prompt([Self.passcode, Self.passcode])
        let c = KeychainConnection(socketPath: p.daemon.socketPath)
        try c.update(Self.match, ["accc": .string("ak;16")])
        #expect(p.prompts == 1)
        #expect(try Self.stored(c)["accc"] == .string("ak;16"))
        #expect(p.prompts == 2)
        try c.add(["class": .string("genp"), "svce": .string("plain"), "v_Data": .data([7])])
        try c.update(["class": .string("genp"), "svce": .string("plain")], ["accc": .string("ak;1")])
        #expect(p.prompts == 2)
        expectStatus(.interactionNotAllowed) {
            _ = try c.copyMatching(["class": .string("genp"), "svce": .string("plain"), "r_Data": .bool(true), "u_AuthUI": .string("u_AuthUIF")])
        }
    }

    /// Apple's combination rules hold for an update's accc, and a rule the store would
    /// refuse the update for is refused before anybody is asked.
    @Test func aConstraintTheRulesRefuseAsksNobody() throws {
        let p = try Self.prompt([Self.passcode])
        let c = KeychainConnection(socketPath: p.daemon.socketPath)
        expectStatus(.param) { try c.update(Self.match, ["accc": .string("ak;17")]) }
        expectStatus(.notAvailable) { try c.update(Self.match, ["accc": .string("ak;2")]) }
        expectStatus(.param) { try c.update(Self.match, ["sync": .bool(true)]) }
        #expect(p.prompts == 0)
    }
}
