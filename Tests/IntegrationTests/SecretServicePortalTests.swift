import Foundation
import KeychainModel
import Testing

/// The desktop portal's Secret backend (design §4) through the real bridge and keychaind; a
/// python script stands in for xdg-desktop-portal.
@Suite("Secret Service: portal backend")
struct SecretServicePortalTests {
    static func setup() throws -> SecretServiceSetup {
        let python = try #require(realpath("/usr/bin/python3", nil).map { p -> String in
            defer { free(p) }
            return String(cString: p)
        })
        let setup = try SecretServiceSetup(config: "portal_executables = [\"\(python)\"]")
        try waitUntil(timeout: 10, "the portal backend's name") {
            try setup.ownerPID(of: "org.freedesktop.impl.portal.desktop.keychain") == setup.bridge.pid
        }
        return setup
    }

    @Test func eachAppGetsItsOwnSecretAndTheSameOneAgain() throws {
        let setup = try Self.setup()
        let result = try setup.python("portal.py", ["claim", "org.example.One", "org.example.One", "org.example.Two"])
        let answers = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]], "\(result.stderr)")
        try #require(answers.count == 3)
        #expect(answers.allSatisfy { $0["response"] as? Int == 0 }, "\(answers)")
        let secrets = answers.map { $0["secret"] as? String ?? "" }
        #expect(secrets[0].count == 128)  // 64 bytes, in hex
        #expect(secrets[0] == secrets[1])
        #expect(secrets[0] != secrets[2] && secrets[2].count == 128)
        // A second run (another connection) gets the same secret: it is stored.
        let again = try setup.python("portal.py", ["claim", "org.example.One"])
        #expect(again.text.contains(secrets[0]))
    }

    /// On GNOME, xdg-desktop-portal 1.16 picks gnome-keyring.portal (by name, before
    /// keychain.portal), whose DBusName is org.freedesktop.secrets: while the bridge owns that
    /// name, the portal's call reaches keychaind all the same.
    @Test func thePortalReachesTheBackendThroughTheSecretServiceNameAsGnomeKeyringsFileSays() throws {
        let setup = try Self.setup()
        let result = try setup.python("portal.py", ["claim-gnome", "org.example.One"])
        let answers = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]], "\(result.stderr)")
        #expect(answers.first?["response"] as? Int == 0, "\(answers)")
        #expect((answers.first?["secret"] as? String)?.count == 128, "\(answers)")
    }

    @Test func aCallerThatDoesNotOwnThePortalNameIsRefused() throws {
        let setup = try Self.setup()
        let result = try setup.python("portal.py", ["noclaim", "org.example.One"])
        #expect(result.text.contains("org.freedesktop.DBus.Error.AccessDenied"), "\(result.text) \(result.stderr)")
    }

    @Test func thePortalCanCloseTheRequestOfACallOnce() throws {
        let setup = try Self.setup()
        let answer = try setup.pythonJSON("portal_request.py")
        #expect(answer["response"] as? Int == 0)
        #expect(answer["close"] as? String == "ok")
        #expect(answer["again"] as? String == "org.freedesktop.DBus.Error.UnknownMethod", "\(answer)")
        #expect(answer["unknown"] as? String == "org.freedesktop.DBus.Error.UnknownMethod", "\(answer)")
    }

    @Test(arguments: ["", "has space", "slash/no"])
    func anInvalidAppIDGetsResponse2(_ appID: String) throws {
        let setup = try Self.setup()
        let result = try setup.python("portal.py", ["claim", appID])
        #expect(result.text.contains("\"response\": 2"), "\(result.text) \(result.stderr)")
        #expect(result.text.contains("\"secret\": \"\""))
    }

    @Test func keychaindRefusesAPortalThatIsNotConfigured() throws {
        let setup = try SecretServiceSetup(config: "portal_executables = [\"/usr/libexec/xdg-desktop-portal\"]")
        try waitUntil(timeout: 10, "the portal backend's name") {
            try setup.ownerPID(of: "org.freedesktop.impl.portal.desktop.keychain") == setup.bridge.pid
        }
        let result = try setup.python("portal.py", ["claim", "org.example.One"])
        #expect(result.text.contains("org.freedesktop.DBus.Error.AccessDenied"), "\(result.text) \(result.stderr)")
    }

    @Test func noPortalLeavesTheNameAlone() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        _ = try setup.startedBridge(["--no-portal"])
        #expect(try setup.ownerPID(of: "org.freedesktop.impl.portal.desktop.keychain") == nil)
    }
}
