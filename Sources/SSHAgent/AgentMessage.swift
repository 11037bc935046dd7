import KeychainModel

/// Message numbers of the SSH agent protocol (RFC 9987, draft-ietf-sshm-ssh-agent §5.1).
enum AgentMessageType: UInt8 {
    case failure = 5
    case success = 6
    case requestIdentities = 11
    case identitiesAnswer = 12
    case signRequest = 13
    case signResponse = 14
    case addIdentity = 17
    case removeIdentity = 18
    case removeAllIdentities = 19
    case lock = 22
    case unlock = 23
    case addIdentityConstrained = 25
    case `extension` = 27
}

/// A constraint `ssh-add -t`, `-c` or `-h` attaches to a key.
public enum AgentConstraint: Sendable, Equatable {
    case lifetime(seconds: UInt32)
    case confirm
    /// An extension constraint (e.g. restrict-destination-v00@openssh.com), by name; its
    /// fields are not kept, as the agent honours none.
    case `extension`(String)
}

/// One decoded request. Types the agent does not implement keep their number, so the
/// answer (FAILURE) and the log can name them.
public enum AgentRequest: Sendable {
    case requestIdentities
    case sign(key: [UInt8], data: [UInt8], flags: UInt32)
    case add(SSHPrivateKey, comment: String, constraints: [AgentConstraint])
    /// ADD_IDENTITY of a key type the agent cannot hold (RSA, DSA, certificates, FIDO keys):
    /// the rest of the body is not parsed, since its layout depends on the type.
    case addUnsupported(keyType: String)
    case remove(key: [UInt8])
    case removeAll
    case lock(passphrase: SecretBytes)
    case unlock(passphrase: SecretBytes)
    case `extension`(name: String)
    case unsupported(type: UInt8)

    /// Decodes one message (type byte and body, without the length prefix). Malformed
    /// bodies are errSecDecode; the caller answers FAILURE.
    public init(message: SecretBytes) throws(KeychainError) {
        var reader = SSHReader(message)
        let number = try reader.byte()
        guard let type = AgentMessageType(rawValue: number) else {
            self = .unsupported(type: number)
            return
        }
        switch type {
        case .requestIdentities:
            self = .requestIdentities
        case .signRequest:
            let key = try reader.publicString("key blob")
            let data = try reader.publicString("data to sign")
            let flags = try reader.uint32()
            self = .sign(key: key, data: data, flags: flags)
        case .addIdentity, .addIdentityConstrained:
            let name = try reader.text("key type")
            guard let keyType = SSHKeyType(rawValue: name) else {
                self = .addUnsupported(keyType: name)
                return
            }
            let key = try SSHPrivateKey.read(type: keyType, from: &reader)
            let comment = try reader.text("comment")
            var constraints: [AgentConstraint] = []
            if type == .addIdentityConstrained {
                while !reader.isAtEnd { constraints.append(try Self.constraint(from: &reader)) }
                guard !constraints.isEmpty else { throw KeychainError(.decode, "constrained add without constraints") }
            }
            self = .add(key, comment: comment, constraints: constraints)
        case .removeIdentity:
            self = .remove(key: try reader.publicString("key blob"))
        case .removeAllIdentities:
            self = .removeAll
        case .lock:
            self = .lock(passphrase: SecretBytes(try reader.string("passphrase")))
        case .unlock:
            self = .unlock(passphrase: SecretBytes(try reader.string("passphrase")))
        case .extension:
            // The extension's own fields follow the name raw (OpenSSH's layout); unread here.
            self = .extension(name: try reader.text("extension name"))
            return
        case .failure, .success, .identitiesAnswer, .signResponse:
            self = .unsupported(type: number)
            return
        }
        try reader.expectEnd("the \(type) message")
    }

    private static func constraint(from reader: inout SSHReader) throws(KeychainError) -> AgentConstraint {
        switch try reader.byte() {
        case 1: return .lifetime(seconds: try reader.uint32())
        case 2: return .confirm
        case 255:
            let name = try reader.text("constraint name")
            // Its data runs to the end: nothing may follow an extension constraint that we
            // could find the start of, and we honour none anyway.
            while !reader.isAtEnd { _ = try reader.byte() }
            return .extension(name)
        case let other:
            throw KeychainError(.decode, "unknown key constraint \(other)")
        }
    }
}

/// An identity the agent offers: the public key and the comment ssh-add shows.
public struct AgentIdentity: Sendable, Equatable {
    public let key: SSHPublicKey
    public let comment: String

    public init(key: SSHPublicKey, comment: String) {
        self.key = key
        self.comment = comment
    }
}

/// One answer, encoded without its length prefix.
public enum AgentResponse: Sendable, Equatable {
    case failure
    case success
    case identities([AgentIdentity])
    case signature(SSHSignature)

    public var message: [UInt8] {
        var w = SSHWriter()
        switch self {
        case .failure:
            w.byte(AgentMessageType.failure.rawValue)
        case .success:
            w.byte(AgentMessageType.success.rawValue)
        case .identities(let list):
            w.byte(AgentMessageType.identitiesAnswer.rawValue)
            w.uint32(UInt32(list.count))
            for identity in list {
                w.string(identity.key.blob)
                w.string(identity.comment)
            }
        case .signature(let signature):
            w.byte(AgentMessageType.signResponse.rawValue)
            w.string(signature.blob)
        }
        return w.bytes
    }

    /// Decodes an answer (for clients of an agent: the bench and the tests).
    public init(message: [UInt8]) throws(KeychainError) {
        var reader = SSHReader(SecretBytes(message))
        switch try reader.byte() {
        case AgentMessageType.failure.rawValue: self = .failure
        case AgentMessageType.success.rawValue: self = .success
        case AgentMessageType.identitiesAnswer.rawValue:
            let count = try reader.uint32()
            var list: [AgentIdentity] = []
            for _ in 0..<count {
                let key = try SSHPublicKey(blob: try reader.publicString("key blob"))
                list.append(AgentIdentity(key: key, comment: try reader.text("comment")))
            }
            self = .identities(list)
        case AgentMessageType.signResponse.rawValue:
            self = .signature(try SSHSignature(blob: try reader.publicString("signature")))
        case let other:
            throw KeychainError(.unimplemented, "agent answer type \(other)")
        }
        try reader.expectEnd("the answer")
    }
}
