import KeychainClient
import KeychainModel
import PKCS10

/// `keychain cert add|list|get|delete`: certificate items, named by label. keychaind parses
/// the DER and derives the rest (docs/keys.md, "Certificates and identities"). `keychain csr`:
/// a certificate signing request for a keychain key, signed inside keychaind.
enum CertificateCommands {
    private static let json = jsonFlag
    private static let group: [(name: String, help: String)] = [("access-group", "Access group (default: the caller's first group).")]
    private static let label: [(name: String, help: String)] = [("label", "The certificate's label.")]

    static let commands: [Command] = [
        Command(spec: CommandSpec(name: "cert add", summary: "Add a certificate from a PEM or DER file (- for standard input).",
                                  options: globalOptions + group + [("label", "Label (default: the subject's common name).")],
                                  flags: json, positional: "FILE")) { c in
            guard let path = c.arguments["FILE"] else { throw UsageError(message: "give the certificate file (PEM or DER), or - for standard input") }
            let bytes = path == "-" ? try SecretInput.readAllStdin(limit: KeychainLimits.maxSecretBytes) : try AtomicFile.read(path)
            var dict = query(c)
            dict["v_Data"] = .data(try PEM.der(from: bytes, label: "CERTIFICATE"))
            if let v = c.arguments["label"] { dict["labl"] = .string(v) }
            try c.connection().add(dict)
            c.printStatusJSON()
        },
        Command(spec: CommandSpec(name: "cert list", summary: "List certificates: label, SHA-256 public-key pin, group.",
                                  options: globalOptions + group + label, flags: json)) { c in
            var dict = query(c)
            dict["r_Attributes"] = .bool(true)
            dict["m_Limit"] = .string("m_LimitAll")
            let rows = try ListCommand.matching(dict, c.connection())
            if c.json {
                Output.line(JSON.array(rows))
                return
            }
            let header = ["LABEL", "SPKI-SHA256", "GROUP"]
            let table = rows.map { a in [ListCommand.text(a["labl"]), pin(a["spkh"]), ListCommand.text(a["agrp"])].map(ControlEscaping.escaped) }
            let widths = header.indices.map { i in ([header[i]] + table.map { $0[i] }).map(\.count).max()! }
            for row in [header] + table {
                Output.line(row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(widths[i] + 1) }.joined(separator: " "))
            }
        },
        Command(spec: CommandSpec(name: "cert get", summary: "Write a certificate to standard output: DER, or PEM with --pem.",
                                  options: globalOptions + group + label,
                                  flags: [("pem", "PEM instead of DER.")])) { c in
            guard c.arguments["label"] != nil else { throw UsageError(message: "--label is required") }
            var dict = query(c)
            dict["r_Data"] = .bool(true)
            guard case .single(.data(let der)) = try c.connection().copyMatching(dict) else {
                throw KeychainError(.decode, "unexpected answer from keychaind")
            }
            if c.arguments.has("pem") { Output.text(PEM.encode(Array(der), label: "CERTIFICATE")) } else { Output.stdout(der) }
        },
        Command(spec: CommandSpec(name: "cert delete", summary: "Delete the certificates with this label.",
                                  options: globalOptions + group + label, flags: json)) { c in
            guard c.arguments["label"] != nil else { throw UsageError(message: "--label is required") }
            try c.connection().delete(query(c))
            c.printStatusJSON()
        },
        Command(spec: CommandSpec(name: "csr", summary: "Write a PKCS#10 certificate signing request (PEM) for a key; it is signed inside keychaind.",
                                  options: globalOptions + [("key", "The label of the Ed25519 or P-256 key."),
                                                            ("subject", "The subject, RFC 4514 order: \"CN=api.example.com,O=Example\".")],
                                  flags: [])) { c in
            guard let label = c.arguments["key"] else { throw UsageError(message: "--key is required") }
            guard let subject = c.arguments["subject"] else { throw UsageError(message: "--subject is required, e.g. --subject \"CN=api.example.com\"") }
            let keys = try KeychainKey.find(label: label, connection: c.connection())
            guard let key = keys.first else { throw KeychainError(.itemNotFound, "no key is labelled \"\(label)\"") }
            guard keys.count == 1 else { throw KeychainError(.param, "\(keys.count) keys are labelled \"\(label)\"; give them distinct labels") }
            let algorithm: KeySigningAlgorithm = key.type == .p256 ? .ecdsaMessageX962SHA256 : .ed25519
            let der = try CertificateRequest.make(subject: subject, keyType: key.type, publicKey: key.publicKey) { bytes in
                try key.sign(bytes, algorithm: algorithm)
            }
            Output.text(PEM.encode(der, label: "CERTIFICATE REQUEST"))
        },
    ]

    private static func query(_ c: Context) -> AttributeDictionary {
        var dict: AttributeDictionary = ["class": .string("cert")]
        if let v = c.arguments["label"] { dict["labl"] = .string(v) }
        if let v = c.arguments["access-group"] { dict["agrp"] = .string(v) }
        return dict
    }

    /// The pin as HPKP writes it (base64 of the SHA-256).
    private static func pin(_ value: AttributeValue?) -> String {
        guard case .data(let d)? = value else { return "" }
        return JSON.base64(Array(d))
    }
}
