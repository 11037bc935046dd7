#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import SecretService
import Testing

/// The bridge's per-call check of a connection's process (Sources/SecretService/BusCaller.swift):
/// through the /proc/PID directory it holds, and through /proc/PID opened again where it holds
/// none. Against real child processes of this test.
@Suite("Secret Service: a caller's process, checked at each call")
struct ProcessDirectoryTests {
    /// A child running `path` with `arguments`, its stdin a pipe we hold the write end of.
    struct Child {
        let pid: pid_t
        let input: Int32

        init(_ path: String, _ arguments: [String]) throws {
            // Close-on-exec from the start, so that a child another test spawns meanwhile holds
            // no end of it (a socket pair: Glibc's module has no pipe2).
            var fds: [Int32] = [0, 0]
            #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
            let argv = ([path] + arguments).map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            let environment: [UnsafeMutablePointer<CChar>?] = [nil]
            var pid: pid_t = 0
            try #require(posix_spawn(&pid, path, &actions, nil, argv, environment) == 0)
            close(fds[0])
            self.pid = pid
            input = fds[1]
        }

        /// Closes its stdin (it reads to the end, then goes on).
        func release() { close(input) }

        /// Reaps it (after it exited or was killed).
        func reap() {
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
        }

        func kill() {
            _ = Glibc.kill(pid, SIGKILL)
            reap()
        }
    }

    static func stamp(_ path: String) throws -> ExecutableStamp {
        var info = stat()
        try #require(stat(path, &info) == 0)
        return ExecutableStamp(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Polls `condition` (a process's state moving under us) up to ten seconds.
    static func waitFor(_ condition: () -> Bool) {
        for _ in 0..<1000 where !condition() { usleep(10_000) }
    }

    static func isZombie(_ pid: pid_t) -> Bool {
        guard let line = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = line.lastIndex(of: ")") else { return false }
        return line[line.index(after: close)...].split(separator: " ").first == "Z"
    }

    @Test func aHeldDirectoryShowsTheExecutableTheProcessRuns() throws {
        let child = try Child("/bin/cat", [])
        defer { child.kill() }
        let directory = try #require(ProcessDirectory(pid: child.pid))
        #expect(directory.executable == (try Self.stamp("/bin/cat")))
        #expect(directory.startTime != nil)
    }

    /// What the check rests on: the descriptor names the process it was opened on, so once
    /// that process is gone (reaped, its pid free for the next process) nothing shows through it.
    @Test func aHeldDirectoryShowsNothingOnceItsProcessIsReaped() throws {
        let child = try Child("/bin/cat", [])
        let directory = try #require(ProcessDirectory(pid: child.pid))
        child.release()
        child.reap()
        #expect(directory.executable == nil)
        #expect(directory.startTime == nil)
    }

    /// An exited process not yet waited for (its parent still holds it): no executable shows.
    @Test func aHeldDirectoryOfAnUnreapedZombieShowsNoExecutable() throws {
        let child = try Child("/bin/cat", [])
        defer { child.reap() }
        let directory = try #require(ProcessDirectory(pid: child.pid))
        child.release()
        Self.waitFor { Self.isZombie(child.pid) }
        #expect(Self.isZombie(child.pid))
        #expect(directory.executable == nil)
    }

    /// A process that execs another program: the held directory shows the new executable.
    @Test func aHeldDirectoryShowsTheProgramAProcessExecs() throws {
        let child = try Child("/bin/sh", ["-c", "read line; exec /bin/cat"])
        defer { child.kill() }
        let directory = try #require(ProcessDirectory(pid: child.pid))
        let shell = try Self.stamp("/bin/sh"), cat = try Self.stamp("/bin/cat")
        #expect(directory.executable == shell)
        _ = write(child.input, "\n", 1)
        Self.waitFor { directory.executable == cat }
        #expect(directory.executable == cat)
    }

    /// The check without a held directory (past the bridge's bound): the pid is opened again,
    /// and a start time other than the one first seen (a later process with that pid) counts
    /// as the first one having exited.
    @Test func withoutAHeldDirectoryTheStartTimeMustMatch() throws {
        let child = try Child("/bin/cat", [])
        defer { child.kill() }
        let directory = try #require(ProcessDirectory(pid: child.pid))
        let startTime = try #require(directory.startTime)
        let cat = try Self.stamp("/bin/cat")
        let same = KnownCaller(process: BusCaller(pid: child.pid, startTime: startTime, executable: cat), directory: nil)
        #expect(same.executableNow == cat)
        let later = KnownCaller(process: BusCaller(pid: child.pid, startTime: startTime + 1, executable: cat), directory: nil)
        #expect(later.executableNow == nil)
        #expect(throws: BusErrorReply.self) { try BusCallerReader.recheck(later, uniqueName: ":1.9") }
    }

    @Test func aRecheckRefusesAProcessThatExecedAnotherProgram() throws {
        let child = try Child("/bin/sh", ["-c", "read line; exec /bin/cat"])
        defer { child.kill() }
        let directory = try #require(ProcessDirectory(pid: child.pid))
        let first = KnownCaller(process: BusCaller(pid: child.pid, startTime: try #require(directory.startTime),
                                                   executable: try Self.stamp("/bin/sh")), directory: directory)
        #expect(try BusCallerReader.recheck(first, uniqueName: ":1.9") == (try Self.stamp("/bin/sh")))
        _ = write(child.input, "\n", 1)
        Self.waitFor { directory.executable == (try? Self.stamp("/bin/cat")) }
        #expect(throws: BusErrorReply.self) { try BusCallerReader.recheck(first, uniqueName: ":1.9") }
    }
}
