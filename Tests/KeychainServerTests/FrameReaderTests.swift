#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel
import KeychainProtocol
import Synchronization
import Testing

/// The frame reader must give the same frames however the bytes arrive: one at a time, in
/// random pieces, or all at once (as swift-nio's decoder verifier feeds a decoder).
@Suite("The frame reader")
struct FrameReaderTests {
    func pair() -> (UnixSocket, UnixSocket) {
        var fds: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        return (UnixSocket(fd: fds[0]), UnixSocket(fd: fds[1]))
    }

    /// Payloads of every interesting size: tiny, around the reader's buffer, far beyond it.
    static func payloads(_ rng: inout SeededGenerator) -> [[UInt8]] {
        [1, 2, 59, 60, 61, 64, 200, 1_000, 70_000, 200_000].map { n in
            (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
        }
    }

    /// Writes `stream` in pieces whose sizes `piece` chooses, from another thread.
    func feed(_ socket: UnixSocket, _ stream: [UInt8], piece: @escaping @Sendable (Int) -> Int) -> Thread {
        let writer = Thread {
            var offset = 0
            while offset < stream.count {
                let n = min(piece(offset), stream.count - offset)
                try? socket.writeAll(Array(stream[offset..<(offset + n)]))
                offset += n
            }
        }
        writer.start()
        return writer
    }

    func check(piece: @escaping @Sendable (Int) -> Int, seed: UInt64) throws {
        var rng = SeededGenerator(state: seed)
        let payloads = Self.payloads(&rng)
        let stream = payloads.flatMap { Array(Frame.encode($0)) }
        let (a, b) = pair()
        defer { a.close(); b.close() }
        // A small buffer, so that frames straddle it, compaction runs and large frames take
        // the direct path.
        let reader = FrameReader(b, capacity: 64, maxPayload: Frame.maxResponsePayloadBytes)
        _ = feed(a, stream, piece: piece)
        for (i, expected) in payloads.enumerated() {
            let got = try #require(try reader.next(idleTimeoutMs: 5_000, frameTimeoutMs: 5_000), "frame \(i), seed \(seed)")
            #expect(Array(got) == expected, "frame \(i) of \(expected.count) bytes, seed \(seed)")
        }
    }

    @Test func framesFedOneByteAtATimeArriveWhole() throws {
        try check(piece: { _ in 1 }, seed: 1)
    }

    @Test(arguments: [2, 3, 4] as [UInt64])
    func framesFedInRandomPiecesArriveWhole(seed: UInt64) throws {
        let sizes = Mutex(SeededGenerator(state: seed &* 7919))
        try check(piece: { _ in sizes.withLock { Int.random(in: 1...5_000, using: &$0) } }, seed: seed)
    }

    @Test func framesFedAllAtOnceArriveWhole() throws {
        try check(piece: { _ in Int.max }, seed: 5)
    }

    @Test func aLengthOfZeroOrOverTheLimitIsRefusedBeforeAnythingIsAllocated() throws {
        for length in [UInt32(0), UInt32(Frame.maxPayloadBytes + 1)] {
            let (a, b) = pair()
            defer { a.close(); b.close() }
            try a.writeAll(withUnsafeBytes(of: length.littleEndian) { Array($0) })
            let reader = FrameReader(b, capacity: 64)
            #expect(throws: SocketFailure.badLength(length)) { _ = try reader.next(idleTimeoutMs: 1_000, frameTimeoutMs: 1_000) }
        }
    }
}
