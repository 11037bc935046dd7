#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// Whole-file reads, and writes that never leave a half-written backup: a temporary file in
/// the same directory (0600), fsync, rename, fsync of the directory.
enum AtomicFile {
    static func write(_ bytes: [UInt8], to path: String) throws(KeychainError) {
        let tmp = path + ".tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw KeychainError(.io, "cannot create \(tmp): \(String(cString: strerror(errno)))") }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                let message = String(cString: strerror(errno))
                close(fd)
                unlink(tmp)
                throw KeychainError(.io, "cannot write \(tmp): \(message)")
            }
            offset += n
        }
        guard fsync(fd) == 0 else {
            close(fd)
            unlink(tmp)
            throw KeychainError(.io, "cannot sync \(tmp)")
        }
        close(fd)
        guard rename(tmp, path) == 0 else {
            unlink(tmp)
            throw KeychainError(.io, "cannot rename \(tmp) to \(path): \(String(cString: strerror(errno)))")
        }
        let dir = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        let dfd = open(dir.isEmpty ? "/" : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 {
            fsync(dfd)
            close(dfd)
        }
    }

    static func read(_ path: String) throws(KeychainError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw KeychainError(.io, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n == 0 { break }
            if n < 0 {
                if errno == EINTR { continue }
                throw KeychainError(.io, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            out += chunk[0..<n]
        }
        return out
    }
}
