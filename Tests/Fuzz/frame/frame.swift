// libFuzzer target: the frame readers (Sources/KeychainProtocol/Frame.swift), fed through a
// real socket pair as a peer would feed them. The first input byte sets the FrameReader's
// buffer size (so frames straddle, fill and overflow it); the rest is the byte stream, after
// which the peer closes. Both readers must return exactly the frames a plain reading of the
// stream finds, then a clean end, a bad length or a close mid-frame, as that reading says.
#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol

/// The largest payload the readers accept here: small, so the limit is reached often.
let maxPayload = 1024

/// What reading `stream` frame by frame must give.
enum Outcome: Equatable {
    case end, badLength(UInt32), closedMidFrame
}

func expected(_ stream: ArraySlice<UInt8>) -> ([[UInt8]], Outcome) {
    var frames: [[UInt8]] = []
    var at = stream.startIndex
    while at < stream.endIndex {
        guard stream.endIndex - at >= 4 else { return (frames, .closedMidFrame) }
        let length = UInt32(stream[at]) | UInt32(stream[at + 1]) << 8 | UInt32(stream[at + 2]) << 16 | UInt32(stream[at + 3]) << 24
        guard length >= 1, length <= UInt32(maxPayload) else { return (frames, .badLength(length)) }
        guard stream.endIndex - at - 4 >= Int(length) else { return (frames, .closedMidFrame) }
        frames.append(Array(stream[(at + 4)..<(at + 4 + Int(length))]))
        at += 4 + Int(length)
    }
    return (frames, .end)
}

/// A connected pair whose first end has sent `stream` and closed.
func peerThatSent(_ stream: ArraySlice<UInt8>) -> UnixSocket {
    var fds: [Int32] = [0, 0]
    require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0, "socketpair failed")
    let sender = UnixSocket(fd: fds[0])
    try! sender.writeAll(Array(stream))
    sender.close()
    return UnixSocket(fd: fds[1])
}

func outcome(_ failure: SocketFailure) -> Outcome {
    switch failure {
    case .badLength(let n): return .badLength(n)
    case .closed: return .closedMidFrame
    case .closedHere: fatalError("the fuzz target never closes its own socket")
    default: fatalError("unexpected socket failure \(failure)")
    }
}

func readAll(_ next: () throws(SocketFailure) -> SecretBytes?) -> ([[UInt8]], Outcome) {
    var frames: [[UInt8]] = []
    while true {
        do {
            guard let payload = try next() else { return (frames, .end) }
            frames.append(payload.withUnsafeBytes { Array($0) })
        } catch {
            return (frames, outcome(error))
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    // A socket pair holds about 200 KiB unread; longer inputs would block the sender.
    guard size >= 1, size <= 64 << 10 else { return 0 }
    let input = UnsafeBufferPointer(start: data, count: size)
    let capacity = 4 + Int(input[0])
    let stream = Array(input)[1...]
    let want = expected(stream)

    let buffered = peerThatSent(stream)
    let reader = FrameReader(buffered, capacity: capacity, maxPayload: maxPayload)
    let got = readAll { () throws(SocketFailure) in try reader.next(idleTimeoutMs: 1000, frameTimeoutMs: 1000) }
    buffered.close()
    require(got.0 == want.0 && got.1 == want.1, "FrameReader disagrees with the stream: \(got.1) vs \(want.1)")

    let unbuffered = peerThatSent(stream)
    let oneShot = readAll { () throws(SocketFailure) in
        try Frame.read(from: unbuffered, idleTimeoutMs: 1000, frameTimeoutMs: 1000, maxPayload: maxPayload)
    }
    unbuffered.close()
    require(oneShot.0 == want.0 && oneShot.1 == want.1, "Frame.read disagrees with the stream: \(oneShot.1) vs \(want.1)")
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        func bytes(_ s: SecretBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }
        let status = bytes(WireCodec.frame(Request.status))
        let add = bytes(WireCodec.frame(Request.add(["class": .string("genp"), "svce": .string("fuzz"),
                                                     "v_Data": .data(Array("secret".utf8))])))
        let big = bytes(Frame.encode([UInt8](repeating: 0xa5, count: 300)))
        return [
            Seed("one-frame", [60] + status),
            Seed("three-frames-small-buffer", [0] + status + add + status),
            Seed("frame-larger-than-buffer", [12] + big + status),
            Seed("cut-mid-frame", [28] + add.dropLast(3)),
            Seed("zero-length", [8] + status + [0, 0, 0, 0]),
        ]
    }
    return 0
}
