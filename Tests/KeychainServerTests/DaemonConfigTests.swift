import Foundation
import KeychainCrypto
import Testing
@testable import KeychainServer

@Suite("The config file")
struct DaemonConfigTests {
    @Test func shippedDefaultConfigParsesToTheBuiltInDefaults() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Config/keychaind.toml").standardized
        let text = try String(contentsOf: url, encoding: .utf8)
        #expect(try DaemonConfig.parse(text) == DaemonConfig())
    }

    @Test func everyKeyIsRead() throws {
        let config = try DaemonConfig.parse("""
            state_dir = "/srv/kc"   # trailing comment
            socket = "/run/kc.sock"
            socket_mode = "0660"
            idle_timeout_seconds = 30
            frame_timeout_seconds = 2
            max_connections = 1_000
            argon2_ops = 3
            argon2_memory_mib = 64
            admin_uids = [0, 1000]
            log_level = "debug"
            """)
        #expect(config.stateDirectory == "/srv/kc")
        #expect(config.socketPath == "/run/kc.sock")
        #expect(config.socketMode == 0o660)
        #expect(config.idleTimeoutSeconds == 30)
        #expect(config.frameTimeoutSeconds == 2)
        #expect(config.maxConnections == 1000)
        #expect(config.argon2 == Argon2Parameters(opsLimit: 3, memLimitBytes: 64 << 20))
        #expect(config.adminUIDs == [0, 1000])
        #expect(config.logLevel == "debug")
    }

    @Test(arguments: [
        ("bogus = 1", 1, "unknown key bogus"),
        ("\n\nsocket = 5", 3, "must be a string"),
        ("max_connections = 0", 1, "integer in"),
        ("log_level = \"loud\"", 1, "log_level must be"),
        ("socket_mode = \"999\"", 1, "octal"),
        ("socket = \"a\"\nsocket = \"b\"", 2, "set twice"),
        ("just words", 1, "key = value"),
        ("socket = \"unterminated", 1, "unterminated"),
        ("admin_uids = [-1]", 1, "non-negative"),
    ])
    func badLinesAreRefusedWithTheirLineNumber(text: String, line: Int, message: String) {
        do {
            _ = try DaemonConfig.parse(text)
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.line == line)
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test func flagsWinOverTheFileAndTheFileOverDefaults() throws {
        let config = try DaemonConfig.parse("socket = \"/from/file.sock\"\nstate_dir = \"/from/file\"\nidle_timeout_seconds = 7")
        let server = config.serverConfiguration(stateDirectory: "/from/flag", socket: nil)
        #expect(server.store.stateDirectory == "/from/flag")
        #expect(server.socketPath == "/from/file.sock")
        #expect(server.idleTimeoutMs == 7000)
    }
}
