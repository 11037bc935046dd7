#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel

/// One conversation with a pinentry program over the Assuan protocol (what GnuPG uses): the
/// program shows a dialog and answers GETPIN with the passcode. The passcode is read into
/// wiped memory only; it never reaches argv, the environment or a log. Both the Secret Service
/// bridge's unlock dialog and keychaind's own prompts (items that ask first) speak through it.
public final class PinentryConversation {
    private let process = Process()
    private let toPinentry: Int32
    private let fromPinentry: Int32
    /// Bytes read but not yet consumed: holds a passcode while it is being decoded, so wiped.
    private var pending: [UInt8] = { var b = [UInt8](); b.reserveCapacity(8192); return b }()

    /// Assuan's error code for "Operation cancelled" (GPG_ERR_CANCELED in the pinentry source).
    static let cancelled = "83886179"

    /// `environment`: the program's whole environment; nil inherits ours. keychaind passes
    /// only what its configuration names, so no caller chooses where the dialog appears.
    public init(program: String, environment: [String: String]? = nil) throws(KeychainError) {
        var input: [Int32] = [0, 0], output: [Int32] = [0, 0]
        guard pipe(&input) == 0 else { throw SystemCallError.current("pipe").keychainError("cannot start pinentry") }
        guard pipe(&output) == 0 else {
            close(input[0]); close(input[1])
            throw SystemCallError.current("pipe").keychainError("cannot start pinentry")
        }
        // No other program we start may inherit these; the child gets its two ends as 0 and 1.
        for end in input + output { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        process.executableURL = URL(fileURLWithPath: program)
        process.standardInput = FileHandle(fileDescriptor: input[0], closeOnDealloc: false)
        process.standardOutput = FileHandle(fileDescriptor: output[1], closeOnDealloc: false)
        process.standardError = FileHandle.nullDevice
        if let environment { process.environment = environment }
        do {
            try process.run()
        } catch {
            for end in input + output { close(end) }
            throw KeychainError(.io, "cannot start \(program): \(error)")
        }
        // The child holds its ends now. Ours of its output would keep every read of ours from
        // ever seeing it exit: a pinentry that dies before its greeting hung the prompt.
        close(input[0])
        close(output[1])
        toPinentry = input[1]
        fromPinentry = output[0]
        // Its greeting.
        _ = try expectOK()
    }

    deinit {
        wipe(&pending)
        close(toPinentry)
        close(fromPinentry)
        // Not SIGTERM: we may have been started with it blocked, and the child inherits that
        // mask, so a terminate() could leave the wait below waiting forever.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// Sends a command and waits for its OK (throws on ERR or a closed pipe).
    public func command(_ line: String) throws(KeychainError) {
        try send(line)
        _ = try expectOK()
    }

    /// GETPIN: the passcode, or nil when the person cancelled.
    public func getPin() throws(KeychainError) -> SecretBytes? {
        try send("GETPIN")
        var pin: SecretBytes = .empty
        while true {
            var line = try readLine()
            defer { wipe(&line) }
            if line.starts(with: Array("D ".utf8)) {
                pin = try Self.percentDecoded(line.dropFirst(2))
            } else if line.starts(with: Array("OK".utf8)) {
                return pin
            } else if line.starts(with: Array("ERR ".utf8)) {
                if String(decoding: line.dropFirst(4).prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self) == Self.cancelled { return nil }
                throw KeychainError(.io, "pinentry failed: \(String(decoding: line, as: UTF8.self))")
            }
            // Status and comment lines (S, #) carry nothing we need.
        }
    }

    public func bye() { try? send("BYE") }

    /// Assuan escapes %, CR and LF (and we escape every control character) in command arguments.
    /// Other bytes pass as they are, so UTF-8 text (a label in any script) stays UTF-8.
    public static func percentEncoded(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if byte == UInt8(ascii: "%") || byte < 0x20 {
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            } else {
                out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func percentDecoded(_ bytes: ArraySlice<UInt8>) throws(KeychainError) -> SecretBytes {
        var length = 0
        let decoded = try SecretBytes(count: bytes.count) { (buffer) throws(KeychainError) in
            var i = bytes.startIndex
            while i < bytes.endIndex {
                var byte = bytes[i]
                if byte == UInt8(ascii: "%") {
                    guard i + 2 < bytes.endIndex, let high = hexValue(bytes[i + 1]), let low = hexValue(bytes[i + 2]) else {
                        throw KeychainError(.decode, "pinentry sent a malformed escape")
                    }
                    byte = high << 4 | low
                    i += 2
                }
                buffer[length] = byte
                length += 1
                i += 1
            }
        }
        return SecretBytes(decoded.prefix(length))
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private func send(_ line: String) throws(KeychainError) {
        let bytes = Array((line + "\n").utf8)
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(SystemCallError) in try SystemCall.writeAll(toPinentry, buffer) }
        }
        if case .failure(let error) = result { throw KeychainError(.io, "pinentry went away: \(error.reason)") }
    }

    private func expectOK() throws(KeychainError) -> [UInt8] {
        while true {
            let line = try readLine()
            if line.starts(with: Array("OK".utf8)) { return line }
            if line.starts(with: Array("ERR".utf8)) {
                throw KeychainError(.io, "pinentry refused: \(String(decoding: line, as: UTF8.self))")
            }
        }
    }

    /// One line without its newline; the consumed bytes are wiped from the buffer.
    private func readLine() throws(KeychainError) -> [UInt8] {
        while true {
            if let newline = pending.firstIndex(of: 10) {
                let line = Array(pending[..<newline])
                let rest = Array(pending[(newline + 1)...])
                wipe(&pending)
                pending = rest
                return line
            }
            guard pending.count < 4096 else { throw KeychainError(.io, "pinentry sent a line over 4 KiB") }
            var chunk = [UInt8](repeating: 0, count: 1024)
            let n = read(fromPinentry, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw KeychainError(.io, "pinentry closed its output") }
            pending += chunk[..<n]
            wipe(&chunk)
        }
    }

    private func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { if let base = $0.baseAddress { explicit_bzero(base, $0.count) } }
    }
}

/// Which pinentry program to run.
public enum PinentryProgram {
    /// `configured` if given (nil when it is not executable), else `pinentry` on `searchPath`
    /// (our PATH when nil); nil if none.
    public static func find(_ configured: String?, searchPath: String? = nil) -> String? {
        if let configured { return access(configured, X_OK) == 0 ? configured : nil }
        let path = searchPath ?? ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") where directory.hasPrefix("/") {
            let candidate = String(directory) + "/pinentry"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }
}
