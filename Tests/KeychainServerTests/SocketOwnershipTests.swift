#if canImport(Glibc)
import Glibc
#endif
import KeychainProtocol
import Testing

/// A socket's descriptor is closed exactly once. The kernel gives a closed number to the next
/// open at once, so in the daemon a second close would close another connection: these tests
/// put another open on the number and check that the old owner leaves it alone.
@Suite("A socket closes its descriptor exactly once")
struct SocketOwnershipTests {
    /// A socket and its peer's raw descriptor.
    func pair() throws -> (UnixSocket, Int32) {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        return (UnixSocket(fd: fds[0]), fds[1])
    }

    func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) != -1 }

    /// Closes a socket, then opens /dev/null (or what `reopen` opens) until it gets the
    /// socket's old number (another test's thread may take it first: then with a new socket),
    /// and hands both to `body`.
    func closedSocketAndItsNumberReopened(by reopen: () -> Int32 = { open("/dev/null", O_RDONLY | O_CLOEXEC) },
                                          _ body: (inout UnixSocket?, Int32) throws -> Void) throws {
        for _ in 0..<100 {
            let (socket, peer) = try pair()
            defer { close(peer) }
            let number = socket.fd
            socket.close()
            let reopened = reopen()
            guard reopened == number else {
                if reopened >= 0 { close(reopened) }
                continue
            }
            defer { close(reopened) }
            var owner: UnixSocket? = socket
            try body(&owner, reopened)
            return
        }
        Issue.record("the closed number was never reused by the next open")
    }

    @Test func aSecondCloseLeavesTheNumberReusedByAnotherOpenAlone() throws {
        try closedSocketAndItsNumberReopened { socket, reopened in
            socket?.close()
            #expect(isOpen(reopened))
        }
    }

    @Test func theLastReferenceToAClosedSocketLeavesTheNumberReusedByAnotherOpenAlone() throws {
        try closedSocketAndItsNumberReopened { socket, reopened in
            socket = nil
            #expect(isOpen(reopened))
        }
    }

    /// Another connection's socket pair: what a closed number is given to next in the daemon.
    func otherConnection() throws -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        return (fds[0], fds[1])
    }

    @Test func aWriteAfterCloseIsRefusedAndSendsNothingOnTheNumbersNewConnection() throws {
        let (other, otherPeer) = try otherConnection()
        defer { close(other); close(otherPeer) }
        try closedSocketAndItsNumberReopened(by: { dup(other) }) { socket, _ in
            #expect(throws: SocketFailure.closedHere) { try socket!.writeAll([0x41]) }
            var byte: UInt8 = 0
            #expect(recv(otherPeer, &byte, 1, Int32(MSG_DONTWAIT)) == -1, "the write reached the other connection")
        }
    }

    @Test func aReceiveAfterCloseIsRefusedAndReadsNothingOfTheNumbersNewConnection() throws {
        let (other, otherPeer) = try otherConnection()
        defer { close(other); close(otherPeer) }
        var byte: UInt8 = 0x42
        #expect(send(otherPeer, &byte, 1, 0) == 1)
        try closedSocketAndItsNumberReopened(by: { dup(other) }) { socket, _ in
            var buffer = [UInt8](repeating: 0, count: 1)
            #expect(throws: SocketFailure.closedHere) {
                _ = try buffer.withUnsafeMutableBytes { b in
                    try socket!.receive(into: b, deadline: MonotonicClock.nanoseconds() + 1_000_000_000)
                }
            }
            #expect(recv(other, &byte, 1, Int32(MSG_DONTWAIT)) == 1, "the receive took the other connection's byte")
        }
    }

    @Test func aShutdownAfterCloseLeavesTheNumbersNewConnectionOpen() throws {
        let (other, otherPeer) = try otherConnection()
        defer { close(other); close(otherPeer) }
        try closedSocketAndItsNumberReopened(by: { dup(other) }) { socket, reopened in
            socket!.shutdownBoth()
            var byte: UInt8 = 0x43
            #expect(send(reopened, &byte, 1, Int32(MSG_NOSIGNAL)) == 1, "the shutdown reached the other connection")
        }
    }

    /// True when `peer` reads end-of-file: every descriptor of the other end is closed.
    func seesItsPeerClosed(_ peer: Int32) -> Bool {
        var byte: UInt8 = 0
        return read(peer, &byte, 1) == 0
    }

    @Test func theLastReferenceToAnOpenSocketClosesIt() throws {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer { close(fds[1]) }
        do {
            let socket = UnixSocket(fd: fds[0])
            #expect(socket.fd == fds[0])
        }
        #expect(seesItsPeerClosed(fds[1]))
    }

    @Test func anOwnedDescriptorClosesWhenItsOwnerGoes() throws {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer { close(fds[1]) }
        do {
            let descriptor = OwnedDescriptor(adopting: fds[0])
            #expect(descriptor.rawValue == fds[0])
        }
        #expect(seesItsPeerClosed(fds[1]))
    }

    @Test func anOwnedDescriptorsCloseClosesIt() throws {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer { close(fds[1]) }
        OwnedDescriptor(adopting: fds[0]).close()
        #expect(seesItsPeerClosed(fds[1]))
    }
}
