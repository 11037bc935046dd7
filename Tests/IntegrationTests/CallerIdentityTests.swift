import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// A permitted program connects, then execs something else that inherits the connection; and
/// a caller who names an attribute to forge a log line. (docs/security.md, "Who a caller is".)
@Suite("A caller is what it runs, and cannot write the daemon's log", .serialized)
struct CallerIdentityTests {
    /// The real python binary (the app's executable) and a copy of it elsewhere (another
    /// program, as far as the daemon can tell).
    static func pythons(in directory: String) throws -> (allowed: String, other: String) {
        let allowed = try #require(realpath("/usr/bin/python3", nil).map { p -> String in
            defer { free(p) }
            return String(cString: p)
        })
        let other = directory + "/other-program"
        try? FileManager.default.removeItem(atPath: other)
        try FileManager.default.copyItem(atPath: allowed, toPath: other)
        return (allowed, other)
    }

    /// Connects as the allowed program, adds an item, then execs `next` (if given) with the
    /// connection inherited, which asks for the item's secret on it. Prints one status code per
    /// request, then "closed" if the daemon hung up.
    static let client = #"""
    import os, socket, struct, sys
    def enc(d):
        out = struct.pack("<I", len(d))
        for k in sorted(d):
            kb = k.encode(); v = d[k]
            out += struct.pack("<H", len(kb)) + kb
            if isinstance(v, bool): out += bytes([4, 1 if v else 0])
            elif isinstance(v, bytes): out += bytes([2]) + struct.pack("<I", len(v)) + v
            else: vb = v.encode(); out += bytes([1]) + struct.pack("<I", len(vb)) + vb
        return out
    def call(s, op, d):
        payload = bytes([1, op]) + enc(d)
        try:
            s.sendall(struct.pack("<I", len(payload)) + payload)
            head = s.recv(4, socket.MSG_WAITALL)
        except OSError:
            return "closed"

        if len(head) < 4: return "closed"
        body = s.recv(struct.unpack("<I", head)[0], socket.MSG_WAITALL)
        return str(struct.unpack("<i", body[1:5])[0])
    item = {"class": "genp", "svce": "exec-test", "acct": "a"}
    if sys.argv[1] == "first":
        s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[2])
        print(call(s, 1, dict(item, v_Data=b"app secret")), flush=True)
        print(call(s, 2, dict(item, r_Data=True)), flush=True)
        if len(sys.argv) > 3:
            os.set_inheritable(s.fileno(), True)
            os.execv(sys.argv[3], [sys.argv[3], "-c", sys.argv[4], "second", str(s.fileno())])
    else:
        s = socket.socket(fileno=int(sys.argv[2]))
        print(call(s, 2, dict(item, r_Data=True)), flush=True)
        print(call(s, 2, dict(item, r_Data=True)), flush=True)
    """#

    func run(_ arguments: [String]) throws -> [String] {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: arguments[0])
        p.arguments = Array(arguments.dropFirst())
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    func daemon(allowing executable: String, launcher: [String] = []) throws -> RunningDaemon {
        try RunningDaemon(config: """
            admin_uids = [0]
            [[app]]
            id = "python.app"
            uids = [0]
            executables = ["\(executable)"]
            groups = ["python.app"]
            """, launcher: launcher)
    }

    @Test func aProcessThatExecsAnotherProgramLosesTheConnectionsAccess() throws {
        let (allowed, other) = try Self.pythons(in: "/tmp")
        defer { unlink(other) }
        let d = try daemon(allowing: allowed)
        let lines = try run([allowed, "-c", Self.client, "first", d.socketPath, other, Self.client])
        #expect(Array(lines.prefix(2)) == ["0", "0"])  // the app itself adds and reads
        #expect(lines.count == 4)
        #expect(lines.dropFirst(2).first == String(KeychainStatus.missingEntitlement.rawValue), "\(lines)")
        #expect(lines.last == "closed", "\(lines)")
        #expect(d.log.contains("no longer runs"))
    }

    @Test func theSameProgramKeepsItsConnection() throws {
        let (allowed, other) = try Self.pythons(in: "/tmp")
        defer { unlink(other) }
        let d = try daemon(allowing: allowed)
        let lines = try run([allowed, "-c", Self.client, "first", d.socketPath, allowed, Self.client])
        #expect(lines == ["0", "0", "0", "0"])
    }

    /// Runs keychaind as root without CAP_SYS_PTRACE, as the packaged daemon runs without it:
    /// it then cannot read the executable of a non-dumpable process.
    static let withoutPtrace = ["/usr/bin/setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]

    /// The client, made non-dumpable (prctl PR_SET_DUMPABLE 0, as ssh-agent and anything that
    /// drops privileges does) before it connects.
    static let hiddenClient = "import ctypes; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n" + client

    /// Two applications of uid 0: one told apart by the python executable, and the rest of uid 0.
    func daemonWithUIDRule(allowing executable: String) throws -> RunningDaemon {
        let d = try RunningDaemon(config: """
            admin_uids = [0]
            [[app]]
            id = "python.app"
            uids = [0]
            executables = ["\(executable)"]
            groups = ["python.app"]
            [[app]]
            id = "root"
            uids = [0]
            groups = ["uid.0"]
            """, launcher: Self.withoutPtrace)
        let status = try String(contentsOfFile: "/proc/\(d.pid)/status", encoding: .utf8)
        let effective = try #require(status.split(separator: "\n").first { $0.hasPrefix("CapEff:") }.flatMap { UInt64($0.split(separator: "\t").last!, radix: 16) })
        try #require(effective & (1 << 19) == 0, "keychaind still has CAP_SYS_PTRACE")
        return d
    }

    @Test func aNonDumpableCallerIsServedByItsUIDRule() throws {
        let (allowed, other) = try Self.pythons(in: "/tmp")
        defer { unlink(other) }
        let d = try daemonWithUIDRule(allowing: allowed)
        let lines = try run([allowed, "-c", Self.hiddenClient, "first", d.socketPath])
        #expect(lines == ["0", "0"], "\(lines) \(d.log)")
        #expect(!d.log.contains("no longer runs"))
    }

    @Test func aNonDumpableCallerIsNotTakenForTheAppOfItsHiddenExecutable() throws {
        let (allowed, other) = try Self.pythons(in: "/tmp")
        defer { unlink(other) }
        let d = try daemon(allowing: allowed, launcher: Self.withoutPtrace)
        let lines = try run([allowed, "-c", Self.hiddenClient, "first", d.socketPath])
        #expect(lines.first == String(KeychainStatus.missingEntitlement.rawValue), "\(lines)")
    }

    @Test func aNonDumpableCallerThatExecsAnotherProgramLosesTheConnection() throws {
        let (allowed, other) = try Self.pythons(in: "/tmp")
        defer { unlink(other) }
        let d = try daemonWithUIDRule(allowing: allowed)
        let lines = try run([allowed, "-c", Self.hiddenClient, "first", d.socketPath, other, Self.client])
        #expect(Array(lines.prefix(2)) == ["0", "0"], "\(lines)")
        #expect(lines.dropFirst(2).first == String(KeychainStatus.missingEntitlement.rawValue), "\(lines)")
        #expect(lines.last == "closed", "\(lines)")
    }

    @Test func aCallerCannotForgeALogLineWithAnAttributeName() throws {
        let d = try RunningDaemon()
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        let forged = "x\nkeychaind: FORGED line\r\u{1b}[2J"
        var w = ByteWriter()
        w.u8(WireCodec.version)
        w.u8(Request.Operation.add.rawValue)
        w.u32(2)
        for _ in 0..<2 {  // a key given twice: the decoder's message names it
            w.u16(UInt16(forged.utf8.count))
            w.raw(Array(forged.utf8))
            AttributeCodec.encodeValue(.string("v"), into: &w)
        }
        try socket.writeAll(Frame.encode(w.bytes))
        let answer = try #require(try Frame.read(from: socket, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
        #expect(try WireCodec.decodeResponse(answer).status == KeychainStatus.param.rawValue)
        d.stop()
        let log = d.log
        #expect(log.contains(#"x\nkeychaind: FORGED"#), "the attempt is logged, escaped: \(log)")
        #expect(!log.split(separator: "\n").contains { $0.hasPrefix("keychaind: FORGED") })
        #expect(!log.contains("\u{1b}"))
    }
}
