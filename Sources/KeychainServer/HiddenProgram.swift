import KeychainModel

/// What a prompt names of a caller whose executable keychaind may not read: another user's
/// process under the packaged system daemon, which runs without CAP_SYS_PTRACE, or a
/// non-dumpable one (docs/security.md, "Asking through polkit"). First what the kernel reports
/// and the caller cannot change: its uid (SO_PEERCRED) with that uid's user name, and its
/// systemd unit (its cgroup, read as unit identity reads it); last, marked as the process's own
/// claim, its command name, which it may set to anything (PR_SET_NAME).
struct HiddenProgram: Sendable, Equatable {
    let uid: UInt32
    let userName: String?
    let unit: SystemdUnit?
    let command: String?

    init(uid: UInt32, userName: String?, unit: SystemdUnit?, command: String?) {
        self.uid = uid
        self.userName = userName
        self.unit = unit
        self.command = command
    }

    /// Read for `caller` when its prompt is shown, through a descriptor of its /proc directory
    /// (so both files name one process) that is the caller's only if its effective uid is the
    /// peer's and, when known, its start time is the one of the connect: of a process that has
    /// exited, or of a pid now another's, only the uid is shown.
    init(of caller: Caller) {
        let process = PeerProcess(pid: caller.pid, uid: caller.uid)
            .flatMap { process in caller.startTime.map { process.startTime() == $0 } ?? true ? process : nil }
        self.init(uid: caller.uid, userName: UserAccount.name(of: caller.uid),
                  unit: caller.unit ?? process?.unit(),
                  command: process?.commandName().map { String(decoding: $0, as: UTF8.self) })
    }

    /// "uid 1001 (alice), unit session-3.scope, calls itself `python3`", each part escaped as
    /// the prompt escapes a label (a user unit's and the command's names are their user's to
    /// choose); the command's backquotes too, so that it cannot end its own quotation.
    var shown: String {
        var text = "uid \(uid)"
        if let userName { text += " (\(PromptRequest.shown(userName, limit: 64)))" }
        if let unit { text += ", unit \(PromptRequest.shown(unit.description, limit: 256))" }
        if let command {
            let quoted = PromptRequest.shown(command, limit: 16).split(separator: "`", omittingEmptySubsequences: false)
                .joined(separator: "\\u{60}")
            text += ", calls itself `\(quoted)`"
        }
        return text
    }
}
