import Foundation
import KeychainModel
import Testing
@testable import KeychainStore

/// Whoever can change the state directory, a file in it or a directory above it can read
/// every item stored later or destroy the keychain: the store starts only where the daemon's
/// uid (and root, for the parents) alone can.
@Suite("The state directory is the daemon's alone")
struct StateDirectoryTests {
    /// The refusal names the path and says what is wrong with it.
    func expectRefused(_ s: Scratch, naming path: String, _ words: [String],
                       sourceLocation: SourceLocation = #_sourceLocation) {
        let error = refusal(sourceLocation: sourceLocation) { _ = try s.open() }
        #expect(error?.status == .notAvailable, "\(String(describing: error))", sourceLocation: sourceLocation)
        #expect(error?.message.contains(path) == true, "\(String(describing: error))", sourceLocation: sourceLocation)
        for word in words {
            #expect(error?.message.contains(word) == true, "no \"\(word)\" in \(String(describing: error))", sourceLocation: sourceLocation)
        }
    }

    // MARK: owners

    @Test(.enabled(if: runsAsRoot))
    func aStateDirectoryMadeByAnotherUserIsRefusedAndLeftUntouched() throws {
        let s = try Scratch()
        try s.mkdir("state")
        try s.giveToOtherUser(s.state)
        expectRefused(s, naming: s.state, [OtherUser.name, "uid \(try #require(OtherUser.uid))", "chown"])
        #expect(!s.exists(s.file("device.key")) && !s.exists(s.file("keychain.db")))
    }

    @Test(.enabled(if: runsAsRoot), arguments: ["device.key", "keychain.db"])
    func aKeychainFileOwnedByAnotherUserIsRefused(name: String) throws {
        let s = try Scratch()
        try s.makeKeychain()
        try s.giveToOtherUser(s.file(name))
        expectRefused(s, naming: s.file(name), [OtherUser.name])
    }

    @Test(.enabled(if: runsAsRoot))
    func anUnknownFileOwnedByAnotherUserIsRefused() throws {
        let s = try Scratch()
        try s.makeKeychain()
        _ = FileManager.default.createFile(atPath: s.file("notes"), contents: Data())
        try s.giveToOtherUser(s.file("notes"))
        expectRefused(s, naming: s.file("notes"), [OtherUser.name])
    }

    // MARK: links

    @Test(arguments: ["device.key", "keychain.db"])
    func aKeychainFileThatIsASymbolicLinkIsRefused(name: String) throws {
        let s = try Scratch()
        try s.makeKeychain()
        try s.mkdir("elsewhere")
        rename(s.file(name), s.path("elsewhere/" + name))
        symlink(s.path("elsewhere/" + name), s.file(name))
        expectRefused(s, naming: s.file(name), ["symbolic link"])
    }

    @Test func aWriteAheadLogThatIsASymbolicLinkIsRefusedAndNotFollowed() throws {
        let s = try Scratch()
        try s.makeKeychain()
        try s.mkdir("elsewhere")
        // Refused by the store itself, whatever SQLite would make of the link.
        symlink(s.path("elsewhere/wal"), s.file("keychain.db-wal"))
        expectRefused(s, naming: s.file("keychain.db-wal"), ["symbolic link"])
        #expect(!s.exists(s.path("elsewhere/wal")))
    }

    @Test func aStateDirectoryThatIsASymbolicLinkIsRefused() throws {
        let s = try Scratch()
        try s.mkdir("real")
        symlink(s.path("real"), s.state)
        expectRefused(s, naming: s.state, ["symbolic link"])
        #expect(!s.exists(s.path("real/device.key")))
    }

    // MARK: modes

    @Test(arguments: [mode_t(0o770), 0o730, 0o703, 0o777])
    func aStateDirectoryOthersCanWriteIsRefusedNotFixed(mode: mode_t) throws {
        let s = try Scratch()
        try s.makeKeychain()
        chmod(s.state, mode)
        expectRefused(s, naming: s.state, ["writable"])
        #expect(s.mode(s.state) == mode)
    }

    @Test(arguments: ["device.key", "keychain.db"])
    func aKeychainFileOthersCanWriteIsRefused(name: String) throws {
        let s = try Scratch()
        try s.makeKeychain()
        chmod(s.file(name), 0o620)
        expectRefused(s, naming: s.file(name), ["writable"])
    }

    @Test func aStateDirectoryOthersMayOnlyReadIsTightenedTo0700() throws {
        let s = try Scratch()
        try s.makeKeychain()
        chmod(s.state, 0o755)
        _ = try s.open()
        #expect(s.mode(s.state) == 0o700)
    }

    // MARK: parents

    @Test(.enabled(if: runsAsRoot))
    func aStateDirectoryInsideAnotherUsersDirectoryIsRefused() throws {
        let s = try Scratch()
        try s.mkdir("theirs", mode: 0o755)
        try s.mkdir("theirs/state")
        try s.giveToOtherUser(s.path("theirs"))
        // Its owner could rename our directory away and put one of theirs in its place.
        let error = refusal { _ = try s.open(s.path("theirs/state")) }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains(s.path("theirs")) == true && error?.message.contains(OtherUser.name) == true,
                "\(String(describing: error))")
    }

    @Test(arguments: [mode_t(0o777), 0o775, 0o757])
    func aParentOthersCanWriteWithoutTheStickyBitIsRefused(mode: mode_t) throws {
        let s = try Scratch()
        try s.mkdir("open", mode: mode)
        let error = refusal { _ = try s.open(s.path("open/state")) }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains(s.path("open")) == true, "\(String(describing: error))")
        #expect(!s.exists(s.path("open/state")), "nothing is created under an unsafe parent")
    }

    @Test func aStickyParentLikeTmpIsAccepted() throws {
        let s = try Scratch()
        try s.mkdir("tmp", mode: 0o1777)
        _ = try s.open(s.path("tmp/state"))
        #expect(s.exists(s.path("tmp/state/device.key")))
    }

    @Test func missingParentsAreCreatedPrivate() throws {
        let s = try Scratch()
        _ = try s.open(s.path("a/b/state"))
        #expect(s.mode(s.path("a")) == 0o700 && s.mode(s.path("a/b")) == 0o700 && s.mode(s.path("a/b/state")) == 0o700)
    }

    @Test func aSymbolicLinkAboveTheStateDirectoryToASafePlaceIsAccepted() throws {
        let s = try Scratch()
        try s.mkdir("real")
        symlink(s.path("real"), s.path("link"))
        _ = try s.open(s.path("link/state"))
        #expect(s.exists(s.path("real/state/device.key")))
    }

    @Test func aSymbolicLinkAboveTheStateDirectoryIsFollowedAndItsTargetChecked() throws {
        let s = try Scratch()
        try s.mkdir("open", mode: 0o777)
        try s.mkdir("open/target")
        symlink(s.path("open/target"), s.path("link"))
        // The link is ours, but the directory it leads to sits in one anyone may write to.
        let error = refusal { _ = try s.open(s.path("link/state")) }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains(s.path("open")) == true, "\(String(describing: error))")
    }
}

/// In a user's sandboxed service (systemd's PrivateUsers=), root's directories show as the
/// overflow uid: the parents' checks accept that owner there, and only there.
@Suite("Parents seen from a user namespace")
struct UserNamespaceParentTests {
    @Test func aUIDMapThatCoversZeroMapsRoot() {
        #expect(Trust.mapsRoot(uidMap: "         0          0 4294967295\n"))
        #expect(Trust.mapsRoot(uidMap: "         0       1000          1\n"))
    }

    @Test func aUIDMapOfTheUserAloneDoesNotMapRoot() {
        #expect(!Trust.mapsRoot(uidMap: "      1000       1000          1\n"))
        #expect(!Trust.mapsRoot(uidMap: ""))
    }

    @Test(.enabled(if: runsAsRoot))
    func aParentOwnedByTheOverflowUIDIsAcceptedOnlyInsideSuchANamespace() throws {
        var template = Array("/tmp/kc-userns.XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { rmdir(dir) }
        #expect(chmod(dir, 0o755) == 0 && chown(dir, 65534, 65534) == 0)
        // This process's own namespace maps root: there 65534 is the nobody user, someone else.
        let outside = Trust(uid: 1000, unmappedOwner: nil)
        #expect(throws: KeychainError.self) { try outside.checkParent(dir, of: dir + "/state") }
        let inside = Trust(uid: 1000, unmappedOwner: 65534)
        #expect(throws: Never.self) { try inside.checkParent(dir, of: dir + "/state") }
        // Write permission still counts: a group-writable parent stays refused.
        #expect(chmod(dir, 0o775) == 0)
        #expect(throws: KeychainError.self) { try inside.checkParent(dir, of: dir + "/state") }
    }

    @Test func thisTestProcessIsNotInSuchANamespace() {
        #expect(Trust.overflowUIDIfRootIsUnmapped() == nil)
    }
}
