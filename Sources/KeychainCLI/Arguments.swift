#if canImport(Glibc)
import Glibc
#endif

/// The CLI's own argument parser. ArgumentParser's reflection-based parsing cost ~3 ms per
/// process, more than the rest of a `keychain get` put together; this table-driven parser
/// costs microseconds (docs/performance.md).
struct UsageError: Error {
    let message: String
}

/// What one command accepts.
struct CommandSpec: Sendable {
    let name: String
    let summary: String
    /// Options that take a value, with their help text.
    let options: [(name: String, help: String)]
    /// Options that take no value.
    let flags: [(name: String, help: String)]
    /// The one positional argument the command takes, if any (its name for usage text).
    var positional: String? = nil

    func accepts(flag: String) -> Bool { flags.contains { $0.name == flag } }

    var usage: String {
        var lines = ["Usage: keychain \(name) [options]\(positional.map { " " + $0 } ?? "")", "", summary, "", "Options:"]
        for (n, h) in options { lines.append("  --\(n) <value>".padding(34) + h) }
        for (n, h) in flags { lines.append("  --\(n)".padding(34) + h) }
        lines.append("  --help".padding(34) + "Show this help.")
        return lines.joined(separator: "\n")
    }
}

/// Parsed options of one invocation: `--name value`, `--name=value` and flags, each kept in the
/// slot of its place in the command's spec. No dictionary or set: the first `[String: String]`
/// of the process cost 14% of a `keychain get` in generic metadata and its first conformance
/// check (docs/performance.md, "Issue 24's floors"); a command accepts at most 64 of each.
struct Arguments {
    let spec: CommandSpec
    /// `values[i]` is the value of `spec.options[i]` when bit i of `given` is set.
    private var values: [String]
    private var given: UInt64 = 0
    /// Bit i: `spec.flags[i]` was given.
    private var flagsGiven: UInt64 = 0
    /// The positional argument's words, space-separated (`spec.positional` names it).
    private var positional: String?
    private(set) var wantsHelp = false

    init(_ tokens: ArraySlice<String>, spec: CommandSpec) throws(UsageError) {
        precondition(spec.options.count <= 64 && spec.flags.count <= 64, "a command accepts at most 64 options and 64 flags")
        self.spec = spec
        values = Array(repeating: "", count: spec.options.count)
        var i = tokens.startIndex
        while i < tokens.endIndex {
            let token = tokens[i]
            i += 1
            if token == "--help" || token == "-h" {
                wantsHelp = true
                continue
            }
            guard token.hasPrefix("--"), token.count > 2 else {
                guard let name = spec.positional else {
                    throw UsageError(message: "unexpected argument '\(token)'")
                }
                // A positional of two words ("UNIT ID") takes two arguments, kept space-separated.
                let words = name.split(separator: " ").count
                let taken = positional.map { $0.split(separator: " ", omittingEmptySubsequences: false).count } ?? 0
                guard taken < words, !(words > 1 && token.contains(" ")) else {
                    throw UsageError(message: "unexpected argument '\(token)'")
                }
                positional = positional.map { $0 + " " + token } ?? token
                continue
            }
            var name = String(token.dropFirst(2))
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if let flag = spec.flags.firstIndex(where: { $0.name == name }) {
                guard inline == nil else { throw UsageError(message: "--\(name) takes no value") }
                flagsGiven |= 1 << UInt64(flag)
            } else if let option = spec.options.firstIndex(where: { $0.name == name }) {
                let value: String
                if let inline {
                    value = inline
                } else {
                    guard i < tokens.endIndex else { throw UsageError(message: "--\(name) needs a value") }
                    value = tokens[i]
                    i += 1
                }
                guard given & (1 << UInt64(option)) == 0 else {
                    throw UsageError(message: "--\(name) is given twice")
                }
                given |= 1 << UInt64(option)
                values[option] = value
            } else {
                throw UsageError(message: "unknown option '--\(name)' for `keychain \(spec.name)`")
            }
        }
    }

    /// The value of option `name`, or the positional argument when `name` is the spec's
    /// name for it ("FILE").
    subscript(_ name: String) -> String? {
        if let option = spec.options.firstIndex(where: { $0.name == name }) {
            return given & (1 << UInt64(option)) != 0 ? values[option] : nil
        }
        return name == spec.positional ? positional : nil
    }

    func has(_ flag: String) -> Bool {
        guard let index = spec.flags.firstIndex(where: { $0.name == flag }) else { return false }
        return flagsGiven & (1 << UInt64(index)) != 0
    }

    /// A value that must be one of `choices`.
    func choice(_ name: String, _ choices: [String]) throws(UsageError) -> String? {
        guard let v = self[name] else { return nil }
        guard choices.contains(v) else {
            throw UsageError(message: "--\(name) must be one of: \(choices.joined(separator: ", "))")
        }
        return v
    }

    func integer(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let v = self[name] else { return nil }
        guard let n = Int(v), range.contains(n) else {
            throw UsageError(message: "--\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return n
    }
}

extension String {
    func padding(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}

/// The process's arguments, each checked to be UTF-8. Swift's CommandLine.arguments repairs
/// bad bytes to U+FFFD, so `svc\xff` and `svc\xfe` became the same service: a name that is
/// not UTF-8 is refused instead, naming the argument and the byte (never the argument's text).
enum RawArguments {
    static func utf8() throws(UsageError) -> [String] {
        var decoded: [String] = []
        for index in 1..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index] else { break }
            // The C-string initializer is not generic: String(validating:as:) made the runtime
            // build its generic metadata from mangled names, about 4% of a `keychain get`
            // (docs/performance.md, "Issue 24's floors"). Both refuse the same bytes.
            if let text = String(validatingCString: pointer) {
                decoded.append(text)
                continue
            }
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))
            decoded.append(try decode(Array(bytes), position: index))
        }
        return decoded
    }

    /// One argument's bytes as a String, or the usage error naming argument `position` (1 is
    /// the first after the command name) and its first byte that is not UTF-8.
    static func decode(_ bytes: [UInt8], position: Int) throws(UsageError) -> String {
        if let text = String(validating: bytes, as: UTF8.self) { return text }
        // The longest prefix that decodes ends where the bad sequence starts.
        var offset = bytes.count
        while offset > 0 && String(validating: bytes[..<offset], as: UTF8.self) == nil { offset -= 1 }
        let byte = String(bytes[offset], radix: 16, uppercase: true)
        throw UsageError(message: "argument \(position) is not UTF-8 (byte 0x\(byte.count == 1 ? "0" + byte : byte) at offset \(offset)): names, labels and options must be UTF-8 text")
    }
}
