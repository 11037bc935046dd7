import KeychainModel
import Testing
@testable import KeychainServer

/// The drop-in that opens the system unit's network for its [sync] server alone (docs/sync.md,
/// "The system unit and sync").
@Suite("The sync network drop-in")
struct SyncNetworkDropInTests {
    static func resolve(_ host: String) throws(KeychainError) -> [String] {
        host == "db.example.org" ? ["192.0.2.10", "2001:db8::10", "192.0.2.10"] : []
    }

    func text(_ conninfo: String) throws -> String? {
        try SyncNetworkDropIn.text(conninfo: conninfo, source: "/etc/keychaind/keychaind.toml", resolve: Self.resolve)
    }

    @Test func aNamedServerIsAllowedByItsAddressesAlone() throws {
        let dropIn = try #require(try text("host=db.example.org dbname=keychaind user=laptop sslmode=verify-full"))
        #expect(dropIn.contains("\nIPAddressDeny=any\nIPAddressAllow=192.0.2.10 2001:db8::10\n"))
        #expect(dropIn.contains("\nPrivateNetwork=no\n"))
        #expect(dropIn.contains("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"))
        #expect(dropIn.contains("hostaddr=192.0.2.10,2001:db8::10"), "names need hostaddr=, for DNS stays closed")
    }

    @Test func hostaddrIsTakenAsGiven() throws {
        let dropIn = try #require(try text("host=db.example.org hostaddr=198.51.100.7 dbname=k sslmode=verify-full"))
        #expect(dropIn.contains("IPAddressAllow=198.51.100.7\n"))
        #expect(!dropIn.contains("add\n# hostaddr"))
    }

    @Test func aLoopbackServerStillNeedsTheHostsNetwork() throws {
        let dropIn = try #require(try text("host=127.0.0.1 dbname=k"))
        #expect(dropIn.contains("IPAddressAllow=127.0.0.1\n"))
    }

    @Test func aUnixSocketServerNeedsNoDropIn() throws {
        #expect(try text("host=/var/run/postgresql dbname=k") == nil)
        #expect(try text("dbname=k") == nil)
    }
}
