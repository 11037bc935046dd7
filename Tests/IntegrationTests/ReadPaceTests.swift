import Testing
@testable import KeychainClient

@Suite("When a client watches for the answer to a read")
struct ReadPaceTests {
    private let window: UInt64 = 40_000

    @Test func aNewConnectionWatches() {
        #expect(ReadPace().shouldWatch(windowNs: window))
    }

    @Test func quickAnswersKeepItWatching() {
        var pace = ReadPace()
        for _ in 0..<100 { pace.record(25_000) }
        #expect(pace.shouldWatch(windowNs: window))
    }

    @Test func slowAnswersStopIt() {
        var pace = ReadPace()
        for _ in 0..<100 { pace.record(150_000) }
        #expect(!pace.shouldWatch(windowNs: window))
    }

    @Test func itResumesOnceAnswersAreQuickAgain() {
        var pace = ReadPace()
        for _ in 0..<100 { pace.record(150_000) }
        for _ in 0..<40 { pace.record(10_000) }
        #expect(pace.shouldWatch(windowNs: window))
    }

    @Test func aFewContendedWatchesInARowStopIt() {
        var pace = ReadPace()
        for _ in 0..<100 { pace.record(20_000) }
        for _ in 0..<6 { pace.record(4 * window) }
        #expect(!pace.shouldWatch(windowNs: window))
    }
}
