import Foundation
import KeychainModel
import Testing

/// A throw-away PostgreSQL cluster of scripts/pg-cluster (docs/sync.md §12.3), one per test so
/// that a test may halt its server without disturbing the others. Removed when released.
final class TestCluster {
    let directory: String
    /// postgresql://keychaind:PASSWORD@127.0.0.1:PORT/keychaind
    let url: String

    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/pg-cluster").path

    init() throws {
        let output = try Self.run(["start"])
        var values: [String: String] = [:]
        for line in output.split(separator: "\n") {
            guard let eq = line.firstIndex(of: "=") else { continue }
            values[String(line[..<eq])] = String(line[line.index(after: eq)...])
        }
        guard let directory = values["PGCLUSTER_DIR"], let url = values["PGCLUSTER_URL"] else {
            throw ClusterError(message: "pg-cluster start printed no directory and URL")
        }
        self.directory = directory
        self.url = url
    }

    deinit { _ = try? Self.run(["stop", directory]) }

    /// The password the cluster was made with (its URL's user-info).
    var password: String {
        let afterScheme = url.dropFirst("postgresql://keychaind:".count)
        return String(afterScheme.prefix(while: { $0 != "@" }))
    }

    /// Stops the server as if it crashed (`pg_ctl stop -m immediate`).
    func halt() throws { _ = try Self.run(["halt", directory, "immediate"]) }

    /// Starts it again on the same port and data.
    func resume() throws { _ = try Self.run(["resume", directory]) }

    /// `pg_dump --data-only` of the database: everything an operator's backup holds.
    func dump() throws -> String { try Self.run(["dump", directory]) }

    /// Runs `statements` with psql as the database's owner (the operator's hand); the rows
    /// it prints, unaligned, one a line.
    @discardableResult
    func sql(_ statements: String) throws -> String { try Self.run(["sql", directory, statements]) }

    struct ClusterError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// Runs the script through posix_spawn and waitpid, its output in files. Not Foundation's
    /// Process: the server the script starts would inherit a pipe's write end (so would a cluster
    /// started by a parallel test) and reading to its end would wait for the server's exit; and
    /// Process's waitUntilExit was seen never to return for a script that had exited.
    private static func run(_ arguments: [String]) throws -> String {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("pg-cluster-run.\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let outPath = scratch.appendingPathComponent("out").path, errPath = scratch.appendingPathComponent("err").path

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv = ([script] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, script, &actions, nil, argv, environ)
        guard rc == 0 else { throw ClusterError(message: "cannot start pg-cluster: error \(rc)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let output = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        guard status == 0 else {
            let errors = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
            throw ClusterError(message: "pg-cluster \(arguments.first ?? "") failed (wait status \(status)): \(errors)")
        }
        return output
    }
}

/// Expects `body` to throw a KeychainError with `status`, and returns it for further checks.
@discardableResult
func expectError(_ status: KeychainStatus, sourceLocation: SourceLocation = #_sourceLocation,
                 _ body: () throws -> Void) -> KeychainError? {
    do {
        try body()
        Issue.record("expected \(status), but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.status == status, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// A TCP port on loopback that completes connections (the kernel's backlog) and never
/// answers: libpq sends its startup packet and waits for a reply that never comes. `close()`
/// takes the port away (connects then fail at once); the port is closed when released too.
final class SilentServer: @unchecked Sendable {
    let fd: Int32
    let port: UInt16
    private let state = NSLock()
    private var listening = true

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound, listen(fd, 8) == 0 else {
            Glibc.close(fd)
            throw KeychainError(.io, "cannot listen on loopback")
        }
        self.fd = fd
        port = UInt16(bigEndian: addr.sin_port)
    }

    func close() {
        state.lock()
        defer { state.unlock() }
        if listening { Glibc.close(fd) }
        listening = false
    }

    deinit { close() }
}
