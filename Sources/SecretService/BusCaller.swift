#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainModel

/// A D-Bus caller as keychaind names it: the process that opened the connection, by pid and
/// start time (clock ticks since boot, /proc/PID/stat field 22), so that the pair names that
/// one process for ever, even after its pid is reused.
struct BusCaller: Sendable, Hashable {
    let pid: Int32
    let startTime: UInt64
    /// The executable file it ran when the bridge first looked.
    let executable: ExecutableStamp
}

/// What a process is now, read through one /proc/PID directory: its start time and executable.
struct ProcessNow: Equatable {
    let startTime: UInt64
    let executable: ExecutableStamp
}

/// Finds out who a connection is (design §2.2, bridge side): the bus's record of uid and pid,
/// same uid as the bridge or AccessDenied, then the start time read through a /proc/PID
/// directory opened first, so that the read cannot land on a later process that reused the pid.
enum BusCallerReader {
    static func identify(_ credentials: BusCredentials, uniqueName: String) throws(BusErrorReply) -> BusCaller {
        defer { if let fd = credentials.processFD { close(fd) } }
        guard let uid = credentials.uid, let pid = credentials.pid, pid > 0, pid <= UInt32(Int32.max) else {
            throw .accessDenied("the bus did not say which process \(uniqueName) is")
        }
        guard uid == getuid() else {
            throw .accessDenied("this Secret Service serves uid \(getuid()) only; \(uniqueName) is uid \(uid)")
        }
        guard let now = processNow(pid: Int32(pid)) else { throw exited(uniqueName, pid) }
        // With a pidfd from the bus, the process it names must be the one just read: its
        // fdinfo shows the pid, or -1 once it has exited.
        if let fd = credentials.processFD, pidOfPidfd(fd) != Int32(pid) {
            throw exited(uniqueName, pid)
        }
        return BusCaller(pid: Int32(pid), startTime: now.startTime, executable: now.executable)
    }

    /// The start time and executable of `pid`, both read through one /proc/PID directory
    /// opened first, so that both are of one process even if the pid is reused meanwhile. Nil
    /// once it has exited (or is a zombie).
    static func processNow(pid: Int32) -> ProcessNow? {
        let directory = open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return nil }
        defer { close(directory) }
        var info = stat()
        guard let startTime = startTime(in: directory), fstatat(directory, "exe", &info, 0) == 0 else { return nil }
        return ProcessNow(startTime: startTime, executable: ExecutableStamp(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
    }

    /// Checks, on every call, that the connection's process is still the one first seen and
    /// still runs the executable it ran then: one that exec'd another program while keeping
    /// the connection (or handed it to a child before doing so) speaks no more for anyone.
    /// Returns the executable it runs (the one first seen).
    @discardableResult
    static func recheck(_ caller: BusCaller, uniqueName: String) throws(BusErrorReply) -> ExecutableStamp {
        guard let now = processNow(pid: caller.pid), now.startTime == caller.startTime else {
            throw exited(uniqueName, UInt32(caller.pid))
        }
        guard now.executable == caller.executable else {
            BridgeLog.error("refused \(uniqueName) (pid \(caller.pid)): it runs another executable than when the bridge first saw it")
            throw .accessDenied("the process that opened \(uniqueName) (pid \(caller.pid)) runs another program than when it connected; connect again")
        }
        return now.executable
    }

    /// Field 22 of `stat` in the /proc directory `directory`: parsed after the last ')', since
    /// the command name (field 2) may hold spaces and parentheses. Nil if the process is gone
    /// (reads through the directory fail with ESRCH), a zombie, or the line cannot be read.
    static func startTime(in directory: Int32) -> UInt64? {
        let fd = openat(directory, "stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = read(fd, &buffer, buffer.count)
        guard n > 0 else { return nil }
        return startTime(fromStat: buffer[..<n])
    }

    static func startTime(fromStat line: ArraySlice<UInt8>) -> UInt64? {
        guard let close = line.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        // After ") ": field 3 (state) onwards, so field 22 is the 20th.
        let fields = line[(close + 1)...].split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
        guard fields.count >= 20 else { return nil }
        // A zombie (Z) or dying (X) process has exited: its connection no longer speaks for it.
        guard let state = fields[0].first, state != UInt8(ascii: "Z"), state != UInt8(ascii: "X") else { return nil }
        return UInt64(String(decoding: fields[19], as: UTF8.self))
    }

    /// The pid a pidfd names, from /proc/self/fdinfo (-1 once the process has exited; nil if unreadable).
    static func pidOfPidfd(_ fd: Int32) -> Int32? {
        let info = open("/proc/self/fdinfo/\(fd)", O_RDONLY | O_CLOEXEC)
        guard info >= 0 else { return nil }
        defer { close(info) }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let n = read(info, &buffer, buffer.count)
        guard n > 0 else { return nil }
        for line in String(decoding: buffer[..<n], as: UTF8.self).split(separator: "\n") where line.hasPrefix("Pid:") {
            return Int32(line.dropFirst(4).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }

    /// The executable `pid` runs now (one stat), or nil once it has exited, is a zombie, or
    /// cannot be read.
    static func executableStamp(pid: Int32) -> ExecutableStamp? {
        var info = stat()
        guard stat("/proc/\(pid)/exe", &info) == 0 else { return nil }
        return ExecutableStamp(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    private static func exited(_ uniqueName: String, _ pid: UInt32) -> BusErrorReply {
        .accessDenied("the process that opened \(uniqueName) (pid \(pid)) has exited")
    }
}

