#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel

/// The status `body` throws, or nil when it returns normally.
func thrownStatus<T>(_ body: () throws(KeychainError) -> T) -> KeychainStatus? {
    do {
        _ = try body()
        return nil
    } catch {
        return error.status
    }
}

/// A copy of a key's bytes, for comparing keys in tests.
func bytes(of key: SecureKey) -> [UInt8] {
    key.withUnsafeBytes { Array($0) }
}

/// `bytes` with bit `bit` of byte `index` flipped.
func flipping(_ bytes: [UInt8], at index: Int, bit: Int = 0) -> [UInt8] {
    var out = bytes
    out[index] ^= UInt8(1 << bit)
    return out
}

/// A fresh private directory under /tmp, removed (with its files) by `cleanup`.
struct TemporaryDirectory {
    let path: String

    init() {
        var template = Array("/tmp/keychaind-crypto-tests.XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(cString: template)
    }

    func file(_ name: String) -> String { path + "/" + name }

    /// Names of the entries in the directory.
    func entries() -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    func cleanup() {
        for name in entries() { unlink(file(name)) }
        rmdir(path)
    }

    /// Writes `contents` to `name` with `mode` (umask bypassed with fchmod).
    func write(_ name: String, _ contents: [UInt8], mode: mode_t) {
        let fd = open(file(name), O_WRONLY | O_CREAT | O_TRUNC, mode)
        precondition(fd >= 0, "cannot create \(name)")
        _ = contents.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        fchmod(fd, mode)
        close(fd)
    }

    func read(_ name: String) -> [UInt8]? {
        let fd = open(file(name), O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            out += buffer[0..<n]
        }
        return out
    }

    func mode(_ name: String) -> mode_t? {
        var st = stat()
        guard stat(file(name), &st) == 0 else { return nil }
        return st.st_mode & 0o7777
    }
}
