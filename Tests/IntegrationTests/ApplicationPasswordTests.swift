import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import KeychainStorage
import Testing

/// The application password (accc flag applicationPassword, op 51 contextSetCredential, issue
/// 29) against the real daemon: the app gives its context the password, adds and reads the
/// item with the context's u_CredRef, and without the right password nothing opens the secret.
@Suite("The application password")
struct ApplicationPasswordTests {
    static let password = SecretBytes(Array("correct horse".utf8))
    static let item: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("vault"), "acct": .string("api"), "labl": .string("api token"),
        "accc": .string("ak;2147483648"), "v_Data": .data(Array("t0ken".utf8)),
    ]
    static let match: AttributeDictionary = ["class": .string("genp"), "svce": .string("vault"), "acct": .string("api")]
    static let secretQuery = match.merging(["r_Data": .bool(true)]) { $1 }
    static let secret = QueryResult.single(.data(Array("t0ken".utf8)))

    static func daemon() throws -> RunningDaemon {
        // A context lives as long as its connection: a longer idle time-out than the tests' default.
        try RunningDaemon(config: "idle_timeout_seconds = 60")
    }

    /// A connection with a context holding `password`: its reference.
    static func context(_ c: RawConnection, password: SecretBytes = password) throws -> [UInt8] {
        let reference = try c.createContext()
        #expect(try c.send(.contextSetCredential(reference: reference, credential: password)).status == 0)
        return reference
    }

    static func with(_ reference: [UInt8], _ dict: AttributeDictionary) -> AttributeDictionary {
        dict.merging(["u_CredRef": .data(reference)]) { $1 }
    }

    /// The item, added through a context holding the right password.
    static func added(_ d: RunningDaemon) throws {
        let c = try RawConnection(d)
        let reference = try context(c)
        #expect(try c.send(.add(with(reference, item))).status == 0)
    }

    @Test func theRightPasswordReadsTheSecret() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let c = try RawConnection(d)
        let reference = try Self.context(c)
        #expect(try c.send(.copyMatching(Self.with(reference, Self.secretQuery))).result == Self.secret)
        let both = try c.send(.copyMatching(Self.with(reference, Self.match.merging(["r_Data": .bool(true), "r_Attributes": .bool(true)]) { $1 })))
        guard case .single(.attributes(let attributes)) = both.result else { Issue.record("\(both)"); return }
        #expect(attributes["v_Data"] == .data(Array("t0ken".utf8)))
        #expect(attributes["accc"] == .string("ak;2147483648"))
    }

    @Test func attributesAloneNeedNoPassword() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let found = try KeychainConnection(socketPath: d.socketPath).copyMatching(Self.match.merging(["r_Attributes": .bool(true)]) { $1 })
        guard case .single(.attributes(let attributes)) = found else { Issue.record("\(found)"); return }
        #expect(attributes["accc"] == .string("ak;2147483648"))
        #expect(attributes["v_Data"] == nil)
    }

    @Test func withoutAPasswordTheSecretIsInteractionNotAllowed() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let c = try RawConnection(d)
        #expect(try c.send(.copyMatching(Self.secretQuery)).status == KeychainStatus.interactionNotAllowed.rawValue)
        let bare = try c.createContext()
        #expect(try c.send(.copyMatching(Self.with(bare, Self.secretQuery))).status == KeychainStatus.interactionNotAllowed.rawValue)
        // A password given and taken away again (an empty credential).
        let taken = try Self.context(c)
        #expect(try c.send(.contextSetCredential(reference: taken, credential: .empty)).status == 0)
        #expect(try c.send(.copyMatching(Self.with(taken, Self.secretQuery))).status == KeychainStatus.interactionNotAllowed.rawValue)
    }

    @Test func skipLeavesTheItemOutWhenThereIsNoPassword() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(["class": .string("genp"), "svce": .string("vault"), "acct": .string("plain"), "v_Data": .data([7])])
        let found = try c.copyMatching(["class": .string("genp"), "svce": .string("vault"), "r_Data": .bool(true),
                                        "m_Limit": .string("m_LimitAll"), "u_AuthUI": .string("u_AuthUIS")])
        #expect(found == .list([.data([7])]))
    }

    @Test func anAddWithoutAPasswordIsInteractionNotAllowedAndAddsNothing() throws {
        let d = try Self.daemon()
        let c = try RawConnection(d)
        #expect(try c.send(.add(Self.item)).status == KeychainStatus.interactionNotAllowed.rawValue)
        let bare = try c.createContext()
        #expect(try c.send(.add(Self.with(bare, Self.item))).status == KeychainStatus.interactionNotAllowed.rawValue)
        #expect(try c.send(.copyMatching(Self.match)).status == KeychainStatus.itemNotFound.rawValue)
    }

    /// The guesser: wrong passwords are errSecAuthFailed, and from the fifth in a row the item
    /// has a delay (1 min) during which every try is refused before any Argon2id, even with the
    /// right password and from a new connection.
    @Test func wrongPasswordsAreAuthFailedAndThenDelayedForThatItem() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let c = try RawConnection(d)
        let wrong = try Self.context(c, password: SecretBytes(Array("tr0ub4dor".utf8)))
        for _ in 1...4 {
            let answer = try c.send(.copyMatching(Self.with(wrong, Self.secretQuery)))
            #expect(answer.status == KeychainStatus.authFailed.rawValue)
            #expect(answer.message == "the application password is not correct")
        }
        let fifth = try c.send(.copyMatching(Self.with(wrong, Self.secretQuery)))
        #expect(fifth.status == KeychainStatus.authFailed.rawValue)
        #expect(fifth.message.contains("5 wrong in a row for this item: next attempt in 60 s"), "\(fifth.message)")
        let again = try RawConnection(d)
        let right = try Self.context(again)
        let refused = try again.send(.copyMatching(Self.with(right, Self.secretQuery)))
        #expect(refused.status == KeychainStatus.authFailed.rawValue)
        #expect(refused.message.contains("try again in"), "\(refused.message)")
        #expect(!refused.message.contains("correct horse") && !fifth.message.contains("tr0ub4dor"))
    }

    @Test func anotherItemIsNotDelayedByOneItemsGuesses() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let c = try RawConnection(d)
        let right = try Self.context(c)
        var other = Self.item
        other["acct"] = .string("other")
        #expect(try c.send(.add(Self.with(right, other))).status == 0)
        let wrong = try Self.context(c, password: SecretBytes(Array("guess".utf8)))
        for _ in 1...5 { _ = try c.send(.copyMatching(Self.with(wrong, Self.secretQuery))) }
        let otherQuery: AttributeDictionary = ["class": .string("genp"), "svce": .string("vault"), "acct": .string("other"), "r_Data": .bool(true)]
        #expect(try c.send(.copyMatching(Self.with(right, otherQuery))).result == Self.secret)
    }

    @Test func updatingTheSecretNeedsThePasswordAndDeletingDoesNot() throws {
        let d = try Self.daemon()
        try Self.added(d)
        let c = try RawConnection(d)
        #expect(try c.send(.update(query: Self.match, changes: ["v_Data": .data([1])])).status == KeychainStatus.interactionNotAllowed.rawValue)
        #expect(try c.send(.update(query: Self.match, changes: ["labl": .string("renamed")])).status == 0)
        let reference = try Self.context(c)
        #expect(try c.send(.update(query: Self.with(reference, Self.match), changes: ["v_Data": .data(Array("n3w".utf8))])).status == 0)
        #expect(try c.send(.copyMatching(Self.with(reference, Self.secretQuery))).result == .single(.data(Array("n3w".utf8))))
        #expect(try c.send(.delete(Self.match)).status == 0)
        #expect(try c.send(.copyMatching(Self.match)).status == KeychainStatus.itemNotFound.rawValue)
    }

    @Test func aContextOfAnotherConnectionCannotBeGivenAPassword() throws {
        let d = try Self.daemon()
        let mine = try RawConnection(d), other = try RawConnection(d)
        let reference = try mine.createContext()
        let answer = try other.send(.contextSetCredential(reference: reference, credential: Self.password))
        #expect(answer.status == KeychainStatus.param.rawValue)
        #expect(!answer.message.contains("correct horse"))
    }

    @Test func aPasswordLongerThan1024BytesIsRefused() throws {
        let d = try Self.daemon()
        let c = try RawConnection(d)
        let reference = try c.createContext()
        let answer = try c.send(.contextSetCredential(reference: reference, credential: SecretBytes([UInt8](repeating: 0x61, count: 1025))))
        #expect(answer.status == KeychainStatus.param.rawValue)
    }

    /// The attack: the database edited to drop the flag from the blob's header (byte 1), or one
    /// byte of the application-password layer's salt changed (byte 120: after the 5-byte header,
    /// the 72-byte wrapped item key, the 24-byte nonce, the secret's 4-byte length and the
    /// layer's 9 bytes of version and cost). Neither opens an item without its password.
    @Test(arguments: [1, 120])
    func anEditOfTheFlagOrTheSealedPartIsErrSecDecode(offset: Int) throws {
        let d = try Self.daemon()
        try Self.added(d)
        #expect(d.stop() == 0)
        do {
            let db = try SQLiteDatabase(path: d.stateDirectory + "/keychain.db")
            var blob = try db.query("SELECT data FROM items") { (s) throws(KeychainError) -> [UInt8] in
                _ = try s.step()
                return s.blob(0)
            }
            #expect(blob.first == 2 && blob[1] & 0x80 != 0)
            blob[offset] ^= offset == 1 ? 0x80 : 0x01
            try db.run("UPDATE items SET data = ?", [.blob(blob)])
        }
        try d.start()
        let c = try RawConnection(d)
        let reference = try Self.context(c)
        #expect(try c.send(.copyMatching(Self.secretQuery)).status == KeychainStatus.decode.rawValue)
        #expect(try c.send(.copyMatching(Self.with(reference, Self.secretQuery))).status == KeychainStatus.decode.rawValue)
        #expect(try c.send(.copyMatching(Self.match.merging(["r_Attributes": .bool(true)]) { $1 })).status == KeychainStatus.decode.rawValue)
    }

    /// The backup asks the person (it carries the sealed secret, which whoever holds the file
    /// could guess at offline, with no delay), and the restored item keeps the seal.
    @Test func backupAndRestoreKeepThePasswordsSeal() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        try Self.added(d)
        let client = KeychainConnection(socketPath: d.socketPath)
        let backupPassword = Array("backup password".utf8)
        let (file, _) = try client.backup(password: backupPassword)
        #expect(ItemsThatAskFirstTests.said(log).contains("that an application password seals"))
        try client.delete(Self.match)
        _ = try client.restore(file, password: backupPassword)
        let c = try RawConnection(d)
        #expect(try c.send(.copyMatching(Self.secretQuery)).status == KeychainStatus.interactionNotAllowed.rawValue)
        let reference = try Self.context(c)
        #expect(try c.send(.copyMatching(Self.with(reference, Self.secretQuery))).result == Self.secret)
    }

    /// The attack: any process of the user is an admin of the user's keychaind, and a backup
    /// holds the sealed secret. Before, it was made without asking anybody.
    @Test func aBackupOfASealedSecretIsRefusedWhenThePersonSaysNo() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: ["cancel"])
        try Self.added(d)
        let client = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.userCanceled) { _ = try client.backup(password: Array("mine".utf8)) }
        #expect(ItemsThatAskFirstTests.said(log).contains("GETPIN"))
    }

    /// The attack: four wrong guesses, then a delete and a restore of a backup to make the
    /// item anew. The count goes with the sealed secret, which the restore keeps: the delay
    /// holds. Before, the restored item had a new id and a fresh count.
    @Test func theDelayOutlivesADeleteAndARestore() throws {
        let (d, _) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        try Self.added(d)
        let client = KeychainConnection(socketPath: d.socketPath)
        let backupPassword = Array("backup password".utf8)
        let (file, _) = try client.backup(password: backupPassword)
        let c = try RawConnection(d)
        let wrong = try Self.context(c, password: SecretBytes(Array("guess".utf8)))
        for _ in 1...5 { _ = try c.send(.copyMatching(Self.with(wrong, Self.secretQuery))) }
        try client.delete(Self.match)
        _ = try client.restore(file, password: backupPassword)
        let refused = try c.send(.copyMatching(Self.with(wrong, Self.secretQuery)))
        #expect(refused.status == KeychainStatus.authFailed.rawValue)
        #expect(refused.message.contains("try again in"), "\(refused.message)")
    }

    /// The attack: op 48 (the bridge's GetSecrets, open to any caller of the item's groups)
    /// naming an item that asks first or that an application password seals, its svce made to
    /// look like the bridge's. Both are left out, as locked items are: op 48 neither asks nor
    /// holds a context. (Before, the one that asks was answered without a prompt.)
    @Test func getSecretsLeavesOutItemsThatAskOrThatAPasswordSeals() throws {
        let d = try Self.daemon()
        let c = try RawConnection(d)
        let reference = try Self.context(c)
        var refs: [[UInt8]] = []
        for (account, accc) in [("asks", "ak;1"), ("sealed", "ak;2147483648")] {
            let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("secret-service:x"), "acct": .string(account),
                                             "accc": .string(accc), "v_Data": .data(Array("t0ken".utf8)), "r_PersistentRef": .bool(true)]
            let added = try c.send(.add(Self.with(reference, item)))
            guard case .single(.persistentRef(let ref)) = added.result else { Issue.record("\(added)"); return }
            refs.append(ref)
        }
        let answer = try c.send(.attributeSecrets(refs: refs))
        #expect(answer.status == 0)
        #expect(answer.result == .list([]), "\(answer.result)")
    }

    /// Apple's rule, on update too: an item with constraints is never synchronizable, so no
    /// update makes it one (its secret would go to the circle's other devices). Before, sync = 1
    /// in an update's changes was refused only beside accc flags in the same changes.
    @Test(arguments: ["ak;1", "ak;2147483648"])
    func anUpdateCannotMakeAConstrainedItemSynchronizable(accc: String) throws {
        let d = try Self.daemon()
        let c = try RawConnection(d)
        let reference = try Self.context(c)
        var item = Self.item
        item["accc"] = .string(accc)
        #expect(try c.send(.add(Self.with(reference, item))).status == 0)
        #expect(try c.send(.update(query: Self.match, changes: ["sync": .bool(true)])).status == KeychainStatus.param.rawValue)
        let found = try c.send(.copyMatching(Self.match.merging(["r_Attributes": .bool(true)]) { $1 }))
        guard case .single(.attributes(let attributes)) = found.result else { Issue.record("\(found)"); return }
        #expect(attributes["sync"] == .int(0))
    }

    /// userPresence beside the password (Apple allows the pair): the person is asked at
    /// keychaind's prompt, then the password opens the secret. Without a password nobody is
    /// asked: the call could not read the secret whatever the person said.
    @Test func withUserPresenceBesideItThePersonIsAskedAndThePasswordStillNeeded() throws {
        let (d, log) = try ItemsThatAskFirstTests.daemon(answers: [ItemsThatAskFirstTests.passcode])
        let c = try RawConnection(d)
        let reference = try Self.context(c)
        var item = Self.item
        item["accc"] = .string("ak;2147483649")
        #expect(try c.send(.add(Self.with(reference, item))).status == 0)
        let bare = try c.createContext()
        #expect(try c.send(.copyMatching(Self.with(bare, Self.secretQuery))).status == KeychainStatus.interactionNotAllowed.rawValue)
        #expect(!ItemsThatAskFirstTests.said(log).contains("GETPIN"))
        #expect(try c.send(.copyMatching(Self.with(reference, Self.secretQuery))).result == Self.secret)
        #expect(ItemsThatAskFirstTests.said(log).components(separatedBy: "GETPIN").count == 2)
    }

    /// The client's AuthenticationContext: the app's own calls, as LAContext.setCredential.
    @Test func theClientsContextCarriesThePassword() throws {
        let d = try Self.daemon()
        let connection = KeychainConnection(socketPath: d.socketPath)
        let context = try AuthenticationContext(connection: connection)
        try context.setApplicationPassword(Self.password)
        try connection.add(context.applied(to: Self.item))
        #expect(try connection.copyMatching(Self.secretQuery, context: context) == Self.secret)
    }
}
