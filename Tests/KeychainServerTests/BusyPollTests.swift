#if canImport(Glibc)
import Glibc
#endif
import KeychainProtocol
import Testing
@testable import KeychainServer

@Suite("Watching a connection for the next request")
struct BusyPollTests {
    private func pace(gap: UInt64) -> ConnectionPace {
        var pace = ConnectionPace()
        pace.answered(at: 1_000_000)
        pace.requestArrived(at: 1_000_000 + gap)
        return pace
    }

    @Test func aClientThatCameBackWithinTheWindowIsBackToBack() {
        #expect(pace(gap: 20_000).backToBack(windowNs: 50_000))
    }

    @Test func aClientThatPausedLongerThanTheWindowIsNot() {
        #expect(!pace(gap: 80_000).backToBack(windowNs: 50_000))
    }

    @Test func theFirstRequestOfAConnectionIsNotBackToBack() {
        var pace = ConnectionPace()
        pace.requestArrived(at: 5_000)
        #expect(!pace.backToBack(windowNs: 50_000))
    }

    @Test func aBackToBackClientMayWatchWhenNothingElseRuns() {
        let poll = BusyPoll(windowMicroseconds: 50)
        #expect(poll.beginWatching(pace: pace(gap: 10_000)))
    }

    @Test func anIsolatedCallNeverWatches() {
        let poll = BusyPoll(windowMicroseconds: 50)
        #expect(!poll.beginWatching(pace: pace(gap: 900_000)))
    }

    @Test func onlyOneConnectionWatchesAtATime() {
        let poll = BusyPoll(windowMicroseconds: 50)
        #expect(poll.beginWatching(pace: pace(gap: 10_000)))
        #expect(!poll.beginWatching(pace: pace(gap: 10_000)))
        poll.endWatching()
        #expect(poll.beginWatching(pace: pace(gap: 10_000)))
    }

    @Test func nobodyWatchesWhileAnotherConnectionIsServing() {
        let poll = BusyPoll(windowMicroseconds: 50)
        poll.requestStarted()
        #expect(!poll.beginWatching(pace: pace(gap: 10_000)))
        poll.requestFinished()
        #expect(poll.beginWatching(pace: pace(gap: 10_000)))
    }

    @Test func aZeroWindowTurnsWatchingOff() {
        let poll = BusyPoll(windowMicroseconds: 0)
        #expect(!poll.beginWatching(pace: pace(gap: 1)))
    }
}

@Suite("FrameReader.watch")
struct FrameReaderWatchTests {
    private func pair() -> (UnixSocket, UnixSocket) {
        var fds: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        return (UnixSocket(fd: fds[0]), UnixSocket(fd: fds[1]))
    }

    @Test func dataAlreadySentIsSeenAndThenReadAsAFrame() throws {
        let (a, b) = pair()
        defer { a.close(); b.close() }
        try b.writeAll(Frame.encode([7, 8, 9]))
        let reader = FrameReader(a)
        #expect(try reader.watch(forNs: 10_000_000_000) { true })
        #expect(try reader.next(idleTimeoutMs: 1000, frameTimeoutMs: 1000) == [7, 8, 9])
    }

    @Test func watchingStopsWhenToldToAndConsumesNothing() throws {
        let (a, b) = pair()
        defer { a.close(); b.close() }
        let reader = FrameReader(a)
        var asked = 0
        #expect(try !reader.watch(forNs: 10_000_000_000) {
            asked += 1
            return asked < 3
        })
        #expect(asked == 3)
        try b.writeAll(Frame.encode([1]))
        #expect(try reader.next(idleTimeoutMs: 1000, frameTimeoutMs: 1000) == [1])
    }

    @Test func aClosedPeerEndsTheWatchAsClosed() {
        let (a, b) = pair()
        defer { a.close() }
        b.close()
        let reader = FrameReader(a)
        #expect(throws: SocketFailure.closed) { try reader.watch(forNs: 10_000_000_000) { true } }
    }
}
