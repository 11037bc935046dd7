import Foundation
import KeychainModel

/// The scripted pinentry (Tests/SecretServiceScripts/fake_pinentry.py) answering each GETPIN
/// in turn from `answers` (a prompt's tries, comma-separated, or "cancel") and recording in
/// `log` everything it is told, and the `[prompt]` section that points keychaind at it.
/// keychaind starts pinentry with PATH and LANG alone, so the paths are written into a wrapper.
struct ScriptedPinentry {
    let directory: String
    let program: String
    let log: String

    init(answers: [String]) throws {
        var template = Array("/tmp/kcp.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        directory = String(cString: made)
        program = directory + "/pinentry"
        log = directory + "/pinentry.log"
        try """
            #!/bin/sh
            FAKE_PINENTRY_ANSWERS='\(answers.joined(separator: ","))' FAKE_PINENTRY_LOG='\(log)' exec \(SecretServiceScripts.path("fake_pinentry.py"))
            """.write(toFile: program, atomically: true, encoding: .utf8)
        chmod(program, 0o700)
    }

    var promptSection: String { "[prompt]\npinentry = \"\(program)\"\ndisplay = \":99\"" }
}

/// A keychaind whose `[prompt]` pinentry is scripted (Tests/SecretServiceScripts/fake_pinentry.py):
/// each prompt takes the next of `answers` (one prompt's tries, comma-separated, or "cancel"),
/// and everything pinentry is told goes to `log`, so a test reads who the prompt named.
/// keychaind starts pinentry with PATH and LANG alone, so the paths are written into a wrapper.
struct ScriptedPrompt {
    let daemon: RunningDaemon
    let log: String

    static let passcode = "1234"

    /// With `passcode`: the keychain gets it (`keychain passcode set`) before the test.
    init(answers: [String], passcode: Bool = true) throws {
        var template = Array("/tmp/kcq.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        let directory = String(cString: made)
        let program = directory + "/pinentry", queue = directory + "/answers"
        log = directory + "/pinentry.log"
        try answers.map { $0 + "\n" }.joined().write(toFile: queue, atomically: true, encoding: .utf8)
        try """
            #!/bin/sh
            answer=$(head -n 1 '\(queue)'); sed -i 1d '\(queue)'
            FAKE_PINENTRY_ANSWERS="${answer:-cancel}" FAKE_PINENTRY_LOG='\(log)' exec \(SecretServiceScripts.path("fake_pinentry.py"))
            """.write(toFile: program, atomically: true, encoding: .utf8)
        chmod(program, 0o700)
        daemon = try RunningDaemon(config: "[prompt]\npinentry = \"\(program)\"\ndisplay = \":99\"")
        if passcode {
            guard try daemon.cli(["passcode", "set"], input: bytes(Self.passcode + "\n")).status == 0 else {
                throw KeychainError(.internal, "passcode set failed: \(daemon.log)")
            }
        }
    }

    /// What pinentry was told so far (never the answers).
    var said: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// How many prompts were shown.
    var prompts: Int { said.split(separator: "\n").filter { $0 == "GETPIN" }.count }
}
