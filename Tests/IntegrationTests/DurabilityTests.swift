import Foundation
import KeychainClient
import KeychainModel
import Testing


/// A burst writer: one of several threads adding items to one service, round after round.
private struct Writer: Hashable {
    let round: Int
    let thread: Int
}

/// The secret of burst item `index` of `w`: distinct per item, binary, and long enough that a
/// torn write could not pass for it.
private func burstSecret(_ w: Writer, _ index: Int) -> [UInt8] {
    let tag = Array("burst-\(w.round)-\(w.thread)-\(index)|".utf8)
    return (0..<8).flatMap { block in tag + [UInt8(block), 0x00, 0xFF, UInt8(truncatingIfNeeded: index)] }
}

private func burstService(_ w: Writer) -> String { "burst-\(w.round)-\(w.thread)" }

private func burstItem(_ w: Writer, _ index: Int) -> AttributeDictionary {
    ["class": .string("genp"), "svce": .string(burstService(w)), "acct": .string("acct-\(index)")]
}

/// Starts `writers` threads, each with its own connection, adding items 0, 1, 2... until an
/// add fails; kills the daemon with SIGKILL after `crashAfter` seconds; returns how many adds
/// each writer had acknowledged (always a prefix: writers stop at their first error).
private func burstThenCrash(_ d: RunningDaemon, round: Int, writers: Int, crashAfter: Double) -> [Int] {
    let maxAdds = 5_000  // far more than the time allows: the crash lands mid-burst
    let acknowledged = Locked([Int](repeating: 0, count: writers))
    let finishedAll = Locked(false)
    let done = DispatchGroup()
    let started = DispatchSemaphore(value: 0)
    for t in 0..<writers {
        done.enter()
        Thread {
            let w = Writer(round: round, thread: t)
            let c = KeychainConnection(socketPath: d.socketPath, timeoutMs: 10_000)
            started.signal()
            var i = 0
            while i < maxAdds {
                do {
                    try c.add(burstItem(w, i).merging(["v_Data": .data(burstSecret(w, i))]) { $1 })
                } catch {
                    break  // the daemon is gone
                }
                i += 1
                let n = i
                acknowledged.withLock { $0[t] = n }
            }
            if i == maxAdds { finishedAll.withLock { $0 = true } }
            done.leave()
        }.start()
    }
    for _ in 0..<writers { started.wait() }
    Thread.sleep(forTimeInterval: crashAfter)
    d.crash()
    #expect(done.wait(timeout: .now() + 15) == .success, "writers did not stop after the crash")
    #expect(!finishedAll.withLock { $0 }, "a writer finished before the crash")
    return acknowledged.withLock { $0 }
}

/// After a crash and restart: every acknowledged add of `w` is there with its exact secret;
/// the add in flight at the crash happened entirely or not at all; nothing else exists.
private func expectBurstDurable(_ c: KeychainConnection, _ w: Writer, acknowledged: Int,
                                sourceLocation: SourceLocation = #_sourceLocation) {
    var lost: [Int] = []
    for i in 0..<acknowledged {
        do {
            let found = try c.copyMatching(burstItem(w, i).merging(["r_Data": .bool(true)]) { $1 })
            #expect(found == .single(.data(burstSecret(w, i))), "\(w) item \(i) (acknowledged) reads back wrong",
                    sourceLocation: sourceLocation)
        } catch {
            lost.append(i)
        }
    }
    #expect(lost.isEmpty, "\(w): \(lost.count) of \(acknowledged) acknowledged items lost, first \(lost.prefix(5))",
            sourceLocation: sourceLocation)
    let inFlight = acknowledged
    do {
        let found = try c.copyMatching(burstItem(w, inFlight).merging(["r_Data": .bool(true)]) { $1 })
        #expect(found == .single(.data(burstSecret(w, inFlight))), "\(w): in-flight item \(inFlight) is torn",
                sourceLocation: sourceLocation)
    } catch {
        #expect(error.status == .itemNotFound, "\(w): in-flight item \(inFlight): \(error)", sourceLocation: sourceLocation)
    }
    var items: [ItemResult] = []
    do {
        let all = try c.copyMatching(["class": .string("genp"), "svce": .string(burstService(w)),
                                      "m_Limit": .string("m_LimitAll"), "r_Attributes": .bool(true), "r_Data": .bool(true)])
        if case .list(let list) = all { items = list } else { Issue.record("\(w): unexpected result \(all)", sourceLocation: sourceLocation) }
    } catch {
        #expect(error.status == .itemNotFound, "\(w): listing failed with \(error)", sourceLocation: sourceLocation)
    }
    #expect(items.count == inFlight || items.count == inFlight + 1,
            "\(w): \(items.count) items for \(inFlight) acknowledged", sourceLocation: sourceLocation)
    for item in items {
        guard case .attributes(let attrs) = item, case .string(let acct)? = attrs["acct"],
              let i = Int(acct.dropFirst("acct-".count)) else {
            Issue.record("\(w): unexpected item \(item)", sourceLocation: sourceLocation)
            continue
        }
        #expect(i <= inFlight, "\(w): item \(i) was never sent", sourceLocation: sourceLocation)
        #expect(attrs["v_Data"] == .data(burstSecret(w, i)), "\(w): item \(i) reads back wrong", sourceLocation: sourceLocation)
    }
}

@Suite("Data durability across restarts and crashes", .serialized)
struct DurabilityTests {
    /// Reads search the write-ahead log for every page they touch until it is checkpointed
    /// (SQLite's own checkpoint waits for 10,000 pages): once writes pause, the daemon copies
    /// the log into the database and empties it, and what was written is read back from there.
    @Test func aPauseInWritesEmptiesTheWriteAheadLog() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("wal"), "acct": .string("checkpointed")]
        try c.add(item.merging(["v_Data": .data(bytes("in the file"))]) { $1 })
        let log = d.stateDirectory + "/keychain.db-wal"
        func logBytes() -> Int64 {
            var st = stat()
            return stat(log, &st) == 0 ? Int64(st.st_size) : -1
        }
        // A deadline for a test that hangs, not a speed requirement: the daemon waits half a
        // second of no writes, and a loaded test machine may be slow to run it.
        var waited = 0
        while logBytes() != 0 && waited < 600 {
            usleep(100_000)
            waited += 1
        }
        #expect(logBytes() == 0, "the log still holds \(logBytes()) bytes after the writes stopped")
        #expect(try c.copyMatching(item.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(bytes("in the file"))))
    }

    @Test func itemsSurviveACleanRestart() throws {
        let d = try RunningDaemon()
        let secretA: [UInt8] = [0, 1, 2, 0xFE, 0xFF] + bytes("generic")
        let secretB: [UInt8] = bytes("internet-password") + [0]
        let a: AttributeDictionary = ["class": .string("genp"), "svce": .string("svc"), "acct": .string("alice"), "labl": .string("A")]
        let b: AttributeDictionary = ["class": .string("inet"), "srvr": .string("example.com"), "acct": .string("bob"), "ptcl": .string("htps")]
        do {
            let c = KeychainConnection(socketPath: d.socketPath)
            try c.add(a.merging(["v_Data": .data(secretA)]) { $1 })
            try c.add(b.merging(["v_Data": .data(secretB)]) { $1 })
        }
        #expect(d.stop() == 0)
        try d.start()
        let c = KeychainConnection(socketPath: d.socketPath)
        #expect(try c.copyMatching(a.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(secretA)))
        #expect(try c.copyMatching(b.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(secretB)))
        guard case .single(.attributes(let attrs)) = try c.copyMatching(a.merging(["r_Attributes": .bool(true)]) { $1 }) else {
            Issue.record("no attributes for the generic password")
            return
        }
        #expect(attrs["labl"] == .string("A"))
        #expect(attrs["acct"] == .string("alice"))
    }

    /// Three rounds, to widen the chance of the kill landing between a commit and its reply.
    @Test func killDuringABurstOfConcurrentAddsLosesNoAcknowledgedItem() throws {
        let d = try RunningDaemon()
        let writers = 4
        for round in 0..<3 {
            let acked = burstThenCrash(d, round: round, writers: writers, crashAfter: 0.15 + 0.05 * Double(round))
            #expect(acked.reduce(0, +) > 0, "round \(round): no add was acknowledged before the crash")
            try d.start()
            let c = KeychainConnection(socketPath: d.socketPath)
            for t in 0..<writers {
                expectBurstDurable(c, Writer(round: round, thread: t), acknowledged: acked[t])
            }
        }
    }

    @Test func staleSocketLeftByAKillIsReplacedOnRestart() throws {
        let d = try RunningDaemon()
        let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("s"), "acct": .string("before-crash")]
        try KeychainConnection(socketPath: d.socketPath).add(item.merging(["v_Data": .data(bytes("kept"))]) { $1 })
        d.crash()
        var st = stat()
        #expect(lstat(d.socketPath, &st) == 0 && (st.st_mode & S_IFMT) == S_IFSOCK, "kill -9 left no socket file to replace")
        #expect(!d.canConnect())
        try d.start()
        let c = KeychainConnection(socketPath: d.socketPath)
        #expect(try c.status()["state"] == .string("unlocked"))
        #expect(try c.copyMatching(item.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(bytes("kept"))))
    }
}
