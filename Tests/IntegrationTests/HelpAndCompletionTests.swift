import Foundation
import Testing

/// `keychain help COMMAND`, `COMMAND --help` and the completion scripts, all made from the one
/// command table (issue 15: completions that cannot drift from the parser).
@Suite("Help and shell completion")
struct HelpAndCompletionTests {
    func keychain(_ arguments: [String]) throws -> CLIResult {
        try runExecutable(Binaries.keychain, arguments, environment: ["PATH": "/usr/bin:/bin"], input: [])
    }

    /// The commands `keychain --help` lists, as a caller would read them.
    func listedCommands() throws -> [String] {
        let text = try keychain(["--help"]).text
        let section = text.components(separatedBy: "Commands:\n")[1].components(separatedBy: "\n\n")[0]
        return section.split(separator: "\n").map { line in
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            return words.prefix(while: { !$0.first!.isUppercase && $0.first != "[" && $0 != "SHELL" })
                .prefix(2).filter { $0.first!.isLowercase }.joined(separator: " ")
        }
    }

    /// The options `keychain COMMAND --help` names.
    func options(of command: [String]) throws -> Set<String> {
        let text = try keychain(command + ["--help"]).text
        var found: Set<String> = []
        for line in text.split(separator: "\n") where line.hasPrefix("  --") {
            found.insert(String(line.dropFirst(2).split(separator: " ")[0]))
        }
        return found
    }

    /// What bash completes for `words` (the last one being completed), with the generated script.
    func bashCompletes(_ words: [String]) throws -> [String] {
        let script = try keychain(["completion", "bash"])
        #expect(script.status == 0)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("kc-completion-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("keychain.bash").path
        try Data(script.stdout).write(to: URL(fileURLWithPath: path))
        let quoted = words.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let probe = """
        source '\(path)'
        COMP_WORDS=(\(quoted)); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
        _keychain
        printf '%s\\n' "${COMPREPLY[@]}"
        """
        let r = try runExecutable("/bin/bash", ["-c", probe], environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status == 0, "\(r.stderr)")
        return r.text.split(separator: "\n").map(String.init)
    }

    /// Every help text and completion script, byte for byte as Tests/Vectors/keychain-help.txt
    /// holds them: how the command table is built may change (docs/performance.md), what it
    /// prints may not, unless the file is regenerated with it (scripts/cli-help-transcript says how).
    @Test func helpAndCompletionScriptsAreThoseOfTheTranscript() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let r = try runExecutable("/bin/sh", [root.appendingPathComponent("scripts/cli-help-transcript").path, Binaries.keychain],
                                  environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status == 0, "\(r.stderr)")
        let expected = try String(contentsOf: root.appendingPathComponent("Tests/Vectors/keychain-help.txt"), encoding: .utf8)
        let printed = r.text.split(separator: "\n", omittingEmptySubsequences: false)
        let pinned = expected.split(separator: "\n", omittingEmptySubsequences: false)
        let first = zip(printed, pinned).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(printed.count, pinned.count)
        #expect(r.text == expected, "line \(first + 1) differs: printed \(first < printed.count ? String(printed[first]) : "nothing"), pinned \(first < pinned.count ? String(pinned[first]) : "nothing")")
    }

    @Test func helpCommandPrintsWhatTheCommandsOwnHelpPrints() throws {
        for command in [["add"], ["restore"], ["passcode", "change"], ["passcode"]] {
            let viaHelp = try keychain(["help"] + command)
            let viaFlag = try keychain(command + ["--help"])
            #expect(viaHelp.status == 0 && viaFlag.status == 0, "\(command)")
            #expect(viaHelp.text == viaFlag.text, "\(command)")
            #expect(viaHelp.text.hasPrefix("Usage: keychain \(command.joined(separator: " "))"), "\(command)")
        }
    }

    @Test func helpOfAnUnknownCommandIsAUsageError() throws {
        let r = try keychain(["help", "frobnicate"])
        #expect(r.status == Exit.usage)
        #expect(r.stderr.contains("unknown command 'frobnicate'"))
    }

    @Test func bashCompletesEveryCommandTheHelpLists() throws {
        let offered = Set(try bashCompletes(["keychain", ""]))
        let listed = try listedCommands()
        #expect(listed.contains("passcode set") && listed.contains("restore") && listed.contains("completion"), "\(listed)")
        for command in listed {
            #expect(offered.contains(String(command.split(separator: " ")[0])), "\(command)")
        }
        #expect(Set(try bashCompletes(["keychain", "passcode", ""])).isSuperset(of: ["set", "change", "remove"]))
    }

    @Test func bashCompletesExactlyTheOptionsEachCommandAccepts() throws {
        for command in [["add"], ["get"], ["update"], ["list"], ["restore"], ["backup"], ["passcode", "set"]] {
            let offered = Set(try bashCompletes(["keychain"] + command + ["--"]))
            #expect(offered == (try options(of: command)), "\(command)")
        }
    }

    @Test func bashCompletesTheValuesOfClosedChoices() throws {
        #expect(try bashCompletes(["keychain", "get", "--class", ""]) == ["generic-password", "internet-password"])
        #expect(try bashCompletes(["keychain", "restore", "--on-conflict", "re"]) == ["replace"])
        #expect(try bashCompletes(["keychain", "add", "--accessible", "when-"]).contains("when-passcode-set-this-device-only"))
        // A value the user types freely gets no suggestions, and the option before it is skipped.
        #expect(try bashCompletes(["keychain", "get", "--service", ""]).isEmpty)
        #expect(try bashCompletes(["keychain", "--socket", "/tmp/x", "get", "--cl"]) == ["--class"])
    }

    @Test func completionScriptsExistForBashZshAndFishOnly() throws {
        for shell in ["bash", "zsh", "fish"] {
            let r = try keychain(["completion", shell])
            #expect(r.status == 0 && r.text.contains("keychain"), "\(shell)")
        }
        #expect(try keychain(["completion", "tcsh"]).status == Exit.usage)
    }

    /// zsh and fish come from scripts/install-deps, so these run wherever `make test` does.
    @Test func theZshScriptParses() throws {
        let script = try keychain(["completion", "zsh"]).text
        let r = try runExecutable("/usr/bin/zsh", ["-n", "-c", script], environment: [:], input: [])
        #expect(r.status == 0, "\(r.stderr)")
    }

    @Test func theFishScriptParses() throws {
        let script = try keychain(["completion", "fish"]).text
        let r = try runExecutable("/usr/bin/fish", ["-n", "-c", script], environment: [:], input: [])
        #expect(r.status == 0, "\(r.stderr)")
    }
}
