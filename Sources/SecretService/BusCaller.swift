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

/// A connection's process, held as its /proc/PID directory from the bridge's first look until
/// the connection leaves the bus. The descriptor stays bound to that one process (the kernel's
/// pid of it, not the number): once the process is reaped, lookups through it fail, even after
/// the number is reused, and a zombie has no `exe`. So a call's check is one `fstatat` of
/// `exe`, with no start time to read again and no path to open.
final class ProcessDirectory {
    let descriptor: Int32

    /// Nil when /proc/PID cannot be opened (the process is gone, or no descriptor is left).
    init?(pid: Int32) {
        let opened = open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard opened >= 0 else { return nil }
        descriptor = opened
    }

    deinit { close(descriptor) }

    /// Field 22 of `stat`: nil once the process has exited or is a zombie.
    var startTime: UInt64? { BusCallerReader.startTime(in: descriptor) }

    /// The executable the process runs now: nil once it has exited or is a zombie (its `exe`
    /// goes with its memory), or while it hides it (non-dumpable).
    var executable: ExecutableStamp? {
        var info = stat()
        guard fstatat(descriptor, "exe", &info, 0) == 0 else { return nil }
        return ExecutableStamp(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }
}

/// Finds out who a connection is (design §2.2, bridge side): the bus's record of uid and pid,
/// same uid as the bridge or AccessDenied, then the start time read through a /proc/PID
/// directory opened first, so that the read cannot land on a later process that reused the pid.
enum BusCallerReader {
    /// The caller, and its /proc/PID directory (still open) for the checks of later calls.
    static func identify(_ credentials: BusCredentials, uniqueName: String) throws(BusErrorReply) -> (BusCaller, ProcessDirectory) {
        defer { if let fd = credentials.processFD { close(fd) } }
        guard let uid = credentials.uid, let pid = credentials.pid, pid > 0, pid <= UInt32(Int32.max) else {
            throw .accessDenied("the bus did not say which process \(uniqueName) is")
        }
        guard uid == getuid() else {
            throw .accessDenied("this Secret Service serves uid \(getuid()) only; \(uniqueName) is uid \(uid)")
        }
        // Start time and executable both read through this one directory, so that both are of
        // one process even if the pid is reused meanwhile.
        guard let directory = ProcessDirectory(pid: Int32(pid)), let startTime = directory.startTime,
              let executable = directory.executable else { throw exited(uniqueName, pid) }
        // With a pidfd from the bus, the process it names must be the one just read: its
        // fdinfo shows the pid, or -1 once it has exited.
        if let fd = credentials.processFD, pidOfPidfd(fd) != Int32(pid) {
            throw exited(uniqueName, pid)
        }
        return (BusCaller(pid: Int32(pid), startTime: startTime, executable: executable), directory)
    }

    /// Checks, on every call, that the connection's process is still the one first seen and
    /// still runs the executable it ran then: one that exec'd another program while keeping
    /// the connection (or handed it to a child before doing so) speaks no more for anyone.
    /// Returns the executable it runs (the one first seen).
    @discardableResult
    static func recheck(_ known: KnownCaller, uniqueName: String) throws(BusErrorReply) -> ExecutableStamp {
        let caller = known.process
        guard let executable = known.executableNow else { throw exited(uniqueName, UInt32(caller.pid)) }
        guard executable == caller.executable else {
            BridgeLog.error("refused \(uniqueName) (pid \(caller.pid)): it runs another executable than when the bridge first saw it")
            throw .accessDenied("the process that opened \(uniqueName) (pid \(caller.pid)) runs another program than when it connected; connect again")
        }
        return executable
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

    private static func exited(_ uniqueName: String, _ pid: UInt32) -> BusErrorReply {
        .accessDenied("the process that opened \(uniqueName) (pid \(pid)) has exited")
    }
}

