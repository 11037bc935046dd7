#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain`: the command line over KeychainClient. docs/cli.md documents every command and
/// exit code.
public enum KeychainCommand {

    /// Runs the command line and exits with its status.
    public static func main() -> Never {
        do {
            exit(run(try RawArguments.utf8()))
        } catch {
            exit(usage(error.message, spec: nil))
        }
    }

    /// Runs one invocation; returns the exit status.
    static func run(_ argv: [String]) -> Int32 {
        var args = argv[...]
        // `keychain --socket PATH --trust-uid USER <command>`: the leading form of the global
        // options, which the command's own options override.
        var leading = LeadingOptions()
        while let first = args.first, let name = globalOptions.first(where: { first == "--" + $0.name || first.hasPrefix("--\($0.name)=") })?.name {
            let value: String
            if first == "--" + name {
                guard args.count >= 2 else { return usage("--\(name) needs a value", spec: nil) }
                value = args[args.startIndex + 1]
                args = args.dropFirst(2)
            } else {
                value = String(first.dropFirst("--\(name)=".count))
                args = args.dropFirst()
            }
            if name == "socket" { leading.socket = value } else { leading.trustUID = value }
        }
        guard let name = args.first else { return usage("no command given", spec: nil) }
        switch name {
        case "--help", "-h":
            Output.line(overview)
            return ExitStatus.success
        case "help":
            return help(Array(args.dropFirst()))
        case "completion":
            let rest = Array(args.dropFirst())
            guard rest.count == 1, let script = ShellCompletion.script(for: rest[0]) else {
                return usage("`keychain completion` needs one of: \(ShellCompletion.shells.joined(separator: ", "))", spec: nil)
            }
            Output.text(script)
            return ExitStatus.success
        case "run":  // its own parser: everything after -- is the command's
            return KeychainRun.main(Array(args.dropFirst()))
        case "--version":
            Output.line(KeychainVersion.current)
            return ExitStatus.success
        default: break
        }
        args = args.dropFirst()
        // A one-word command is looked up alone, without building the whole table, which the
        // groups' subcommands(of:) builds: most commands (get, add, list...) are one word.
        let command: Command
        if let single = Command.named(name) {
            command = single
        } else {
            let group = ShellCompletion.subcommands(of: name)
            guard !group.isEmpty else { return usage("unknown command '\(name)'", spec: nil) }
            if let sub = args.first, sub == "--help" || sub == "-h" {
                Output.line(groupUsage(name, group))
                return ExitStatus.success
            }
            guard let sub = args.first, group.contains(where: { $0.name == name + " " + sub }),
                  let found = Command.named(name + " " + sub) else {
                return usage("`keychain \(name)` needs one of: \(group.map { String($0.name.split(separator: " ")[1]) }.joined(separator: ", "))", spec: nil)
            }
            command = found
            args = args.dropFirst()
        }
        do {
            let parsed = try Arguments(args, spec: command.spec)
            if parsed.wantsHelp {
                Output.line(command.spec.usage)
                return ExitStatus.success
            }
            let context = try Context(parsed, leading: leading)
            return context.run(command.body)
        } catch {
            return usage(error.message, spec: command.spec)
        }
    }

    /// `keychain help [COMMAND [SUBCOMMAND]]`: the overview, or what `COMMAND --help` prints.
    static func help(_ words: [String]) -> Int32 {
        guard let first = words.first else {
            Output.line(overview)
            return ExitStatus.success
        }
        switch first {
        case "help":
            Output.line("Usage: keychain help [COMMAND]\n\nShow the commands, or one command's options.")
            return ExitStatus.success
        case "completion":
            Output.line("Usage: keychain completion bash|zsh|fish\n\nPrint a completion script for the shell, made from the command table.")
            return ExitStatus.success
        default: break
        }
        let group = ShellCompletion.subcommands(of: first)
        if !group.isEmpty && words.count == 1 {
            Output.line(groupUsage(first, group))
            return ExitStatus.success
        }
        guard let command = Command.named(words.joined(separator: " ")) else {
            return usage("unknown command '\(words.joined(separator: " "))'", spec: nil)
        }
        Output.line(command.spec.usage)
        return ExitStatus.success
    }

    static func groupUsage(_ name: String, _ group: [CommandSpec]) -> String {
        var lines = ["Usage: keychain \(name) <\(group.map { String($0.name.split(separator: " ")[1]) }.joined(separator: "|"))> [options]", "", "Commands:"]
        for spec in group { lines.append("  " + spec.name.padding(18) + spec.summary) }
        lines += ["", "See `keychain \(name) COMMAND --help`."]
        return lines.joined(separator: "\n")
    }

    static func usage(_ message: String, spec: CommandSpec?) -> Int32 {
        Output.error("keychain: \(message)")
        Output.error(spec.map { "Usage: keychain \($0.name) [options]; see `keychain \($0.name) --help`" }
                     ?? "Usage: keychain <command> [options]; see `keychain --help`")
        return ExitStatus.usage
    }

    static var overview: String {
        var lines = [
            "Usage: keychain [--socket PATH] [--trust-uid UID|USER] <command> [options]", "",
            "Store, find, change and delete secrets in keychaind. Secrets are read from standard",
            "input (exact bytes), or from a no-echo prompt on a terminal; never from arguments.", "",
            "Commands:",
        ]
        for c in commands { lines.append("  " + c.spec.name.padding(18) + c.spec.summary) }
        lines.append("  " + "help [COMMAND]".padding(18) + "Show the commands, or one command's options.")
        lines.append("  " + "completion SHELL".padding(18) + "Print a completion script for bash, zsh or fish.")
        lines += ["", "Options of every command (before or after it):"]
        for (name, help) in globalOptions { lines.append("  " + "--\(name) <value>".padding(24) + help) }
        let withoutJSON = commands.filter { !$0.spec.accepts(flag: "json") }.map(\.spec.name)
        lines.append("  " + "--json".padding(24) + "After the command: JSON on standard output, errors included;")
        lines.append("  " + "".padding(24) + "not for \(withoutJSON.joined(separator: ", ")).")
        lines += ["", "Exit codes: 0 ok, 1 error, 2 not found, 3 duplicate, 4 locked, 5 access denied,",
                  "6 authentication failed, 7 keychaind unreachable, 64 usage (docs/cli.md)."]
        return lines.joined(separator: "\n")
    }
}
