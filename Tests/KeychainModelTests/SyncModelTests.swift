import KeychainModel
import Testing

private func device(_ byte: UInt8) -> SyncDeviceID {
    try! SyncDeviceID([UInt8](repeating: byte, count: 16))
}

private func version(_ mdat: Int64, _ writer: UInt8, _ counter: Int64) -> SyncVersion {
    SyncVersion(mdat: mdat, writer: device(writer), counter: counter)
}

/// docs/sync.md, section 5: the order every device and the store agree on.
@Suite struct SyncConflictOrderTests {
    @Test func theNewerModificationWins() {
        #expect(SyncConflict.resolve(local: version(100, 0xFF, 9), incoming: version(101, 0x00, 1)) == .takeIncoming)
        #expect(SyncConflict.resolve(local: version(101, 0x00, 1), incoming: version(100, 0xFF, 9)) == .keepLocal)
    }

    @Test func equalModificationTimesFallToTheWritersBytes() {
        var high = [UInt8](repeating: 0, count: 16)
        high[0] = 0x80  // as bytea orders it: unsigned, first byte first
        var low = [UInt8](repeating: 0xFF, count: 16)
        low[0] = 0x7F
        let a = SyncVersion(mdat: 5, writer: try! SyncDeviceID(high), counter: 1)
        let b = SyncVersion(mdat: 5, writer: try! SyncDeviceID(low), counter: 99)
        #expect(b < a)
        #expect(SyncConflict.resolve(local: b, incoming: a) == .takeIncoming)
    }

    @Test func equalTimeAndWriterFallToTheCounter() {
        #expect(SyncConflict.resolve(local: version(5, 1, 2), incoming: version(5, 1, 3)) == .takeIncoming)
        #expect(SyncConflict.resolve(local: version(5, 1, 3), incoming: version(5, 1, 2)) == .keepLocal)
    }

    @Test func theSameVersionIsIdenticalNotANewWrite() {
        #expect(SyncConflict.resolve(local: version(5, 1, 3), incoming: version(5, 1, 3)) == .identical)
    }

    @Test func anItemNotHeldLocallyIsTaken() {
        #expect(SyncConflict.resolve(local: nil, incoming: version(-1, 0, 0)) == .takeIncoming)
    }

    @Test func everyDeviceConvergesWhateverOrderTheVersionsArriveIn() {
        let versions = [version(7, 2, 1), version(7, 1, 5), version(9, 0, 1), version(9, 0, 2), version(3, 9, 9)]
        let winner = versions.max()!
        for rotation in 0..<versions.count {
            let arrival = Array(versions[rotation...] + versions[..<rotation])
            for order in [arrival, arrival.reversed()] {
                var held: SyncVersion?
                for v in order where SyncConflict.resolve(local: held, incoming: v) == .takeIncoming { held = v }
                #expect(held == winner)
            }
        }
    }

    @Test func aWriterStampsAfterWhatItUpdatesEvenWithItsClockBehind() {
        #expect(SyncVersion.stampedMdat(now: 1_000, previous: 5_000) == 5_001)
        #expect(SyncVersion.stampedMdat(now: 9_000, previous: 5_000) == 9_000)
        #expect(SyncVersion.stampedMdat(now: 9_000, previous: nil) == 9_000)
        #expect(SyncVersion.stampedMdat(now: 0, previous: .max) == .max)
    }

    @Test func aDeviceIDIsSixteenBytes() {
        #expect(thrownStatus { () throws(KeychainError) in try SyncDeviceID([1, 2, 3]) } == .decode)
    }
}

@Suite struct SyncFingerprintTests {
    @Test func readsSixteenBytesBigEndianModTenToTheThirtyTwo() {
        var one = [UInt8](repeating: 0, count: 16)
        one[15] = 1
        #expect(SyncFingerprint(hashBytes: one).digits == String(repeating: "0", count: 31) + "1")
        // 2^128 - 1 = 340282366920938463463374607431768211455; mod 10^32 keeps the last 32 digits.
        #expect(SyncFingerprint(hashBytes: [UInt8](repeating: 0xFF, count: 16)).digits
                == "66920938463463374607431768211455")
    }

    @Test func printsEightGroupsOfFour() {
        let f = SyncFingerprint(hashBytes: [UInt8](repeating: 0xFF, count: 16))
        #expect(f.description == "6692 0938 4634 6337 4607 4317 6821 1455")
    }

    @Test func typedDigitsMatchWithOrWithoutSpaces() throws {
        let f = SyncFingerprint(hashBytes: [UInt8](repeating: 0xFF, count: 16))
        #expect(try SyncFingerprint(typed: f.description) == f)
        #expect(try SyncFingerprint(typed: f.digits) == f)
    }

    @Test(arguments: ["6692 0938 4634 6337", "66920938463463374607431768211455 1", "6692-0938-4634-6337-4607-4317-6821-1455", ""])
    func anythingButAll32DigitsIsParam(typed: String) {
        #expect(thrownStatus { () throws(KeychainError) in try SyncFingerprint(typed: typed) } == .param)
    }
}

/// docs/sync.md, section 6, as pure decisions: replayed records, a rolled-back store.
@Suite struct SyncReplayAndRollbackTests {
    @Test func aRecordOlderThanTheLocalItemIsSupersededNotApplied() {
        var ledger = SyncWriterLedger()
        #expect(ledger.admit(version(5, 1, 1), local: version(6, 2, 1), mode: .afterCursor) == .superseded)
        #expect(ledger.admit(version(7, 1, 2), local: version(6, 2, 1), mode: .afterCursor) == .apply)
    }

    @Test func aWritersCounterSeenAgainAfterTheCursorIsAReplay() {
        var ledger = SyncWriterLedger()
        #expect(ledger.admit(version(5, 1, 4), local: nil, mode: .afterCursor) == .apply)
        // The same record served again, and an older one of that writer for an item this
        // device does not hold: both replays, though the second would otherwise apply.
        #expect(ledger.admit(version(5, 1, 4), local: version(5, 1, 4), mode: .afterCursor) == .replay)
        #expect(ledger.admit(version(9, 1, 3), local: nil, mode: .afterCursor) == .replay)
        #expect(ledger.highestCounter[device(1)] == 4)
    }

    @Test func olderCountersAreNormalInAReadOfEveryRow() {
        var ledger = SyncWriterLedger(highestCounter: [device(1): 10])
        #expect(ledger.admit(version(5, 1, 3), local: nil, mode: .everyRow) == .apply)
        #expect(ledger.highestCounter[device(1)] == 10)
    }

    @Test func countersOfOneWriterDoNotGuardAnother() {
        var ledger = SyncWriterLedger(highestCounter: [device(1): 10])
        #expect(ledger.admit(version(5, 2, 3), local: nil, mode: .afterCursor) == .apply)
    }

    private let remembered = SyncStoreView(seq: 100, rosterLength: 3, heads: [
        device(1): SyncHeadPosition(counter: 20, rosterLength: 3),
        device(2): SyncHeadPosition(counter: 7, rosterLength: 2),
    ])

    @Test func aStoreAtOrAheadOfWhatWasSeenIsConsistent() {
        var store = remembered
        #expect(SyncStoreState.check(store: store, remembered: remembered) == .consistent)
        store.seq = 150
        store.rosterLength = 4
        store.heads[device(1)] = SyncHeadPosition(counter: 25, rosterLength: 4)
        store.heads[device(3)] = SyncHeadPosition(counter: 1, rosterLength: 4)
        #expect(SyncStoreState.check(store: store, remembered: remembered) == .consistent)
    }

    @Test func aSeqBelowTheCursorIsARollback() {
        var store = remembered
        store.seq = 99
        #expect(isRolledBack(SyncStoreState.check(store: store, remembered: remembered)))
    }

    @Test func aShorterRosterIsARollback() {
        var store = remembered
        store.rosterLength = 2
        #expect(isRolledBack(SyncStoreState.check(store: store, remembered: remembered)))
    }

    @Test func aHeadBelowTheOneSeenOrAMissingHeadIsARollback() {
        var store = remembered
        store.heads[device(1)]!.counter = 19
        #expect(isRolledBack(SyncStoreState.check(store: store, remembered: remembered)))
        store = remembered
        store.heads[device(2)] = nil
        #expect(isRolledBack(SyncStoreState.check(store: store, remembered: remembered)))
    }

    @Test func aHeadNamingALongerRosterThanTheStoreShowsIsAPartition() {
        var store = remembered
        store.heads[device(2)] = SyncHeadPosition(counter: 8, rosterLength: 4)
        #expect(SyncStoreState.check(store: store, remembered: remembered) == .partitioned)
    }

    private func isRolledBack(_ state: SyncStoreState) -> Bool {
        if case .rolledBack = state { return true }
        return false
    }
}
