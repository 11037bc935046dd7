#if canImport(Glibc)
import Glibc
#endif

/// A system call that failed: which call, and the errno it left. Kept apart from
/// KeychainError so that code can decide on the errno (ENOENT is often not a failure) before
/// it becomes an OSStatus.
public struct SystemCallError: Error, Sendable, Equatable, CustomStringConvertible {
    public let call: String
    public let errno: Int32

    public init(_ call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    /// The error `call` just left in errno.
    public static func current(_ call: String) -> SystemCallError {
        SystemCallError(call, errno: Glibc.errno)
    }

    /// The C library's wording of the errno (never anything from the caller's data).
    public var reason: String { String(cString: strerror(errno)) }

    public var description: String { "\(call): \(reason)" }

    /// As the keychain reports it: errSecIO, saying what was being done and why it failed.
    public func keychainError(_ doing: String, status: KeychainStatus = .io) -> KeychainError {
        KeychainError(status, "\(doing): \(reason)")
    }
}

/// The one way the keychain makes blocking system calls: a call that a signal interrupts
/// (EINTR) is made again, a failure throws SystemCallError with its errno, and reads and
/// writes go on until done (a pipe, a full disk or a signal can cut one short).
public enum SystemCall {
    /// Runs `operation` until it does not fail with EINTR; a result of -1 throws.
    @inlinable
    @discardableResult
    public static func retrying<Result: BinaryInteger>(_ call: String, _ operation: () -> Result) throws(SystemCallError) -> Result {
        while true {
            let result = operation()
            if result != -1 { return result }
            let e = Glibc.errno
            if e != EINTR { throw SystemCallError(call, errno: e) }
        }
    }

    /// Writes all of `bytes` with `write` (which returns what one write(2) would), going on
    /// after short writes and EINTR. A write that makes no progress (returns 0) is an error:
    /// looping on it would never end.
    @inlinable
    public static func writeAll(_ bytes: UnsafeRawBufferPointer, call: String = "write",
                                using write: (UnsafeRawBufferPointer) -> Int) throws(SystemCallError) {
        var offset = 0
        while offset < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            let n = try retrying(call) { write(rest) }
            guard n > 0 else { throw SystemCallError(call, errno: EIO) }
            offset += n
        }
    }

    /// Writes all of `bytes` to the descriptor.
    @inlinable
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemCallError) {
        try writeAll(bytes) { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    /// Fills `buffer` with `read` (which returns what one read(2) would) until it is full or
    /// the end of the file; returns how many bytes it holds. Short reads and EINTR go on.
    @inlinable
    public static func readFully(into buffer: UnsafeMutableRawBufferPointer, call: String = "read",
                                 using read: (UnsafeMutableRawBufferPointer) -> Int) throws(SystemCallError) -> Int {
        var filled = 0
        while filled < buffer.count {
            let rest = UnsafeMutableRawBufferPointer(rebasing: buffer[filled...])
            let n = try retrying(call) { read(rest) }
            if n == 0 { break }
            filled += n
        }
        return filled
    }

    /// Reads from the descriptor until `buffer` is full or the end of the file.
    @inlinable
    public static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemCallError) -> Int {
        try readFully(into: buffer) { Glibc.read(fd, $0.baseAddress, $0.count) }
    }

    /// Opens `path`; EINTR (possible on FIFOs and some file systems) is retried.
    @inlinable
    public static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) throws(SystemCallError) -> Int32 {
        try retrying("open") { Glibc.open(path, flags, mode) }
    }

    /// Flushes the descriptor's data to the device.
    @inlinable
    public static func fsync(_ fd: Int32) throws(SystemCallError) {
        try retrying("fsync") { Glibc.fsync(fd) }
    }
}

/// Writes a small file so that after a crash it is either absent, its old content or its
/// whole new content: a private temporary file beside it is written in full, flushed, put in
/// place and the directory flushed, so that the new name itself survives a crash.
public enum DurableFile {
    public enum Placement: Sendable {
        /// Rename over whatever is at the path.
        case replace
        /// Link into place only if nothing is there yet, so that two processes racing to create
        /// it cannot overwrite each other's file; finding one there is not an error.
        case createIfAbsent
    }

    /// Writes `bytes` to `path` (mode 0600, never following a symbolic link). Throws with the
    /// failing call; the temporary file is removed whatever happens.
    public static func write(_ bytes: UnsafeRawBufferPointer, to path: String, placement: Placement) throws(SystemCallError) {
        // One writer per process and path: the pid keeps two processes' temporary files apart,
        // and one left by a crashed process that had our pid is stale.
        let temporary = path + ".tmp.\(getpid())"
        unlink(temporary)
        let fd = try SystemCall.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        defer { unlink(temporary) }
        let flushed = Result { () throws(SystemCallError) in
            try SystemCall.writeAll(fd, bytes)
            try SystemCall.fsync(fd)
        }
        close(fd)
        try flushed.get()
        switch placement {
        case .replace:
            try SystemCall.retrying("rename") { rename(temporary, path) }
        case .createIfAbsent:
            if link(temporary, path) != 0 && errno != EEXIST { throw SystemCallError("link", errno: errno) }
        }
        syncDirectory(of: path)
    }

    /// Flushes the directory holding `path`, so that a name just made there survives a crash.
    /// Best effort: the file is already in place, and some file systems refuse fsync on a
    /// directory.
    public static func syncDirectory(of path: String) {
        let directory: String
        if let slash = path.lastIndex(of: "/") {
            directory = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            directory = "."
        }
        guard let fd = try? SystemCall.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) else { return }
        _ = try? SystemCall.fsync(fd)
        close(fd)
    }
}
