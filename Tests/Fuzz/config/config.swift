// libFuzzer target: the config file parser (Sources/KeychainServer/DaemonConfig.swift). Any
// text must give a config or a ParseError naming a line of the text; a config that parses must
// turn into the server's settings without trapping (every number in range is converted).
import KeychainServer

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let config: DaemonConfig
    do {
        config = try DaemonConfig.parse(text)
    } catch {
        // Counted in bytes: "\r\n" is one Character, which a split on "\n" would not cut.
        let lines = text.utf8.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
        require(error.line >= 1 && error.line <= lines, "a parse error names line \(error.line) of \(lines)")
        return 0
    }
    _ = config.serverConfiguration(stateDirectory: nil, socket: nil, source: "fuzz")
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    // scripts/fuzz-seeds adds the files in Config/ as they are.
    writeSeedsIfAsked {
        [
            Seed("every-key", text: """
                state_dir = "/var/lib/keychaind" # where the database lives
                socket = "/run/keychaind/socket"
                socket_mode = "0660"
                idle_timeout_seconds = 86_400
                frame_timeout_seconds = 3600
                max_connections = 65536
                max_connections_per_uid = 1
                busy_poll_microseconds = 0
                argon2_ops = 64
                argon2_memory_mib = 4096
                admin_uids = [0, 1000, 4294967295]
                lock_grace_seconds = 0
                auto_lock_seconds = 604800
                erase_after_failures = 10
                unknown_callers = "private-group"
                audit_log = "/var/log/keychaind/audit.jsonl"
                audit_include_names = true
                log_level = "trace"

                """),
            Seed("apps", text: """
                admin_uids = []
                [[app]]
                id = "git"
                uids = [1000, 1001]
                users = ["root"]
                executables = ["/usr/bin/git", "/usr/lib/git-core/git-remote-https"]
                groups = ["dev.git", "shared"]

                [[app]]
                id = "browser"
                uids = [1000]
                groups = ["shared"]
                """),
            Seed("errors", text: "max_connections = 0\r\n[server]\nlog_level = \"loud\"\nkey\n\"open = 1\n"),
        ]
    }
    return 0
}
