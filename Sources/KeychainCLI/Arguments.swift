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

    func accepts(option: String) -> Bool { options.contains { $0.name == option } }
    func accepts(flag: String) -> Bool { flags.contains { $0.name == flag } }

    var usage: String {
        var lines = ["Usage: keychain \(name) [options]\(positional.map { " " + $0 } ?? "")", "", summary, "", "Options:"]
        for (n, h) in options { lines.append("  --\(n) <value>".padding(34) + h) }
        for (n, h) in flags { lines.append("  --\(n)".padding(34) + h) }
        lines.append("  --help".padding(34) + "Show this help.")
        return lines.joined(separator: "\n")
    }
}

/// Parsed options of one invocation: `--name value`, `--name=value` and flags.
struct Arguments {
    let spec: CommandSpec
    private(set) var values: [String: String] = [:]
    private(set) var flags: Set<String> = []
    private(set) var wantsHelp = false

    init(_ tokens: ArraySlice<String>, spec: CommandSpec) throws(UsageError) {
        self.spec = spec
        var i = tokens.startIndex
        while i < tokens.endIndex {
            let token = tokens[i]
            i += 1
            if token == "--help" || token == "-h" {
                wantsHelp = true
                continue
            }
            guard token.hasPrefix("--"), token.count > 2 else {
                guard let name = spec.positional, values[name] == nil else {
                    throw UsageError(message: "unexpected argument '\(token)'")
                }
                values[name] = token
                continue
            }
            var name = String(token.dropFirst(2))
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if spec.accepts(flag: name) {
                guard inline == nil else { throw UsageError(message: "--\(name) takes no value") }
                flags.insert(name)
            } else if spec.accepts(option: name) {
                let value: String
                if let inline {
                    value = inline
                } else {
                    guard i < tokens.endIndex else { throw UsageError(message: "--\(name) needs a value") }
                    value = tokens[i]
                    i += 1
                }
                guard values.updateValue(value, forKey: name) == nil else {
                    throw UsageError(message: "--\(name) is given twice")
                }
            } else {
                throw UsageError(message: "unknown option '--\(name)' for `keychain \(spec.name)`")
            }
        }
    }

    subscript(_ name: String) -> String? { values[name] }
    func has(_ flag: String) -> Bool { flags.contains(flag) }

    /// A value that must be one of `choices`.
    func choice(_ name: String, _ choices: [String]) throws(UsageError) -> String? {
        guard let v = values[name] else { return nil }
        guard choices.contains(v) else {
            throw UsageError(message: "--\(name) must be one of: \(choices.joined(separator: ", "))")
        }
        return v
    }

    func integer(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let v = values[name] else { return nil }
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
