import Testing
@testable import KeychainServer

/// `[metrics]`: a Unix socket, or loopback TCP behind a second switch; nothing else.
@Suite("The metrics listener's settings")
struct MetricsSettingsTests {
    func refusal(_ text: String) -> String? {
        do {
            _ = try DaemonConfig.parse(text)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func theListenerIsOffByDefault() throws {
        #expect(try DaemonConfig.parse("").metrics.listen == nil)
    }

    @Test func aUnixSocketIsTaken() throws {
        let config = try DaemonConfig.parse("[metrics]\nlisten = \"unix:/run/keychaind-metrics/metrics.sock\"\ngroup = \"root\"\n")
        #expect(config.metrics.listen == .unix("/run/keychaind-metrics/metrics.sock"))
        #expect(config.metrics.group == "root")
        #expect(config.serverConfiguration(stateDirectory: nil, socket: nil).metrics.listen == .unix("/run/keychaind-metrics/metrics.sock"))
    }

    @Test func loopbackTCPNeedsAllowTCP() throws {
        let message = refusal("[metrics]\nlisten = \"tcp:127.0.0.1:9184\"\n")
        #expect(message?.contains("allow_tcp") == true)
        let config = try DaemonConfig.parse("[metrics]\nlisten = \"tcp:127.0.0.1:9184\"\nallow_tcp = true\n")
        #expect(config.metrics.listen == .tcp(address: "127.0.0.1", port: 9184))
        #expect(try DaemonConfig.parse("[metrics]\nallow_tcp = true\nlisten = \"tcp:[::1]:9184\"\n").metrics.listen
                == .tcp(address: "::1", port: 9184))
        #expect(try DaemonConfig.parse("[metrics]\nallow_tcp = true\nlisten = \"tcp:127.8.9.10:1\"\n").metrics.listen
                == .tcp(address: "127.8.9.10", port: 1))
    }

    @Test func anAddressThatIsNotLoopbackIsRefused() {
        for address in ["0.0.0.0:9184", "192.168.1.2:9184", "[::]:9184", "[::ffff:127.0.0.1]:9184", "[fe80::1]:9184",
                        "localhost:9184", "128.0.0.1:9184", "127.0.0.1.nip.io:9184"] {
            let message = refusal("[metrics]\nallow_tcp = true\nlisten = \"tcp:\(address)\"\n")
            #expect(message?.contains("not a loopback address") == true, "\(address): \(message ?? "taken")")
        }
    }

    @Test func malformedListenValuesAreRefused() {
        for value in ["unix:relative.sock", "unix:/run/", "tcp:127.0.0.1", "tcp:127.0.0.1:0", "tcp:127.0.0.1:65536", "tcp:[::1]9184",
                      "http://127.0.0.1:9184", "/run/metrics.sock", "unix:/" + String(repeating: "a", count: 120)] {
            #expect(refusal("[metrics]\nallow_tcp = true\nlisten = \"\(value)\"\n") != nil, "\(value)")
        }
    }

    @Test func aGroupIsForAUnixSocketAndMustExist() {
        #expect(refusal("[metrics]\nlisten = \"unix:/run/m.sock\"\ngroup = \"no-such-group-kc\"\n")?.contains("no such group") == true)
        #expect(refusal("[metrics]\nallow_tcp = true\nlisten = \"tcp:127.0.0.1:9184\"\ngroup = \"root\"\n")?.contains("Unix socket") == true)
    }

    @Test func anUnknownKeyIsRefused() {
        #expect(refusal("[metrics]\nport = 9184\n")?.contains("unknown key port") == true)
    }
}
