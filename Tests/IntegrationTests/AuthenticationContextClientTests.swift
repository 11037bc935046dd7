import Foundation
import KeychainClient
import KeychainModel
import Testing

/// KeychainClient's `AuthenticationContext` (Apple's LAContext with
/// kSecUseAuthenticationContext) against the real daemon and its scripted pinentry.
@Suite("KeychainClient's authentication context")
struct AuthenticationContextClientTests {
    typealias Fixture = AuthenticationContextTests

    @Test func oneAuthenticationServesTwoReadsOnTheContextsConnection() throws {
        let (d, log) = try Fixture.daemon(answers: [Fixture.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let context = try AuthenticationContext(connection: c)
        try context.authenticate(reason: "sync the mail")
        #expect(try c.copyMatching(ItemsThatAskFirstTests.secretQuery, context: context) == Fixture.secret)
        #expect(try c.copyMatching(ItemsThatAskFirstTests.secretQuery, context: context) == Fixture.secret)
        #expect(Fixture.prompts(log) == 1)
        #expect(ItemsThatAskFirstTests.said(log).contains("Its reason: sync the mail"))
    }

    @Test func anUnauthenticatedContextAsksAtItsFirstReadOnly() async throws {
        let (d, log) = try Fixture.daemon(answers: [Fixture.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let context = try AuthenticationContext(connection: c)
        #expect(try await c.copyMatching(ItemsThatAskFirstTests.secretQuery, context: context) == Fixture.secret)
        #expect(try await c.copyMatching(ItemsThatAskFirstTests.secretQuery, context: context) == Fixture.secret)
        #expect(Fixture.prompts(log) == 1)
    }

    @Test func anInvalidatedContextIsRefused() throws {
        let (d, _) = try Fixture.daemon(answers: [Fixture.passcode])
        let c = KeychainConnection(socketPath: d.socketPath)
        let context = try AuthenticationContext(connection: c)
        try context.authenticate(reason: "")
        try context.invalidate()
        expectStatus(.param) { _ = try c.copyMatching(ItemsThatAskFirstTests.secretQuery, context: context) }
    }

    @Test func anotherConnectionRefusesTheContextBeforeSendingIt() throws {
        let (d, _) = try Fixture.daemon(answers: [])
        let context = try AuthenticationContext(connection: KeychainConnection(socketPath: d.socketPath))
        let other = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.param) { _ = try other.copyMatching(ItemsThatAskFirstTests.secretQuery, context: context) }
        // Sent anyway, by hand: keychaind refuses it too.
        expectStatus(.param) { _ = try other.copyMatching(context.applied(to: ItemsThatAskFirstTests.secretQuery)) }
    }
}
