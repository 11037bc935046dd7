#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@testable import KeychainServer

/// `[sync] database` (docs/sync.md, 7.4): what the daemon refuses at load, and why.
@Suite("The [sync] section of the config file")
struct SyncConfigTests {
    @Test func aLoopbackOrUnixSocketConninfoIsReadAsWritten() throws {
        for conninfo in ["host=127.0.0.1 port=5432 dbname=k user=k", "host=/run/postgresql dbname=k", "dbname=k",
                         "host=localhost,::1 dbname=k sslmode=disable", "postgresql://k@127.0.0.1:5433/k"] {
            let config = try DaemonConfig.parse("[sync]\ndatabase = \"\(conninfo)\"")
            #expect(config.syncDatabase == conninfo)
        }
        #expect(try DaemonConfig.parse("").syncDatabase == nil)
    }

    @Test func aRemoteHostIsAcceptedOnlyWithVerifyFull() throws {
        #expect(try DaemonConfig.parse("[sync]\ndatabase = \"host=db.example.org sslmode=verify-full dbname=k\"").syncDatabase != nil)
        for conninfo in ["host=db.example.org dbname=k", "host=10.0.0.5 sslmode=verify-ca", "host=127.0.0.1,db.example.org sslmode=require",
                         "host=localhost hostaddr=192.0.2.1", "postgresql://k@db.example.org/k?sslmode=require"] {
            expectRefused("[sync]\ndatabase = \"\(conninfo)\"", line: 2, saying: "verify-full")
        }
    }

    @Test func aPasswordInTheConninfoIsRefusedAndNotRepeated() {
        for conninfo in ["host=127.0.0.1 password=hunter2-secret", "postgresql://k:hunter2-secret@127.0.0.1/k"] {
            let message = expectRefused("[sync]\ndatabase = \"\(conninfo)\"", line: 2, saying: "passfile")
            #expect(message?.contains("hunter2-secret") == false)
        }
    }

    @Test func aPassfileMustBeARegularFileOf0600OwnedByTheDaemon() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pgpass.\(UUID().uuidString)").path
        defer { unlink(path) }
        try "*:*:*:*:pw\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o640)
        expectRefused("[sync]\ndatabase = \"host=127.0.0.1 passfile=\(path)\"", line: 2, saying: "0600")
        chmod(path, 0o600)
        #expect(try DaemonConfig.parse("[sync]\ndatabase = \"host=127.0.0.1 passfile=\(path)\"").syncDatabase != nil)
        expectRefused("[sync]\ndatabase = \"host=127.0.0.1 passfile=/nonexistent/pgpass\"", line: 2, saying: "not a regular file")
    }

    @Test func anUnknownKeyOrAnUnparsableConninfoIsRefusedWithItsLine() {
        expectRefused("[sync]\ndatabase = \"dbname=k\"\nurl = \"x\"", line: 3, saying: "unknown key url in [sync]")
        expectRefused("[sync]\ndatabase = \"host='unterminated\"", line: 2, saying: "not valid")
        expectRefused("[sync]\ndatabase = \"\"", line: 2, saying: "non-empty")
    }

    @discardableResult
    func expectRefused(_ text: String, line: Int, saying: String, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        do {
            _ = try DaemonConfig.parse(text)
            Issue.record("\(text) was accepted", sourceLocation: sourceLocation)
        } catch {
            #expect(error.line == line, sourceLocation: sourceLocation)
            #expect(error.message.contains(saying), "\(error.message)", sourceLocation: sourceLocation)
            return error.message
        }
        return nil
    }
}
