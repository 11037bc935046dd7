import Foundation
import KeychainModel
import Testing

/// A uid the policy refuses, or one greedy uid, tries to take every connection slot
/// (docs/security.md, "Fair service").
@Suite("Connections are admitted by policy", .serialized)
struct AdmissionTests {
    let appA: UInt32
    let appB: UInt32
    let stranger: UInt32

    init() throws {
        appA = try MultiUserTests.user("kcapp-a")
        appB = try MultiUserTests.user("kcapp-b")
        stranger = try MultiUserTests.user("kcapp-c")
    }

    func config(_ extra: String = "") -> String {
        """
        socket_mode = "0666"
        admin_uids = [0]
        max_connections = 16
        \(extra)
        [[app]]
        id = "app.a"
        uids = [\(appA)]
        groups = ["a"]

        [[app]]
        id = "app.b"
        uids = [\(appB)]
        groups = ["b"]
        """
    }

    /// `hold N SECONDS`: keeps N connections open for SECONDS, pinging each with a status
    /// request twice a second and reconnecting whatever the daemon closes. `once`: one status
    /// request, then another on the same connection; prints each status or "closed". `query`:
    /// the same with an item query.
    static let attacker = #"""
    import socket, struct, sys, time
    # status, or with "query": a copyMatching of {"class": "genp"}
    QUERY = bytes([1, 2]) + struct.pack("<I", 1) + struct.pack("<H", 5) + b"class" + bytes([1]) + struct.pack("<I", 4) + b"genp"
    def status(s, payload=bytes([1, 5])):
        try:
            s.sendall(struct.pack("<I", len(payload)) + payload)
            head = s.recv(4, socket.MSG_WAITALL)
            if len(head) < 4: return "closed"
            body = s.recv(struct.unpack("<I", head)[0], socket.MSG_WAITALL)
            return str(struct.unpack("<i", body[1:5])[0]) + " " + body[9:].decode("utf-8", "replace")
        except OSError:
            return "closed"
    def connect():
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(sys.argv[1]); return s
        except OSError:
            s.close(); return None
    if sys.argv[2] in ("once", "query"):
        s = connect()
        payload = QUERY if sys.argv[2] == "query" else bytes([1, 5])
        print(status(s, payload), flush=True)
        print(status(s, payload), flush=True)
    else:
        n, end = int(sys.argv[3]), time.time() + float(sys.argv[4])
        conns = [connect() for _ in range(n)]
        print("holding", flush=True)
        while time.time() < end:
            for i, s in enumerate(conns):
                if s is None or status(s) == "closed":
                    if s: s.close()
                    conns[i] = connect()
            time.sleep(0.5)
    """#

    /// Starts the attacker as `uid` in the background; returns once it holds its connections.
    func hold(_ d: RunningDaemon, as uid: UInt32, connections: Int, seconds: Int) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        p.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/python3", "-c", Self.attacker,
                       d.socketPath, "hold", "\(connections)", "\(seconds)"]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        _ = out.fileHandleForReading.availableData  // "holding"
        usleep(300_000)
        return p
    }

    func succeededCalls(_ d: RunningDaemon, as uid: UInt32, _ count: Int) throws -> Int {
        var ok = 0
        for i in 0..<count {
            if try d.cli(["add", "--service", "fair", "--account", "\(uid)-\(i)"], input: bytes("x"), asUser: uid).status == 0 {
                ok += 1
            }
        }
        return ok
    }

    @Test func aRefusedUidCannotTakeTheSlotsOfAdmittedOnes() throws {
        let d = try RunningDaemon(config: config())
        let attack = try hold(d, as: stranger, connections: 60, seconds: 30)
        defer { kill(attack.processIdentifier, SIGKILL); attack.waitUntilExit() }
        #expect(try succeededCalls(d, as: appA, 20) == 20)
    }

    @Test func oneUidCannotHoldMoreThanItsShare() throws {
        let d = try RunningDaemon(config: config("max_connections_per_uid = 4"))
        let greedy = try hold(d, as: appA, connections: 40, seconds: 30)
        defer { kill(greedy.processIdentifier, SIGKILL); greedy.waitUntilExit() }
        #expect(try succeededCalls(d, as: appB, 20) == 20)
    }

    @Test func aRefusedCallerGetsOneAnswerSayingWhyAndTheConnectionCloses() throws {
        let d = try RunningDaemon(config: config())
        let lines = try runExecutable("/usr/bin/python3", ["-c", Self.attacker, d.socketPath, "once"],
                                      environment: [:], input: [], asUser: stranger).text.split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines.first?.hasPrefix("\(KeychainStatus.missingEntitlement.rawValue) ") == true, "\(lines)")
        #expect(lines.first?.contains("uid \(stranger)") == true)
        #expect(lines.last == "closed")
    }

    @Test func aRefusedCallersStatusSaysOnlyThatItIsRefused() throws {
        let d = try RunningDaemon(config: config())
        let status = try d.cli(["status"], asUser: stranger)
        #expect(status.status == Exit.denied)
        #expect(status.stderr.contains("matches no application"))
        #expect(!status.text.contains("state") && !status.text.contains("failed_attempts"))
        #expect(!status.stderr.contains("unlocked") && !status.stderr.contains("failed"))
    }

    @Test func refusalsAreLoggedAsASummaryNotALineEach() throws {
        let d = try RunningDaemon(config: config())
        for _ in 0..<40 {
            _ = try runExecutable("/usr/bin/python3", ["-c", Self.attacker, d.socketPath, "query"],
                                  environment: [:], input: [], asUser: stranger)
        }
        d.stop()
        let lines = d.log.split(separator: "\n").filter { $0.contains("uid \(stranger)") || $0.contains("uid=\(stranger)") }
        #expect(lines.count <= 3, "\(lines.count) log lines for 40 refused connections")
    }
}
