import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Op 45 and `keychain metrics` (issue 27): admin only, since lock state and the timing of
/// every call tell another local user when the keychain is used.
@Suite("The daemon's metrics", .serialized)
struct MetricsTests {
    @Test func keychainMetricsPrintsTheExpositionToAnAdmin() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--service", "svc-metrics-cli", "--account", "a"], input: bytes("s"))
        let r = try d.cli(["metrics"])
        #expect(r.status == Exit.success, "\(r.stderr)")
        #expect(r.text.contains("# TYPE keychaind_operations_total counter"))
        #expect(r.text.contains(#"keychaind_operations_total{operation="add",status="errSecSuccess",via="socket"} 1"#))
        #expect(!r.text.contains("svc-metrics-cli"))
    }

    @Test func aCallerWhoIsNotAnAdminIsRefusedTheMetrics() throws {
        let user = try MultiUserTests.user("kcmetrics-user")
        let d = try RunningDaemon(config: """
            socket_mode = "0666"
            admin_uids = [0]
            [[app]]
            id = "other"
            uids = [\(user)]
            groups = ["other"]
            """)
        let r = try d.cli(["metrics"], asUser: user)
        #expect(r.status == Exit.denied, "\(r.stderr)")
        #expect(r.stderr.contains("admin"))
        #expect(!r.text.contains("keychaind_"))
    }

    /// The client side never carries the metrics library: only keychaind links it.
    @Test func onlyTheDaemonLinksPrometheus() throws {
        let marker = Data("PrometheusCollectorRegistry".utf8)
        func links(_ name: String) throws -> Bool {
            try Data(contentsOf: URL(fileURLWithPath: Binaries.directory + "/" + name)).range(of: marker) != nil
        }
        #expect(try links("keychaind"))
        for client in ["keychain", "git-credential-keychain"] { #expect(try !links(client), "\(client)") }
    }
}
