#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// Reading secrets and passcodes without ever putting them in argv: exact bytes from a pipe,
/// or a no-echo prompt on the terminal (termios, restored even on Ctrl-C).
enum SecretInput {
    static var stdinIsTerminal: Bool { isatty(0) == 1 }

    /// All of standard input, byte for byte (a pipe or a file), up to `limit` + 1 bytes so that
    /// an oversized secret is reported rather than truncated.
    static func readAllStdin(limit: Int) throws(KeychainError) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while out.count <= limit {
            let read = chunk.withUnsafeMutableBytes { b in
                Result { () throws(SystemCallError) in try SystemCall.retrying("read") { Glibc.read(0, b.baseAddress, b.count) } }
            }
            let n: Int
            switch read {
            case .success(let count): n = count
            case .failure(let error):
                explicit_bzero(&chunk, chunk.count)
                throw error.keychainError("cannot read standard input")
            }
            if n == 0 { break }
            out += chunk[0..<n]
        }
        explicit_bzero(&chunk, chunk.count)
        guard out.count <= limit else {
            throw KeychainError(.param, "the secret on standard input is over the \(limit)-byte limit")
        }
        return out
    }

    /// One line of standard input without its line ending (for passcodes from scripts).
    static func readLine() throws(KeychainError) -> [UInt8] {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n: Int
            do {
                n = try SystemCall.retrying("read") { Glibc.read(0, &byte, 1) }
            } catch {
                throw error.keychainError("cannot read standard input")
            }
            if n == 0 { break }
            if byte == 10 { break }
            line.append(byte)
            if line.count > 4096 { throw KeychainError(.param, "the line on standard input is too long") }
        }
        if line.last == 13 { line.removeLast() }
        return line
    }

    /// A no-echo prompt on the controlling terminal.
    static func prompt(_ text: String) throws(KeychainError) -> [UInt8] {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw KeychainError(.io, "no terminal to prompt on; pipe the value on standard input") }
        defer { close(fd) }
        Array(text.utf8).withUnsafeBytes { _ = try? SystemCall.writeAll(fd, $0) }
        var saved = termios()
        tcgetattr(fd, &saved)
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        EchoGuard.install(fd: fd, saved: saved)
        tcsetattr(fd, TCSAFLUSH, &quiet)
        defer {
            tcsetattr(fd, TCSAFLUSH, &saved)
            EchoGuard.remove()
            _ = write(fd, "\n", 1)
        }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        // A signal (a resized window) must not end the passcode early: EINTR is retried.
        while (try? SystemCall.retrying("read") { Glibc.read(fd, &byte, 1) }) == 1 && byte != 10 {
            line.append(byte)
            if line.count > KeychainLimits.maxSecretBytes { break }
        }
        if line.last == 13 { line.removeLast() }
        return line
    }

    /// The secret for add/update: from the terminal (asked twice) or from a pipe.
    static func secret() throws(KeychainError) -> [UInt8] {
        guard stdinIsTerminal else { return try readAllStdin(limit: KeychainLimits.maxSecretBytes) }
        let first = try prompt("Secret: ")
        let second = try prompt("Again: ")
        guard first == second else { throw KeychainError(.param, "the two entries differ; nothing was stored") }
        return first
    }

    /// Refuses an empty secret unless `allowed` (--allow-empty), saying where it came from.
    static func refuseEmpty(_ secret: [UInt8], allowed: Bool) throws(UsageError) {
        guard secret.isEmpty, !allowed else { return }
        let source = stdinIsTerminal ? "nothing was typed at the prompt" : "standard input held no bytes, as when `printf '%s' \"$TOKEN\"` runs with TOKEN unset"
        throw UsageError(message: "the secret is empty (\(source)); nothing was stored. Pass --allow-empty if an empty secret is meant")
    }

    /// A new password or passcode (asked twice on a terminal, so a typo is caught before it
    /// locks anyone out), else one line of standard input.
    static func newPassword(_ label: String) throws(KeychainError) -> [UInt8] {
        guard stdinIsTerminal else { return try readLine() }
        let first = try prompt("\(label): ")
        let second = try prompt("Again: ")
        guard first == second else { throw KeychainError(.param, "the two entries differ") }
        return first
    }

    /// A passcode: a no-echo prompt on a terminal, else one line of standard input.
    static func passcode(_ label: String) throws(KeychainError) -> [UInt8] {
        stdinIsTerminal ? try prompt("\(label): ") : try readLine()
    }
}

/// Restores terminal echo if the user presses Ctrl-C at a no-echo prompt.
enum EchoGuard {
    // nonisolated(unsafe): read by a SIGINT handler, which may take no lock; written only by the prompting thread.
    nonisolated(unsafe) static var fd: Int32 = -1
    nonisolated(unsafe) static var saved = termios()

    static func install(fd: Int32, saved: termios) {
        Self.fd = fd
        Self.saved = saved
        signal(SIGINT) { _ in
            if EchoGuard.fd >= 0 { tcsetattr(EchoGuard.fd, TCSAFLUSH, &EchoGuard.saved) }
            _exit(130)
        }
    }

    static func remove() {
        fd = -1
        signal(SIGINT, SIG_DFL)
    }
}

/// Output helpers: stdout for results, stderr for everything a human reads about errors.
enum Output {
    /// A closed or failing standard output (`keychain get | head -c0`) ends the output quietly.
    static func stdout(_ bytes: some ContiguousByteBuffer) {
        bytes.withUnsafeBytes { _ = try? SystemCall.writeAll(1, $0) }
    }

    static func line(_ s: String) { stdout(Array((s + "\n").utf8)) }
    static func text(_ s: String) { stdout(Array(s.utf8)) }

    /// A line held in wiped memory (JSON that may carry a secret).
    static func line(_ bytes: SecretBytes) {
        stdout(bytes)
        stdout(Array("\n".utf8))
    }

    static func error(_ s: String) { errorRaw(s + "\n") }

    static func errorRaw(_ s: String) {
        Array(s.utf8).withUnsafeBytes { _ = try? SystemCall.writeAll(2, $0) }
    }
}
