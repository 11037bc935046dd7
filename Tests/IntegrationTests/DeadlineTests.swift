import Foundation
import KeychainModel
import KeychainProtocol
import Testing

/// Slow clients: a frame trickling in, and headers announcing more than ever arrives
/// (docs/security.md, "Fair service").
@Suite("Frames have a deadline and cost what arrived", .serialized)
struct DeadlineTests {
    /// Whether the daemon has closed `socket` (EOF or reset), without waiting.
    func closedByDaemon(_ socket: UnixSocket) -> Bool {
        var byte: UInt8 = 0
        let n = recv(socket.fd, &byte, 1, Int32(MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno != EAGAIN)
    }

    @Test func aFrameTricklingInIsDroppedAtTheDeadlineFromItsFirstByte() throws {
        let d = try RunningDaemon()  // frame_timeout_seconds = 1
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        try socket.writeAll([100, 0, 0, 0])  // announces 100 bytes
        let start = Date()
        var closedAfter: Double?
        for _ in 0..<20 {  // one byte every 0.3 s: each read is well within the time-out
            usleep(300_000)
            if closedByDaemon(socket) {
                closedAfter = Date().timeIntervalSince(start)
                break
            }
            _ = try? socket.writeAll([1])
        }
        let after = try #require(closedAfter, "the daemon kept a trickling frame open for 6 s")
        #expect(after < 3)
    }

    /// A line of /proc/PID/status, in KiB.
    func statusKiB(_ pid: Int32, _ field: String) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix(field + ":") })
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
    }

    @Test func headersAnnouncingTheLargestFrameAllocateNothingUntilItsBytesArrive() throws {
        let d = try RunningDaemon(config: "frame_timeout_seconds = 30")
        var sockets: [UnixSocket] = []
        defer { for s in sockets { s.close() } }
        for _ in 0..<64 { sockets.append(try UnixSocket.connect(path: d.socketPath)) }
        usleep(500_000)  // every connection has its worker (and its stack) now
        let before = try statusKiB(d.pid, "VmData")
        let largest = UInt32(Frame.maxPayloadBytes)
        for s in sockets { try s.writeAll(withUnsafeBytes(of: largest.littleEndian) { Array($0) } + [1]) }
        usleep(500_000)
        let grown = try statusKiB(d.pid, "VmData") - before
        // 64 buffers of the announced 1.25 MiB would be 80 MiB; what arrived is 64 bytes.
        #expect(grown < 24 << 10, "the daemon allocated \(grown >> 10) MiB for 64 one-byte frames")
    }
}
