#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import KeychainModel

/// A process the Secret Service bridge speaks for (op 16, asCaller), checked by keychaind
/// itself on /proc rather than taken from the bridge (docs/security.md, "Calls through the
/// Secret Service bridge"): it runs as the bridge's uid (real and effective), and it is the
/// process the bridge saw, for its start time (clock ticks since boot) is the one named.
/// Held by a descriptor of its /proc directory, which cannot come to name another process:
/// once it exits, reads through it fail.
final class DelegatedProcess {
    let pid: Int32
    let startTime: UInt64
    let uid: UInt32
    let gid: UInt32
    private let directory: Int32
    /// A pidfd of the process, readable once it has exited (a zombie included); -1 where the
    /// kernel has none, and then each call re-reads stat instead.
    private let exitWatch: Int32

    init(pid: Int32, startTime: UInt64, bridgeUID: UInt32) throws(KeychainError) {
        let fd = open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Self.exited(pid) }
        do throws(KeychainError) {
            // The Uid line, not an fstat of the directory: a non-dumpable process's /proc
            // entry belongs to root whoever runs it.
            guard let status = ProcFile.read("status", in: fd),
                  let uids = Self.ids(in: status, line: "Uid:"), let gids = Self.ids(in: status, line: "Gid:") else {
                throw Self.exited(pid)
            }
            guard uids.real == bridgeUID, uids.effective == bridgeUID else {
                throw KeychainError(.missingEntitlement, "pid \(pid) runs as uid \(uids.real) (effective \(uids.effective)), not as the bridge's uid \(bridgeUID): the bridge speaks only for processes of its own user")
            }
            self.pid = pid
            self.startTime = startTime
            uid = uids.real
            gid = gids.real
            directory = fd
        } catch {
            close(fd)
            throw error
        }
        // Opened before the stat check below: if that check finds the same process alive,
        // the pid had not been reused when the pidfd was opened, so it names this process.
        exitWatch = csystem_pidfd_open(pid)
        try checkStat()
    }

    deinit {
        close(directory)
        if exitWatch >= 0 { close(exitWatch) }
    }

    /// Whether it still runs, for each call after the first: a poll of its pidfd (about a
    /// microsecond), else a read of its stat.
    func checkRunning() throws(KeychainError) {
        guard exitWatch >= 0 else { return try checkStat() }
        var watch = pollfd(fd: exitWatch, events: Int16(POLLIN), revents: 0)
        let ready = poll(&watch, 1, 0)
        guard ready == 0 else { throw Self.exited(pid) }
    }

    /// Its stat names the same start time and it is not a zombie (an exited process that its
    /// parent has not yet waited for still has its /proc entry).
    private func checkStat() throws(KeychainError) {
        guard let text = ProcFile.read("stat", in: directory), let stat = Self.parseStat(text) else { throw Self.exited(pid) }
        guard stat.startTime == startTime else {
            throw KeychainError(.missingEntitlement, "pid \(pid) is not the calling process (its start time differs): the calling process has exited")
        }
        guard stat.state != UInt8(ascii: "Z"), stat.state != UInt8(ascii: "X") else { throw Self.exited(pid) }
    }

    /// The executable it runs now; nil when /proc does not show it (a non-dumpable process of
    /// a daemon without privileges), which only an app without `executables` can match.
    func executable() -> String? { PeerProcess.readExecutable(in: directory, "exe") }

    /// Its systemd unit, as for a socket client.
    func unit() -> SystemdUnit? { ProcFile.read("cgroup", in: directory).flatMap(SystemdUnit.init(cgroupFile:)) }

    private static func exited(_ pid: Int32) -> KeychainError {
        KeychainError(.missingEntitlement, "the calling process (pid \(pid)) has exited")
    }

    /// State (field 3) and start time (field 22) of /proc/PID/stat. Read after the last ')':
    /// the command name before it is the process's to choose and may hold spaces or ')'.
    static func parseStat(_ bytes: [UInt8]) -> (state: UInt8, startTime: UInt64)? {
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
        // fields[0] is field 3 (state); field 22 is fields[19].
        guard fields.count > 19, fields[0].count == 1,
              let start = UInt64(String(decoding: fields[19], as: UTF8.self)) else { return nil }
        return (fields[0].first!, start)
    }

    /// The real and effective ids of a "Uid:" or "Gid:" line of /proc/PID/status.
    static func ids(in status: [UInt8], line prefix: String) -> (real: UInt32, effective: UInt32)? {
        for line in status.split(separator: UInt8(ascii: "\n")) where line.starts(with: prefix.utf8) {
            let numbers = line.dropFirst(prefix.utf8.count)
                .split(whereSeparator: { $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: " ") })
                .compactMap { UInt32(String(decoding: $0, as: UTF8.self)) }
            guard numbers.count >= 2 else { return nil }
            return (numbers[0], numbers[1])
        }
        return nil
    }
}

/// What one bridge connection keeps: the bridge's own process (its executable is checked at
/// each asCaller; an exec into another program ends the connection) and the processes it
/// spoke for lately, so that steady traffic costs one read of /proc/PID/stat per call
/// rather than opening /proc/PID and reading its status again.
final class BridgeLink {
    let process: PeerProcess
    /// The executable the bridge ran when it connected (in bridge_executables then).
    let executable: String
    private var callers: [Key: Entry] = [:]
    private var clock: UInt64 = 0
    static let capacity = 64

    private struct Key: Hashable {
        let pid: Int32
        let startTime: UInt64
    }

    private struct Entry {
        let process: DelegatedProcess
        var lastUse: UInt64
    }

    init(process: PeerProcess, executable: String) {
        self.process = process
        self.executable = executable
    }

    /// Whether the bridge still runs what it connected with. A path that cannot be read
    /// (EACCES: the bridge made itself non-dumpable after connecting, as it should) counts as
    /// unchanged; an exec makes a process dumpable again, so another program shows.
    func bridgeUnchanged() -> Bool {
        switch process.executableLink() {
        case .path(let now): now == executable
        case .hidden: true
        case .gone: false
        }
    }

    /// The caller (pid, start time) as keychaind sees it now; errSecMissingEntitlement when
    /// it is not a process of `bridgeUID` that still runs. `withExecutable`: read its
    /// executable too (some app is identified by one, or the call is the portal's).
    func caller(pid: Int32, startTime: UInt64, bridgeUID: UInt32, withExecutable: Bool,
                withUnit: Bool = false) throws(KeychainError) -> Caller {
        let key = Key(pid: pid, startTime: startTime)
        clock &+= 1
        let process: DelegatedProcess
        if var entry = callers[key] {
            do throws(KeychainError) {
                try entry.process.checkRunning()
            } catch {
                callers[key] = nil
                throw error
            }
            entry.lastUse = clock
            callers[key] = entry
            process = entry.process
        } else {
            process = try DelegatedProcess(pid: pid, startTime: startTime, bridgeUID: bridgeUID)
            if callers.count >= Self.capacity, let oldest = callers.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
                callers[oldest] = nil
            }
            callers[key] = Entry(process: process, lastUse: clock)
        }
        return Caller(pid: pid, uid: process.uid, gid: process.gid, executable: withExecutable ? process.executable() : nil,
                      unit: withUnit ? process.unit() : nil, startTime: startTime)
    }
}
