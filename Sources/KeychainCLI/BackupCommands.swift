#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain backup` and `keychain restore`.
enum BackupCommands {
    static func backup(_ c: Context) throws {
        guard let out = c.arguments["out"] else { throw UsageError(message: "backup needs --out FILE") }
        var password = try SecretInput.newPassword("Backup password")
        defer { explicit_bzero(&password, password.count) }
        let progress = Progress(label: "backup")
        let (file, info) = try c.connection().backup(password: password, progress: progress.update)
        progress.finish()
        try AtomicFile.write(file, to: out)
        if c.json {
            Output.line(JSON.attributes(info.filter { $0.key != "session" }.merging(["file": .string(out)]) { $1 }))
            return
        }
        Output.error("backed up \(ListCommand.text(info["items"])) item(s) to \(out); \(ListCommand.text(info["note"]))")
    }

    static func restore(_ c: Context) throws {
        guard let path = c.arguments["FILE"] else { throw UsageError(message: "restore needs the backup FILE") }
        let policy = try c.arguments.choice("on-conflict", ConflictPolicy.allCases.map(\.rawValue)).flatMap(ConflictPolicy.init(rawValue:)) ?? .fail
        let file = try AtomicFile.read(path)
        var password = try SecretInput.passcode("Backup password")
        defer { explicit_bzero(&password, password.count) }
        let progress = Progress(label: "restore")
        let summary = try c.connection().restore(file, password: password, onConflict: policy, progress: progress.update)
        progress.finish()
        if c.json {
            Output.line(JSON.attributes(summary))
            return
        }
        Output.error("restored \(ListCommand.text(summary["restored"])), skipped \(ListCommand.text(summary["skipped"])), replaced \(ListCommand.text(summary["replaced"])); the backup notes: \(ListCommand.text(summary["note"]))")
    }
}
