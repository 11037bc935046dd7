#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel
import SSHAgent

/// `keychain ssh-agent`: binds the socket (so that every error reaches the person who ran it),
/// then serves in the foreground or in a detached child, printing the lines `ssh-agent -s`
/// prints (docs/ssh-agent.md).
enum SSHAgentCommand {
    static func run(_ c: Context) throws {
        AgentProcess.harden()
        // An agent in the background cannot tell anyone that keychaind is not there: ssh-add
        // would only say "agent refused operation". Ask once, here, where the error is seen.
        // (Its own connection, closed before the fork; the agent's connects when first used.)
        _ = try c.connection().status()
        let socket = try AgentSocket.listen(at: c.arguments["listen"])
        let source = KeychainKeySource(connection: try c.connection())
        let foreground = c.arguments.has("foreground")
        if !foreground {
            guard let child = AgentProcess.detach(keeping: socket.listener.fd) else {
                serve(socket, source: source, detached: true)
            }
            guard child > 0 else {
                socket.remove()
                throw SystemCallError.current("fork").keychainError("start the agent in the background")
            }
            printEnvironment(socket.path, pid: child)
            return
        }
        printEnvironment(socket.path, pid: getpid())
        serve(socket, source: source, detached: false)
    }

    static func printEnvironment(_ path: String, pid: pid_t) {
        Output.line("SSH_AUTH_SOCK=\(path); export SSH_AUTH_SOCK;")
        Output.line("SSH_AGENT_PID=\(pid); export SSH_AGENT_PID;")
        Output.line("echo Agent pid \(pid);")
    }

    static func serve(_ socket: AgentSocket, source: KeychainKeySource, detached: Bool) -> Never {
        AgentProcess.removeOnExit(socket)
        let log = AgentProcess.logger(detached: detached)
        let agent = KeyAgent(source: source, log: log)
        AgentServer(agent: agent, listener: socket.listener, log: log).run()
        socket.remove()
        exit(0)
    }
}
