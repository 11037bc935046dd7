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
        exit(run(Array(CommandLine.arguments.dropFirst())))
    }

    /// Runs one invocation; returns the exit status.
    static func run(_ argv: [String]) -> Int32 {
        var args = argv[...]
        // `keychain --socket PATH <command>`: the leading form of the global option.
        var leadingSocket: String?
        if let first = args.first, first == "--socket" || first.hasPrefix("--socket=") {
            if first == "--socket" {
                guard args.count >= 2 else { return usage("--socket needs a value", spec: nil) }
                leadingSocket = args[args.startIndex + 1]
                args = args.dropFirst(2)
            } else {
                leadingSocket = String(first.dropFirst("--socket=".count))
                args = args.dropFirst()
            }
        }
        guard let name = args.first else { return usage("no command given", spec: nil) }
        switch name {
        case "--help", "-h", "help":
            Output.line(overview)
            return ExitStatus.success
        case "--version":
            Output.line(KeychainVersion.current)
            return ExitStatus.success
        default: break
        }
        var path = [name]
        args = args.dropFirst()
        if name == "passcode" {
            guard let sub = args.first, ["set", "change", "remove"].contains(sub) else {
                return usage("`keychain passcode` needs one of: set, change, remove", spec: nil)
            }
            path.append(sub)
            args = args.dropFirst()
        }
        guard let command = commands.first(where: { $0.spec.name == path.joined(separator: " ") }) else {
            return usage("unknown command '\(name)'", spec: nil)
        }
        do {
            let parsed = try Arguments(args, spec: command.spec)
            if parsed.wantsHelp {
                Output.line(command.spec.usage)
                return ExitStatus.success
            }
            let context = try Context(parsed, leadingSocket: leadingSocket)
            return context.run(command.body)
        } catch {
            return usage(error.message, spec: command.spec)
        }
    }

    static func usage(_ message: String, spec: CommandSpec?) -> Int32 {
        Output.error("keychain: \(message)")
        Output.error(spec.map { "Usage: keychain \($0.name) [options]; see `keychain \($0.name) --help`" }
                     ?? "Usage: keychain <command> [options]; see `keychain --help`")
        return ExitStatus.usage
    }

    static var overview: String {
        var lines = [
            "Usage: keychain [--socket PATH] <command> [options]", "",
            "Store, find, change and delete secrets in keychaind. Secrets are read from standard",
            "input (exact bytes), or from a no-echo prompt on a terminal; never from arguments.", "",
            "Commands:",
        ]
        for c in commands { lines.append("  " + c.spec.name.padding(18) + c.spec.summary) }
        lines += ["", "Exit codes: 0 ok, 1 error, 2 not found, 3 duplicate, 4 locked, 5 access denied,",
                  "6 authentication failed, 7 keychaind unreachable, 64 usage (docs/cli.md)."]
        return lines.joined(separator: "\n")
    }
}
