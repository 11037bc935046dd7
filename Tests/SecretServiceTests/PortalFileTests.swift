import Foundation
import Testing

/// Config/portal/keychain.portal as xdg-desktop-portal 1.16 (Debian 12) reads it: its
/// register_portal refuses a file without any of DBusName, Interfaces and UseIn in [portal]
/// ("Key file does not have key UseIn"), so a file without UseIn is never loaded.
@Suite("Secret Service portal file")
struct PortalFileTests {
    static func keys() throws -> [String: String] {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Config/portal/keychain.portal").standardized.path
        var group = "", keys: [String: String] = [:]
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            if line.hasPrefix("#") { continue }
            if line.hasPrefix("[") { group = String(line); continue }
            guard group == "[portal]", let equals = line.firstIndex(of: "=") else { continue }
            keys[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return keys
    }

    static func list(_ value: String?) -> [String] {
        (value ?? "").split(separator: ";").map(String.init)
    }

    @Test func hasEveryKeyThat1_16Requires() throws {
        let keys = try Self.keys()
        #expect(keys["DBusName"] == "org.freedesktop.impl.portal.desktop.keychain")
        #expect(Self.list(keys["Interfaces"]) == ["org.freedesktop.impl.portal.Secret"])
        #expect(!Self.list(keys["UseIn"]).isEmpty)
    }

    /// GNOME's XDG_CURRENT_DESKTOP is "GNOME"; 1.16 compares UseIn ignoring case.
    @Test func namesGnomeAmongItsDesktops() throws {
        #expect(Self.list(try Self.keys()["UseIn"]).contains("gnome"))
    }
}
