#if canImport(Glibc)
import Glibc
#endif
import KeychainProtocol
import Testing
@testable import KeychainServer

@Suite("Watching a connection for the next request")
struct BusyPollTests {
    /// A connection whose client came back `gap` ns after its answer, at t = 1 ms.
    private func served(_ poll: BusyPoll, connection: Int = 1, gap: UInt64) -> ConnectionPace {
        var pace = ConnectionPace(connection: connection)
        poll.requestStarted(&pace, at: 500_000)
        poll.requestFinished(&pace, at: 1_000_000)
        poll.requestStarted(&pace, at: 1_000_000 + gap)
        poll.requestFinished(&pace, at: 1_100_000)
        return pace
    }

    @Test func aClientThatCameBackWithinTheWindowIsBackToBack() {
        #expect(served(BusyPoll(windowMicroseconds: 50), gap: 20_000).backToBack(windowNs: 50_000))
    }

    @Test func aClientThatPausedLongerThanTheWindowIsNot() {
        #expect(!served(BusyPoll(windowMicroseconds: 50), gap: 80_000).backToBack(windowNs: 50_000))
    }

    @Test func theFirstRequestOfAConnectionIsNotBackToBack() {
        var pace = ConnectionPace(connection: 1)
        pace.requestArrived(at: 5_000)
        #expect(!pace.backToBack(windowNs: 50_000))
    }

    @Test func aBackToBackClientMayWatchWhenNothingElseRuns() {
        let poll = BusyPoll(windowMicroseconds: 50)
        #expect(poll.beginWatching(pace: served(poll, gap: 10_000), at: 1_200_000))
    }

    @Test func anIsolatedCallNeverWatches() {
        let poll = BusyPoll(windowMicroseconds: 50)
        #expect(!poll.beginWatching(pace: served(poll, gap: 900_000), at: 2_000_000))
    }

    @Test func onlyOneConnectionWatchesAtATime() {
        let poll = BusyPoll(windowMicroseconds: 50)
        let pace = served(poll, gap: 10_000)
        #expect(poll.beginWatching(pace: pace, at: 1_200_000))
        #expect(!poll.beginWatching(pace: pace, at: 1_200_000))
        poll.endWatching()
        #expect(poll.beginWatching(pace: pace, at: 1_200_000))
    }

    @Test func nobodyWatchesWhileAnotherConnectionIsServing() {
        let poll = BusyPoll(windowMicroseconds: 50)
        let pace = served(poll, gap: 10_000)
        var other = ConnectionPace(connection: 2)
        poll.requestStarted(&other, at: 1_150_000)
        #expect(!poll.beginWatching(pace: pace, at: 1_200_000))
    }

    @Test func nobodyWatchesWhileAnotherClientIsActive() {
        let poll = BusyPoll(windowMicroseconds: 50)
        let pace = served(poll, connection: 1, gap: 10_000)
        _ = served(poll, connection: 2, gap: 10_000)  // finished, but only just
        #expect(!poll.beginWatching(pace: pace, at: 1_200_000))
        #expect(poll.beginWatching(pace: pace, at: 1_010_000 + BusyPoll.othersQuietNs))
    }

    @Test func aZeroWindowTurnsWatchingOff() {
        let poll = BusyPoll(windowMicroseconds: 0)
        #expect(!poll.beginWatching(pace: served(poll, gap: 1), at: 1_200_000))
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
        #expect(reader.watch(forNs: 10_000_000_000) { true })
        #expect(try reader.next(idleTimeoutMs: 1000, frameTimeoutMs: 1000).map(Array.init) == [7, 8, 9])
    }

    @Test func watchingStopsWhenToldToAndConsumesNothing() throws {
        let (a, b) = pair()
        defer { a.close(); b.close() }
        let reader = FrameReader(a)
        var asked = 0
        #expect(!reader.watch(forNs: 10_000_000_000) {
            asked += 1
            return asked < 3
        })
        #expect(asked == 3)
        try b.writeAll(Frame.encode([1]))
        #expect(try reader.next(idleTimeoutMs: 1000, frameTimeoutMs: 1000).map(Array.init) == [1])
    }

    @Test func aPeerClosingBetweenFramesEndsTheWatchAndReadsAsACleanEnd() throws {
        let (a, b) = pair()
        defer { a.close() }
        b.close()
        let reader = FrameReader(a)
        #expect(reader.watch(forNs: 10_000_000_000) { true })
        #expect(try reader.next(idleTimeoutMs: 1000, frameTimeoutMs: 1000) == nil)
    }
}
