import Foundation
import KeychainClient
import KeychainModel
import Testing

/// unlockPrompt (op 53, issue 30): keychaind asks the person for the keychain passcode on its
/// own prompt, so the caller (a PKCS#11 host, `keychain unlock --prompt`) never holds it.
/// Against the real daemon with the scripted pinentry (Tests/SecretServiceScripts/fake_pinentry.py),
/// which answers each GETPIN in turn and logs what it was told.
@Suite("Unlock through keychaind's prompt")
struct UnlockPromptTests {
    static let passcode = "1234"

    struct Prompted: Sendable {
        let daemon: RunningDaemon
        let log: String
        /// Exists once a pinentry has started (when the pinentry waits for `gate`).
        let started: String
        /// The pinentry greets only once this file exists (when made with `waits`).
        let gate: String

        var said: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        var getPins: Int { said.components(separatedBy: "GETPIN").count - 1 }

        func connection() -> KeychainConnection { KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 180_000) }
        func state() throws -> AttributeValue? { try KeychainConnection(socketPath: daemon.socketPath).status()["state"] }
    }

    /// A keychaind with a passcode, locked, whose [prompt] pinentry answers `answers`.
    static func locked(answers: [String], prompt: Bool = true, waits: Bool = false, config: String = "") throws -> Prompted {
        var template = Array("/tmp/kcu.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        let directory = String(cString: made)
        chmod(directory, 0o755)
        let program = directory + "/pinentry", log = directory + "/pinentry.log"
        let started = directory + "/started", gate = directory + "/gate"
        try """
            #!/bin/sh
            touch '\(started)'
            \(waits ? "while [ ! -e '\(gate)' ]; do sleep 0.05; done" : "")
            FAKE_PINENTRY_ANSWERS='\(answers.joined(separator: ","))' FAKE_PINENTRY_LOG='\(log)' exec \(SecretServiceScripts.path("fake_pinentry.py"))
            """.write(toFile: program, atomically: true, encoding: .utf8)
        chmod(program, 0o755)
        let section = prompt ? "[prompt]\npinentry = \"\(program)\"\ndisplay = \":99\"" : ""
        let d = try RunningDaemon(config: config + "\n" + section)
        #expect(try d.cli(["passcode", "set"], input: bytes(passcode + "\n")).status == 0)
        #expect(try d.cli(["lock"]).status == 0)
        return Prompted(daemon: d, log: log, started: started, gate: gate)
    }

    @Test func theRightPasscodeAtThePromptUnlocksAndThePromptNamesTheCaller() throws {
        let p = try Self.locked(answers: [Self.passcode])
        #expect(try p.state() == .string("locked"))
        try p.connection().unlockPrompt()
        #expect(try p.state() == .string("unlocked"))
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(p.said.contains("SETDESC \(executable) (pid \(getpid())) wants to unlock the keychain."), "\(p.said)")
        #expect(!p.said.contains(Self.passcode))
        #expect(p.daemon.log.contains("unlocked by"), "\(p.daemon.log)")
    }

    @Test func anUnlockedKeychainSucceedsWithoutAsking() throws {
        let p = try Self.locked(answers: [])
        #expect(try p.daemon.cli(["unlock"], input: bytes(Self.passcode + "\n")).status == 0)
        try p.connection().unlockPrompt()
        #expect(!FileManager.default.fileExists(atPath: p.started))
    }

    @Test func cancellingIsUserCanceledAndTheKeychainStaysLocked() throws {
        let p = try Self.locked(answers: ["cancel"])
        expectStatus(.userCanceled) { try p.connection().unlockPrompt() }
        #expect(try p.state() == .string("locked"))
    }

    @Test func wrongPasscodesAreAuthFailedAndCountAsUnlocksCount() throws {
        let p = try Self.locked(answers: ["a", "b", "c"])
        expectStatus(.authFailed) { try p.connection().unlockPrompt() }
        #expect(try KeychainConnection(socketPath: p.daemon.socketPath).status()["failed_attempts"] == .int(3))
        #expect(p.daemon.log.contains("wrong passcode (3 in a row)"), "\(p.daemon.log)")
        #expect(try p.state() == .string("locked"))
    }

    @Test func aWrongPasscodeThatErasesTheKeychainEndsThePrompt() throws {
        let p = try Self.locked(answers: ["a", "b", Self.passcode], config: "erase_after_failures = 2")
        do {
            try p.connection().unlockPrompt()
            Issue.record("an erasing wrong passcode was answered with success")
        } catch {
            #expect(error.status == .authFailed)
            #expect(error.message.contains("erased"), "\(error.message)")
        }
        #expect(p.getPins == 2, "\(p.said)")
    }

    @Test func duringAWrongPasscodeDelayNoPromptIsShown() throws {
        let p = try Self.locked(answers: [Self.passcode])
        for _ in 0..<5 { _ = try p.daemon.cli(["unlock"], input: bytes("wrong\n")) }  // the fifth starts a 1 min delay
        expectStatus(.authFailed) { try p.connection().unlockPrompt() }
        #expect(!FileManager.default.fileExists(atPath: p.started))
    }

    @Test func withNowhereToAskItIsInteractionNotAllowed() throws {
        let p = try Self.locked(answers: [], prompt: false)
        expectStatus(.interactionNotAllowed) { try p.connection().unlockPrompt() }
    }

    @Test func keychainUnlockPromptAsksThroughKeychaind() throws {
        let p = try Self.locked(answers: [Self.passcode])
        let r = try p.daemon.cli(["unlock", "--prompt"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try p.state() == .string("unlocked"))
        #expect(p.said.contains("SETDESC \(Binaries.keychain) (pid "), "\(p.said)")
    }

    /// Callers that wait while a prompt is shown take its outcome: one prompt, not one each.
    @Test func callersWaitingDuringACancelledPromptShareItsCancel() throws {
        let p = try Self.locked(answers: ["cancel"], waits: true)
        let outcomes = Locked<[Int32]>([])
        @Sendable func call() {
            do throws(KeychainError) { try p.connection().unlockPrompt(); outcomes.withLock { $0.append(0) } } catch {
                outcomes.withLock { $0.append(error.status.rawValue) }
            }
        }
        let first = Thread { call() }
        first.start()
        while !FileManager.default.fileExists(atPath: p.started) { usleep(10_000) }
        let others = (0..<3).map { _ in Thread { call() } }
        for thread in others { thread.start() }
        sleep(1)  // the three are waiting for the prompt (a lower bound, never an upper one)
        FileManager.default.createFile(atPath: p.gate, contents: nil)
        while outcomes.withLock({ $0.count }) < 4 { usleep(10_000) }
        #expect(outcomes.withLock { $0 } == Array(repeating: KeychainStatus.userCanceled.rawValue, count: 4))
        #expect(p.getPins == 1, "\(p.said)")
    }

    /// The attack: a caller that asks again and again, hoping the person gives in. After three
    /// prompts left unanswered in a row, keychaind shows none for a while.
    @Test func aFloodOfUnlockPromptsIsBoundedAfterThreeCancels() throws {
        let p = try Self.locked(answers: ["cancel"])
        for _ in 0..<6 {
            expectStatus(.userCanceled) { try p.connection().unlockPrompt() }
        }
        #expect(p.getPins == 3, "\(p.said)")
        do {
            try p.connection().unlockPrompt()
        } catch {
            #expect(error.message.contains("shows no other for"), "\(error.message)")
        }
        // The passcode typed at the terminal still unlocks meanwhile.
        #expect(try p.daemon.cli(["unlock"], input: bytes(Self.passcode + "\n")).status == 0)
    }

    /// The attack: another uid shows a dialog on this user's display. keychaind is one user's:
    /// its socket is the user's alone, and even when opened to all, a uid its policy does not
    /// know is refused before any prompt.
    @Test func anotherUidCannotMakeThePromptAppear() throws {
        let stranger = try MultiUserTests.user("kcapp-c")
        let closed = try Self.locked(answers: [Self.passcode])
        #expect(try closed.daemon.cli(["unlock", "--prompt"], asUser: stranger).status == Exit.unreachable)
        let open = try Self.locked(answers: [Self.passcode], config: "socket_mode = \"0666\"\nadmin_uids = [0]")
        let r = try open.daemon.cli(["unlock", "--prompt"], asUser: stranger)
        #expect(r.status == Exit.denied, "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: closed.started))
        #expect(!FileManager.default.fileExists(atPath: open.started))
        #expect(try open.state() == .string("locked"))
    }

    /// The attack: a connection handed to a process that then runs another program (here a
    /// shell exec'd with the socket open) must not be shown under the first program's name.
    @Test func aConnectionWhoseProcessExecdAnotherProgramIsRefused() throws {
        let p = try Self.locked(answers: [Self.passcode])
        let script = """
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            # A status call first: keychaind has read the executable of the connection's process.
            s.sendall(bytes([2, 0, 0, 0, 1, 5]))
            length = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "little")
            s.recv(length, socket.MSG_WAITALL)
            os.set_inheritable(s.fileno(), True)
            os.dup2(s.fileno(), 3)
            os.execv("/bin/bash", ["bash", "-c", "printf '\\\\002\\\\000\\\\000\\\\000\\\\001\\\\065' >&3; head -c 9 <&3 | od -An -tx1"])
            """
        let r = try runExecutable("/usr/bin/python3", ["-c", script, p.daemon.socketPath], environment: [:], input: [])
        // -34018 (errSecMissingEntitlement), little-endian after the length and version.
        #expect(r.text.contains("01 1e 7b ff ff"), "\(r.text) \(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: p.started))
        #expect(try p.state() == .string("locked"))
    }
}
