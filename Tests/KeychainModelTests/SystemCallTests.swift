#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel
import Testing

@Suite("System calls")
struct SystemCallTests {
    /// An operation that fails with `errno` its first `failures` calls, then returns `result`.
    final class Scripted {
        var failures: Int
        let failing: Int32
        private(set) var calls = 0
        init(failures: Int, errno failing: Int32 = EINTR) {
            self.failures = failures
            self.failing = failing
        }
        func call(_ result: Int) -> Int {
            calls += 1
            if failures > 0 {
                failures -= 1
                errno = failing
                return -1
            }
            return result
        }
    }

    @Test(arguments: [0, 1, 5])
    func aCallInterruptedBySignalsIsMadeAgain(interruptions: Int) throws {
        let op = Scripted(failures: interruptions)
        #expect(try SystemCall.retrying("read") { op.call(7) } == 7)
        #expect(op.calls == interruptions + 1)
    }

    @Test func anotherErrorIsThrownWithItsErrnoAndCallWithoutRetrying() {
        let op = Scripted(failures: 3, errno: ENOSPC)
        #expect(throws: SystemCallError("write", errno: ENOSPC)) { try SystemCall.retrying("write") { op.call(1) } }
        #expect(op.calls == 1)
    }

    @Test func itsKeychainErrorIsErrSecIOAndNamesTheCause() {
        let error = SystemCallError("open", errno: EACCES).keychainError("cannot open /x")
        #expect(error.status == .io)
        #expect(error.message == "cannot open /x: \(String(cString: strerror(EACCES)))")
    }

    @Test func shortWritesAndInterruptionsAreCompletedInOrder() throws {
        let source = Array(0..<100).map(UInt8.init)
        var written: [UInt8] = []
        var calls = 0
        try source.withUnsafeBytes { bytes in
            try SystemCall.writeAll(bytes) { rest in
                calls += 1
                if calls % 2 == 0 {
                    errno = EINTR
                    return -1
                }
                let n = min(7, rest.count)  // at most 7 bytes a call
                written += rest.prefix(n)
                return n
            }
        }
        #expect(written == source)
        #expect(calls == 2 * 15 - 1)  // 15 short writes, an interruption between each two
    }

    @Test func aWriteThatMakesNoProgressIsAnErrorNotALoop() {
        #expect(throws: SystemCallError.self) {
            try [UInt8](repeating: 1, count: 4).withUnsafeBytes { bytes in
                try SystemCall.writeAll(bytes) { _ in 0 }
            }
        }
    }

    @Test func shortReadsAreCompletedUntilTheBufferIsFull() throws {
        var source = Array(0..<50).map(UInt8.init)[...]
        var buffer = [UInt8](repeating: 0, count: 50)
        let n = try buffer.withUnsafeMutableBytes { b in
            try SystemCall.readFully(into: b) { rest in
                let n = min(3, rest.count, source.count)
                rest.copyBytes(from: source.prefix(n))
                source = source.dropFirst(n)
                return n
            }
        }
        #expect(n == 50)
        #expect(buffer == Array(0..<50).map(UInt8.init))
    }

    @Test func aReadStopsAtTheEndOfTheFileAndSaysHowMuchItGot() throws {
        var given = false
        var buffer = [UInt8](repeating: 0, count: 10)
        let n = try buffer.withUnsafeMutableBytes { b in
            try SystemCall.readFully(into: b) { rest in
                if given { return 0 }
                given = true
                rest[0] = 9
                return 1
            }
        }
        #expect(n == 1)
    }

    @Test func aDurableWriteReplacesTheFileWithPrivateModeAndLeavesNoTemporaryFile() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/record"
        try "old".write(toFile: path, atomically: false, encoding: .utf8)
        try Array("new".utf8).withUnsafeBytes { b in try DurableFile.write(b, to: path, placement: .replace) }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "new")
        var st = stat()
        #expect(lstat(path, &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["record"])
    }

    @Test func aCreateIfAbsentWriteKeepsTheFileAlreadyThere() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/key"
        try Array("first".utf8).withUnsafeBytes { b in try DurableFile.write(b, to: path, placement: .createIfAbsent) }
        try Array("second".utf8).withUnsafeBytes { b in try DurableFile.write(b, to: path, placement: .createIfAbsent) }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "first")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["key"])
    }

    @Test func aDurableWriteIntoAMissingDirectoryThrowsTheErrno() {
        #expect(throws: SystemCallError("open", errno: ENOENT)) {
            try Array("x".utf8).withUnsafeBytes { b in
                try DurableFile.write(b, to: "/nonexistent-\(getpid())/file", placement: .replace)
            }
        }
    }
}

/// A directory removed with its contents when the value goes away.
final class TemporaryDirectory {
    let path: String
    init() throws {
        var template = Array("/tmp/kcsys.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw SystemCallError.current("mkdtemp") }
        path = String(cString: p)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}
