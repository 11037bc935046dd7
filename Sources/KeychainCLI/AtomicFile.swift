#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// Whole-file reads, and writes that never leave a half-written backup (DurableFile: a
/// temporary file in the same directory, 0600, fsync, rename, fsync of the directory).
enum AtomicFile {
    static func write(_ bytes: [UInt8], to path: String) throws(KeychainError) {
        // withUnsafeBytes rethrows untyped: the typed error travels in a Result.
        let written = bytes.withUnsafeBytes { raw in
            Result { () throws(SystemCallError) in try DurableFile.write(raw, to: path, placement: .replace) }
        }
        do {
            try written.get()
        } catch {
            throw error.keychainError("cannot write \(path)")
        }
    }

    static func read(_ path: String) throws(KeychainError) -> [UInt8] {
        let fd: Int32
        do {
            fd = try SystemCall.open(path, O_RDONLY | O_CLOEXEC)
        } catch {
            throw error.keychainError("cannot open \(path)")
        }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let got = chunk.withUnsafeMutableBytes { raw in
                Result { () throws(SystemCallError) in try SystemCall.readFully(fd, into: raw) }
            }
            let n: Int
            do {
                n = try got.get()
            } catch {
                throw error.keychainError("cannot read \(path)")
            }
            out += chunk[0..<n]
            if n < chunk.count { return out }
        }
    }
}
