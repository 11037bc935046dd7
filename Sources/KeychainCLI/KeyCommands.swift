#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain key ...`: keys made and used inside keychaind (docs/keys.md).
enum KeyCommands {
    static let typeNames = KeyType.allCases.map(\.rawValue)
    static let formats = ["ssh", "pem", "raw"]
    static let labelOption: [(name: String, help: String)] = [("label", "The key's label.")]

    static let commands: [Command] = [
        Command(spec: CommandSpec(name: "key generate", summary: "Make a private key inside keychaind; prints its public key.",
                                  options: globalOptions + [
                                      ("type", "ed25519, x25519 or p256."),
                                      ("label", "The key's label."),
                                      ("accessible", "when-unlocked (default), after-first-unlock, always, their -this-device-only forms, when-passcode-set-this-device-only."),
                                      ("access-group", "Access group (default: the caller's first group)."),
                                      ("require", Requirement.keyHelp),
                                  ],
                                  flags: jsonFlag + [
                                      ("extractable", "Let the key's bytes be read back (default: they never leave keychaind)."),
                                      ("ssh", "Offer the key to `keychain ssh-agent` (application tag \"ssh\")."),
                                      ("allow-duplicate-label", "Make the key even if another key has this label (then sign, csr and public cannot tell them apart)."),
                                  ] + ApplicationPasswordInput.flags)) { c in
            try generate(c)
        },
        Command(spec: CommandSpec(name: "key list", summary: "List the private keys keychaind can use (never their bytes).",
                                  options: globalOptions + labelOption, flags: jsonFlag)) { c in
            try list(c)
        },
        Command(spec: CommandSpec(name: "key public", summary: "Write a key's public key: OpenSSH line (default), PEM, or raw bytes.",
                                  options: globalOptions + labelOption + [("format", "ssh (authorized_keys line), pem (SubjectPublicKeyInfo) or raw.")],
                                  flags: [])) { c in
            try publicKey(c)
        },
        Command(spec: CommandSpec(name: "key sign", summary: "Sign standard input with a key; the signature goes to standard output.",
                                  options: globalOptions + labelOption + [("algorithm", "ed25519, or p256's ecdsa-sha256 (default) or ecdsa-digest-sha256.")],
                                  flags: ApplicationPasswordInput.flags)) { c in
            try sign(c)
        },
        Command(spec: CommandSpec(name: "key delete", summary: "Delete the keys with a label.",
                                  options: globalOptions + labelOption, flags: jsonFlag)) { c in
            let keys = try KeychainKey.find(label: try label(c), connection: try c.connection())
            guard !keys.isEmpty else { throw KeychainError(.itemNotFound, "no key is labelled \(try label(c))") }
            for key in keys { try key.delete() }
            c.printStatusJSON()
        },
    ]

    /// The CLI's short names for the signing algorithms.
    static let algorithms: [(name: String, algorithm: KeySigningAlgorithm)] = [
        ("ed25519", .ed25519), ("ecdsa-sha256", .ecdsaMessageX962SHA256), ("ecdsa-digest-sha256", .ecdsaDigestX962SHA256),
    ]

    private static func label(_ c: Context) throws(UsageError) -> String {
        guard let label = c.arguments["label"] else { throw UsageError(message: "--label is required") }
        return label
    }

    /// The one key with the label; errSecParam when several share it.
    static func key(_ c: Context) throws -> KeychainKey {
        let label = try label(c)
        let keys = try KeychainKey.find(label: label, connection: try c.connection())
        guard let key = keys.first else { throw KeychainError(.itemNotFound, "no key is labelled \(label)") }
        guard keys.count == 1 else {
            throw KeychainError(.param, "\(keys.count) keys are labelled \(label); give each key its own label")
        }
        return key
    }

    private static func generate(_ c: Context) throws {
        guard let typeName = try c.arguments.choice("type", typeNames), let type = KeyType(rawValue: typeName) else {
            throw UsageError(message: "--type is required: \(typeNames.joined(separator: ", "))")
        }
        var accessibility = Protection.whenUnlocked
        if let name = try c.arguments.choice("accessible", Accessible.names) {
            accessibility = Protection.allCases.first { $0.name == name } ?? .whenUnlocked
        }
        // Apple's userPresence (1) and devicePasscode (16), both the keychain passcode here, and
        // applicationPassword, as `add --require` takes them.
        let accessControl = try c.arguments["require"].map { (text) throws(UsageError) in
            try Requirement.accessControl(text, protection: accessibility)
        }
        let sealed = accessControl.map { AccessControl.needsApplicationPassword($0.flags) } ?? false
        if c.arguments.has(ApplicationPasswordInput.stdinFlag) && !sealed {
            throw UsageError(message: "--app-password-stdin is for a key generated with --require app-password")
        }
        let label = try label(c)
        let connection = try c.connection()
        // Keys are named by label alone: a second key of one label makes `key sign` and `csr`
        // refuse both, and `key delete` take both.
        if !c.arguments.has("allow-duplicate-label"), let existing = try KeychainKey.find(label: label, connection: connection).first {
            throw KeychainError(.duplicateItem, "a key is labelled \(label) already (\(existing.type.rawValue), group \(existing.accessGroup)); no key was made")
        }
        var password = sealed ? try ApplicationPasswordInput.forAdd(c.arguments) : nil
        defer { if password != nil { explicit_bzero(&password!, password!.count) } }
        let key = try ApplicationPasswordInput.withContext(password, on: connection) { (context) throws(KeychainError) in
            try KeychainKey.generate(type, label: label, accessibility: accessibility,
                                     accessGroup: c.arguments["access-group"], extractable: c.arguments.has("extractable"),
                                     applicationTag: c.arguments.has("ssh") ? KeychainKey.sshTag : nil,
                                     accessControl: accessControl, context: context, connection: connection)
        }
        if c.json {
            Output.line(JSON.object(summary(key)))
        } else {
            Output.line(sshLine(key) ?? JSON.base64(key.publicKey))
        }
    }

    private static func list(_ c: Context) throws {
        let keys = try KeychainKey.find(label: c.arguments["label"], connection: try c.connection())
        if c.json {
            Output.line("[" + keys.map { JSON.object(summary($0)) }.joined(separator: ",") + "]")
            return
        }
        for key in keys {
            let flags = [key.extractable ? "extractable" : "non-extractable", key.applicationTag == KeychainKey.sshTag ? "ssh" : nil]
            // Whoever shares the access group chose the label: escaped as list escapes it.
            Output.line([key.type.rawValue, ControlEscaping.escaped(key.label), ControlEscaping.escaped(key.accessGroup),
                         flags.compactMap { $0 }.joined(separator: ",")].joined(separator: "\t"))
        }
    }

    private static func summary(_ key: KeychainKey) -> [(String, String)] {
        [("type", JSON.quote(key.type.rawValue)), ("label", JSON.quote(key.label)), ("accessGroup", JSON.quote(key.accessGroup)),
         ("extractable", key.extractable ? "true" : "false"), ("ssh", key.applicationTag == KeychainKey.sshTag ? "true" : "false"),
         ("publicKey", JSON.quote(JSON.base64(key.publicKey)))]
    }

    private static func publicKey(_ c: Context) throws {
        let format = try c.arguments.choice("format", formats) ?? "ssh"
        let key = try key(c)
        switch format {
        case "raw":
            Output.stdout(key.publicKey)
        case "pem":
            let body = JSON.base64(key.subjectPublicKeyInfo)
            var lines = ["-----BEGIN PUBLIC KEY-----"]
            var rest = Substring(body)
            while !rest.isEmpty {
                lines.append(String(rest.prefix(64)))
                rest = rest.dropFirst(64)
            }
            lines.append("-----END PUBLIC KEY-----")
            Output.line(lines.joined(separator: "\n"))
        default:
            guard let line = sshLine(key) else {
                throw UsageError(message: "an x25519 key has no OpenSSH form; use --format pem or raw")
            }
            Output.line(line)
        }
    }

    /// The authorized_keys line, with the label as its comment.
    private static func sshLine(_ key: KeychainKey) -> String? {
        guard let blob = key.sshPublicKeyBlob, let name = key.sshKeyType else { return nil }
        return "\(name) \(JSON.base64(blob)) \(key.label)"
    }

    private static func sign(_ c: Context) throws {
        let key = try key(c)
        let algorithm: KeySigningAlgorithm
        if let name = try c.arguments.choice("algorithm", algorithms.map(\.name)) {
            algorithm = algorithms.first { $0.name == name }!.algorithm
        } else {
            switch key.type {
            case .ed25519: algorithm = .ed25519
            case .p256: algorithm = .ecdsaMessageX962SHA256
            case .x25519: throw KeychainError(.param, "an x25519 key does not sign; it agrees on keys")
            }
        }
        let signature = try ApplicationPasswordInput.usingKey(key, c.arguments, input: {
            try SecretInput.readAllStdin(limit: KeychainLimits.maxSecretBytes)
        }) { (data, context) throws(KeychainError) in try key.sign(data, algorithm: algorithm, context: context) }
        Output.stdout(signature)
    }
}
