import Foundation
import KeychainModel
import Testing
@testable import KeychainStore
import StoreTestSupport

/// A real user other than the one running the tests, to own the files and directories the
/// store must refuse: created with useradd on first use (the tests run as root, as CI does).
enum OtherUser {
    static let name = "kcstate-other"
    static let uid: uid_t? = try? SystemUser.ensure(name)
}

enum SystemUser {
    /// The uid of `name`, created first as a system user if there is none. Retried because
    /// useradd refuses while another (a parallel test) holds the passwd lock.
    static func ensure(_ name: String) throws -> uid_t {
        for _ in 0..<50 {
            if let pw = getpwnam(name) { return pw.pointee.pw_uid }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/sbin/useradd")
            p.arguments = ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
            if let pw = getpwnam(name) { return pw.pointee.pw_uid }
            usleep(100_000)
        }
        throw KeychainError(.io, "useradd \(name) failed")
    }
}

/// Tests that hand files to another user need root, as CI runs them.
let runsAsRoot = getuid() == 0

/// A scratch directory under /tmp (0700, ours) in which a test builds a state directory and
/// what surrounds it; removed with everything in it when the value goes away.
final class Scratch {
    let root: String

    init() throws {
        var template = Array("/tmp/kcstate.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp failed") }
        root = String(cString: p)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    func path(_ relative: String) -> String { root + "/" + relative }

    /// The state directory most tests use: `root/state`.
    var state: String { path("state") }

    func file(_ name: String, in directory: String? = nil) -> String { (directory ?? state) + "/" + name }

    func open(_ directory: String? = nil) throws -> ItemStore {
        try ItemStore(configuration: TemporaryStore.configuration(directory ?? state))
    }

    /// Opens the store in `directory`, adds one item and closes it again: a keychain in use.
    func makeKeychain(_ directory: String? = nil) throws {
        let store = try open(directory)
        try store.items.add(genp("s", "a", ["v_Data": .data(bytes("secret"))]), scope: TemporaryStore.app)
    }

    func mkdir(_ relative: String, mode: mode_t = 0o700) throws {
        guard Glibc.mkdir(path(relative), mode) == 0, chmod(path(relative), mode) == 0 else {
            throw KeychainError(.io, "mkdir \(relative): \(String(cString: strerror(errno)))")
        }
    }

    func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    func mode(_ path: String) -> mode_t {
        var st = stat()
        return lstat(path, &st) == 0 ? st.st_mode & 0o7777 : 0
    }

    func giveToOtherUser(_ path: String) throws {
        let uid = try #require(OtherUser.uid)
        guard chown(path, uid, gid_t.max) == 0 else { throw KeychainError(.io, "chown \(path) failed") }
    }
}

/// The KeychainError `body` throws, or nil (recorded as an issue) when it does not throw.
func refusal(sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void) -> KeychainError? {
    do {
        try body()
        Issue.record("expected a refusal, but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        return error
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
    return nil
}
