import KeychainModel
import Testing
@testable import KeychainServer

/// What systemd's set-up process asks the credential socket for, read from the abstract address
/// it binds (docs/credentials.md), and whom that address is believed of.
@Suite("LoadCredential= requests")
struct CredentialRequestTests {
    static func address(_ text: String) -> [UInt8] { [0] + Array(text.utf8) }

    @Test func systemdsAddressNamesTheUnitAndTheCredential() {
        #expect(CredentialRequest(abstractAddress: Self.address("a3f09c21d4e5b6a7/unit/web.service/token"))
                == CredentialRequest(unit: "web.service", id: "token"))
        #expect(CredentialRequest(abstractAddress: Self.address("1/unit/getty@tty1.service/db.pass"))
                == CredentialRequest(unit: "getty@tty1.service", id: "db.pass"))
    }

    @Test(arguments: [
        "/tmp/path", "a3f0/unit/web.service", "a3f0/unit/web.service/a/b", "a3f0/units/web.service/token",
        "/unit/web.service/token", "a3f0/unit/web service/token", "a3f0/unit/web.service/..", "a3f0/unit/web.service/",
        "a3f0/unit/noservice/token",
    ])
    func anotherShapeNamesNothing(_ text: String) {
        #expect(CredentialRequest(abstractAddress: Self.address(text)) == nil)
    }

    @Test func aPathAddressNamesNothing() {
        #expect(CredentialRequest(abstractAddress: Array("x/unit/web.service/token".utf8)) == nil)
        #expect(CredentialRequest(abstractAddress: [0, 0xFF, 0xFE]) == nil)
    }

    static let policy = AccessPolicy(applications: [
        Application(id: "web", uids: [33], units: ["web.service"], groups: ["web"]),
        Application(id: "alice", uids: [1000], groups: ["alice"]),
    ])
    let request = CredentialRequest(unit: "web.service", id: "token")

    @Test func rootInTheUnitGetsTheUnitsGroupsWhateverUidItRunsAs() throws {
        let scope = try CredentialPeer.scope(for: request, uid: 0, unit: .system("web.service"), policy: Self.policy).get()
        #expect(scope.groups == ["web"])
    }

    @Test func theUnitsOwnUidIsNotItsSetUpProcess() {
        #expect(throws: KeychainError(.authFailed, "")) {
            try CredentialPeer.scope(for: request, uid: 33, unit: .system("web.service"), policy: Self.policy).get()
        }
    }

    @Test func rootInAnotherUnitIsRefused() {
        #expect(throws: KeychainError(.authFailed, "")) {
            try CredentialPeer.scope(for: request, uid: 0, unit: .system("db.service"), policy: Self.policy).get()
        }
    }

    @Test func aUserUnitGetsItsUsersGroupsOnly() throws {
        let scope = try CredentialPeer.scope(for: request, uid: 1000, unit: .user(uid: 1000, "web.service"), policy: Self.policy).get()
        #expect(scope.groups == ["alice"])
        #expect(throws: KeychainError(.authFailed, "")) {
            try CredentialPeer.scope(for: request, uid: 1001, unit: .user(uid: 1000, "web.service"), policy: Self.policy).get()
        }
    }
}
