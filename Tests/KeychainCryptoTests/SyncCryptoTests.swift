import KeychainModel
import Testing
@testable import KeychainCrypto

/// A small circle for the sync tests: a founder A, members added as a test needs them.
struct SyncTestCircle {
    let a = SyncDeviceIdentity.generate()
    let circleID = SyncCircleID.random()
    var roster: SyncRoster
    var key: SyncCircleKey

    init() {
        roster = .found(circleID: circleID, by: a, time: 1_000)
        key = .random(circleID: circleID, epoch: 1)
    }

    mutating func add(_ device: SyncDeviceIdentity, by signer: SyncDeviceIdentity? = nil) throws {
        try roster.append(roster.signing(.add, subject: device.keys, by: signer ?? a, time: 2_000))
    }

    /// Removes `device` and moves to the next epoch's key, as `keychain sync remove` will.
    mutating func remove(_ device: SyncDeviceIdentity, by signer: SyncDeviceIdentity? = nil) throws {
        try roster.append(roster.signing(.remove, subject: device.keys, by: signer ?? a, time: 3_000))
        key = .random(circleID: circleID, epoch: roster.epoch)
    }
}

private let genp: AttributeDictionary = [
    "class": .string("genp"), "acct": .string("me"), "svce": .string("api"), "labl": .string("label"),
    "agrp": .string("uid.0"), "pdmn": .string("ck"), "sync": .int(1), "cdat": .date(800_000_000),
    "mdat": .date(800_000_001), "v_Data": .data(SecretBytes(Array("tok".utf8))),
]

private func version(counter: Int64 = 1, writer: SyncDeviceIdentity) -> SyncVersion {
    SyncVersion(mdat: 800_000_001_000, writer: writer.id, counter: counter)
}

/// `bytes` with each byte flipped in turn: what a tamper test feeds in.
private func everyFlip(of bytes: [UInt8]) -> [[UInt8]] {
    bytes.indices.map { flipping(bytes, at: $0) }
}

@Suite struct SyncIdentityTests {
    @Test func theIdAndFingerprintComeFromTheHashOfBothPublicKeys() throws {
        let me = SyncDeviceIdentity.generate()
        let again = try SyncDeviceKeys(signPublicKey: me.keys.signPublicKey, agreementPublicKey: me.keys.agreementPublicKey)
        #expect(again == me.keys)
        let other = try SyncDeviceKeys(signPublicKey: me.keys.signPublicKey,
                                       agreementPublicKey: SyncDeviceIdentity.generate().keys.agreementPublicKey)
        #expect(other.id != me.id)
        #expect(other.fingerprint != me.keys.fingerprint)
    }

    @Test func aSignatureVerifiesOnlyForItsMessageAndSigner() {
        let me = SyncDeviceIdentity.generate()
        let message = Array("keychaind/v1/test".utf8)
        let sig = me.sign(message)
        #expect(me.keys.verify(sig, of: message))
        #expect(!me.keys.verify(sig, of: message + [0]))
        #expect(!SyncDeviceIdentity.generate().keys.verify(sig, of: message))
        for flipped in everyFlip(of: sig) { #expect(!me.keys.verify(flipped, of: message)) }
    }

    @Test func theIdentitySealedUnderCKckOpensToTheSameKeys() throws {
        let classKey = SecureKey.random()
        let me = SyncDeviceIdentity.generate()
        let sealed = me.sealed(under: classKey)
        let opened = try SyncDeviceIdentity(opening: sealed, id: me.id, classKey: classKey)
        #expect(opened.keys == me.keys)
        #expect(me.keys.verify(opened.sign([1, 2]), of: [1, 2]))
    }

    @Test func theSealedIdentityRefusesAnotherKeyAnotherIdAndEveryFlippedByte() {
        let classKey = SecureKey.random()
        let me = SyncDeviceIdentity.generate()
        let sealed = me.sealed(under: classKey)
        func status(_ blob: [UInt8], id: SyncDeviceID? = nil, key: SecureKey? = nil) -> KeychainStatus? {
            thrownStatus { () throws(KeychainError) in
                try SyncDeviceIdentity(opening: blob, id: id ?? me.id, classKey: key ?? classKey)
            }
        }
        #expect(status(sealed, key: .random()) == .decode)
        #expect(status(sealed, id: SyncDeviceIdentity.generate().id) == .decode)
        for flipped in everyFlip(of: sealed) { #expect(status(flipped) == .decode) }
    }

    @Test func aSmallOrderAgreementKeyIsRefused() throws {
        let me = SyncDeviceIdentity.generate()
        let zeroPoint = try SyncDeviceKeys(signPublicKey: me.keys.signPublicKey, agreementPublicKey: [UInt8](repeating: 0, count: 32))
        #expect(thrownStatus { () throws(KeychainError) in try me.sharedSecret(with: zeroPoint) } == .decode)
    }
}

@Suite struct SyncCircleKeyTests {
    @Test func everyHolderOfTheCircleKeyComputesTheSameRecordID() throws {
        let circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate()
        let received = try SyncWrappedKey.wrap(circle.key, to: b.keys, by: circle.a)
        var roster = circle.roster
        try roster.append(roster.signing(.add, subject: b.keys, by: circle.a, time: 1))
        let bKey = try received.unwrap(as: b, roster: roster)
        #expect(try bKey.recordID(of: .genericPassword, attributes: genp)
                == circle.key.recordID(of: .genericPassword, attributes: genp))
    }

    @Test func theRecordIDDependsOnlyOnClassAndPrimaryKey() throws {
        let key = SyncTestCircle().key
        let id = try key.recordID(of: .genericPassword, attributes: genp)
        var relabelled = genp
        relabelled["labl"] = .string("another label")
        relabelled["v_Data"] = .data(SecretBytes([9]))
        #expect(try key.recordID(of: .genericPassword, attributes: relabelled) == id)
        var otherAccount = genp
        otherAccount["acct"] = .string("you")
        #expect(try key.recordID(of: .genericPassword, attributes: otherAccount) != id)
        #expect(try key.recordID(of: .internetPassword, attributes: genp) != id)
    }

    @Test func aBlobNumberAndItsDecimalTextAreDifferentItems() throws {
        let key = SyncTestCircle().key
        var number = genp, text = genp
        number["acct"] = .int(42)
        text["acct"] = .string("42")
        #expect(try key.recordID(of: .genericPassword, attributes: number)
                != key.recordID(of: .genericPassword, attributes: text))
    }

    @Test func aMissingPrimaryKeyAttributeCountsAsItsDefault() throws {
        let key = SyncTestCircle().key
        var missing = genp, empty = genp
        missing["svce"] = nil
        empty["svce"] = .string("")
        #expect(try key.recordID(of: .genericPassword, attributes: missing)
                == key.recordID(of: .genericPassword, attributes: empty))
    }

    @Test func recordIDsChangeWithTheEpoch() throws {
        let circle = SyncTestCircle()
        let next = SyncCircleKey.random(circleID: circle.circleID, epoch: 2)
        #expect(try circle.key.recordID(of: .genericPassword, attributes: genp)
                != next.recordID(of: .genericPassword, attributes: genp))
    }

    @Test func theVirtualIdentityClassHasNoRecordID() {
        #expect(thrownStatus { () throws(KeychainError) in try SyncTestCircle().key.recordID(of: .identity, attributes: genp) } == .param)
    }

    @Test func theCircleKeySealedUnderCKckOpensOnlyForItsCircleAndEpoch() throws {
        let classKey = SecureKey.random()
        let key = SyncTestCircle().key
        let sealed = key.sealed(under: classKey)
        let opened = try SyncCircleKey(opening: sealed, circleID: key.circleID, epoch: 1, classKey: classKey)
        #expect(try opened.recordID(of: .genericPassword, attributes: genp) == key.recordID(of: .genericPassword, attributes: genp))
        func status(_ blob: [UInt8], circle: SyncCircleID? = nil, epoch: UInt32 = 1) -> KeychainStatus? {
            thrownStatus { () throws(KeychainError) in
                try SyncCircleKey(opening: blob, circleID: circle ?? key.circleID, epoch: epoch, classKey: classKey)
            }
        }
        #expect(status(sealed, epoch: 2) == .decode)
        #expect(status(sealed, circle: .random()) == .decode)
        for flipped in everyFlip(of: sealed) { #expect(status(flipped) == .decode) }
    }
}

@Suite struct SyncRecordTests {
    let circle = SyncTestCircle()

    private func openStatus(_ header: SyncRecordHeader, _ body: [UInt8], key: SyncCircleKey? = nil) -> KeychainStatus? {
        thrownStatus { () throws(KeychainError) in try SyncRecordSealer.open(header, body: body, circleKey: key ?? circle.key) }
    }

    @Test func aSealedItemOpensToItsClassProtectionAndEveryAttribute() throws {
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .afterFirstUnlock, genp,
                                                       version: version(writer: circle.a), circleKey: circle.key)
        #expect(header.recordID == (try circle.key.recordID(of: .genericPassword, attributes: genp)))
        #expect(!header.tombstone && header.epoch == 1)
        #expect(try SyncRecordSealer.open(header, body: body, circleKey: circle.key) == .item(.genericPassword, .afterFirstUnlock, genp))
    }

    @Test func theBodyIsPaddedToABucketOf256Bytes() throws {
        var big = genp
        big["v_Data"] = .data(SecretBytes([UInt8](repeating: 7, count: 300)))
        for attributes in [genp, big] {
            let (_, body) = try SyncRecordSealer.seal(.genericPassword, .whenUnlocked, attributes,
                                                      version: version(writer: circle.a), circleKey: circle.key)
            #expect((body.count - AEAD.nonceBytes - AEAD.tagBytes) % 256 == 0)
        }
    }

    @Test func everyFlippedByteOfTheBodyIsRejected() throws {
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .always, genp,
                                                       version: version(writer: circle.a), circleKey: circle.key)
        for flipped in everyFlip(of: body) { #expect(openStatus(header, flipped) == .decode) }
        #expect(openStatus(header, Array(body.dropLast())) == .decode)
        #expect(openStatus(header, []) == .decode)
    }

    @Test func everyEditedClearColumnIsRejected() throws {
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .always, genp,
                                                       version: version(counter: 5, writer: circle.a), circleKey: circle.key)
        var edits: [SyncRecordHeader] = []
        for i in header.recordID.indices { var h = header; h.recordID = flipping(h.recordID, at: i); edits.append(h) }
        var h = header
        h.version.mdat += 1; edits.append(h)
        h = header; h.version.counter -= 1; edits.append(h)
        h = header; h.version.writer = SyncDeviceIdentity.generate().id; edits.append(h)
        h = header; h.tombstone = true; edits.append(h)
        h = header; h.circleID = .random(); edits.append(h)
        for edited in edits { #expect(openStatus(edited, body) == .decode) }
    }

    @Test func aBodyMovedToAnotherItemsRowIsRejected() throws {
        var other = genp
        other["acct"] = .string("someone else")
        let (header, _) = try SyncRecordSealer.seal(.genericPassword, .always, other, version: version(writer: circle.a), circleKey: circle.key)
        let (_, body) = try SyncRecordSealer.seal(.genericPassword, .always, genp, version: version(writer: circle.a), circleKey: circle.key)
        #expect(openStatus(header, body) == .decode)
    }

    @Test func anItemWhoseAttributesDoNotGiveTheRowsRecordIDIsRejected() throws {
        // A member sealing under the right key but for the wrong row: the AEAD passes, the
        // record id recomputed from the opened attributes does not.
        let (right, _) = try SyncRecordSealer.seal(.genericPassword, .always, genp, version: version(writer: circle.a), circleKey: circle.key)
        var header = right
        header.recordID = [UInt8](repeating: 0xAB, count: 32)
        var w = ByteWriter()
        w.u8(1); w.u8(1); w.u8(Protection.always.keyClassNumber)
        AttributeCodec.encode(genp, into: &w)
        w.u8(0x80)
        while w.count % 256 != 0 { w.u8(0) }
        let body = AEAD.seal(w.finish(), associatedData: header.associatedData, key: circle.key.recordSealKey)
        #expect(openStatus(header, body) == .decode)
    }

    @Test func aRecordOfAnotherEpochIsRejectedEvenUnderItsOwnKey() throws {
        let old = circle.key
        let next = SyncCircleKey.random(circleID: circle.circleID, epoch: 2)
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .always, genp, version: version(writer: circle.a), circleKey: old)
        #expect(openStatus(header, body, key: next) == .decode)
        var relabelled = header
        relabelled.epoch = 2
        #expect(openStatus(relabelled, body, key: next) == .decode)
    }

    @Test func aRemovedDevicesWritesUnderTheOldKeyAreRejectedAfterRotation() throws {
        var circle = self.circle
        let c = SyncDeviceIdentity.generate()
        try circle.add(c)
        let keyCStillHolds = circle.key
        try circle.remove(c)
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .always, genp,
                                                       version: version(counter: 99, writer: c), circleKey: keyCStillHolds)
        #expect(openStatus(header, body, key: circle.key) == .decode)
    }

    @Test(arguments: [Protection.whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly, .alwaysThisDeviceOnly, .whenPasscodeSetThisDeviceOnly])
    func aThisDeviceOnlyItemIsNeverSealedForTheCircle(protection: Protection) {
        #expect(thrownStatus { () throws(KeychainError) in
            try SyncRecordSealer.seal(.genericPassword, protection, genp, version: version(writer: circle.a), circleKey: circle.key)
        } == .param)
    }

    @Test func anItemWithoutSyncOneIsNeverSealedForTheCircle() {
        for sync in [AttributeValue.int(0), nil] {
            var attributes = genp
            attributes["sync"] = sync
            #expect(thrownStatus { () throws(KeychainError) in
                try SyncRecordSealer.seal(.genericPassword, .always, attributes, version: version(writer: circle.a), circleKey: circle.key)
            } == .param)
        }
    }

    @Test func aTombstoneOpensToItsClassAndCannotPassForAnItem() throws {
        let id = try circle.key.recordID(of: .internetPassword, attributes: genp)
        let (header, body) = SyncRecordSealer.sealTombstone(.internetPassword, recordID: id,
                                                            version: version(writer: circle.a), circleKey: circle.key)
        #expect(header.tombstone)
        #expect(body.count == AEAD.nonceBytes + 256 + AEAD.tagBytes)
        #expect(try SyncRecordSealer.open(header, body: body, circleKey: circle.key) == .tombstone(.internetPassword))
        var live = header
        live.tombstone = false
        #expect(openStatus(live, body) == .decode)
        for flipped in everyFlip(of: body) { #expect(openStatus(header, flipped) == .decode) }
    }
}

@Suite struct SyncRosterTests {
    @Test func aFoundedRosterHasItsFounderAsTheOnlyMemberInEpochOne() {
        let circle = SyncTestCircle()
        #expect(circle.roster.length == 1)
        #expect(circle.roster.epoch == 1)
        #expect(Array(circle.roster.members.keys) == [circle.a.id])
    }

    @Test func aMemberAddsADeviceAndAnyoneVerifiesTheChainFromEntryZero() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate(), c = SyncDeviceIdentity.generate()
        try circle.add(b)
        try circle.add(c, by: b)
        let copy = try SyncRoster(verifying: circle.roster.entries)
        #expect(Set(copy.members.keys) == [circle.a.id, b.id, c.id])
        #expect(copy.hash == circle.roster.hash)
        #expect(copy.circleFingerprint == circle.roster.circleFingerprint)
    }

    @Test func anEntryDecodesToItselfAndIs161Bytes() throws {
        var circle = SyncTestCircle()
        try circle.add(SyncDeviceIdentity.generate())
        for signed in circle.roster.entries {
            #expect(signed.entry.encoded.count == 161)
            #expect(try SyncRosterEntry(decoding: signed.entry.encoded) == signed.entry)
        }
    }

    @Test func everyFlippedByteOfAnEntryOrItsSignatureIsRejected() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate()
        try circle.add(b)
        let added = circle.roster.entries[1]
        for flipped in everyFlip(of: added.entry.encoded) {
            let status = thrownStatus { () throws(KeychainError) in
                try SyncRoster(verifying: [circle.roster.entries[0], SignedRosterEntry(entry: SyncRosterEntry(decoding: flipped), signature: added.signature)])
            }
            #expect(status == .decode)
        }
        for flipped in everyFlip(of: added.signature) {
            #expect(thrownStatus { () throws(KeychainError) in
                try SyncRoster(verifying: [circle.roster.entries[0], SignedRosterEntry(entry: added.entry, signature: flipped)])
            } == .decode)
        }
    }

    @Test func theStoreCannotAddAMemberItSignsForItself() throws {
        let circle = SyncTestCircle()
        let intruder = SyncDeviceIdentity.generate()
        #expect(thrownStatus { () throws(KeychainError) in try circle.roster.signing(.add, subject: intruder.keys, by: intruder, time: 1) } == .param)
        // Nor by putting a member's id on its own signature.
        var entry = try circle.roster.signing(.add, subject: intruder.keys, by: circle.a, time: 1)
        entry.signature = intruder.sign(entry.entry.signedMessage)
        var roster = circle.roster
        #expect(thrownStatus { () throws(KeychainError) in try roster.append(entry) } == .decode)
    }

    @Test func aRemovalStartsTheNextEpochAndTheRemovedDeviceSignsNothingMore() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate(), c = SyncDeviceIdentity.generate()
        try circle.add(b)
        try circle.add(c)
        try circle.remove(c, by: b)
        #expect(circle.roster.epoch == 2)
        #expect(circle.roster.members[c.id] == nil)
        #expect(thrownStatus { () throws(KeychainError) in
            try circle.roster.signing(.add, subject: SyncDeviceIdentity.generate().keys, by: c, time: 9)
        } == .param)
        #expect(thrownStatus { () throws(KeychainError) in try circle.roster.signing(.remove, subject: b.keys, by: c, time: 9) } == .param)
    }

    @Test func aLeaveAwaitsARotationThatOnlyOneMemberPerforms() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate(), c = SyncDeviceIdentity.generate()
        try circle.add(b)
        try circle.add(c)
        try circle.roster.append(circle.roster.signing(.leave, subject: c.keys, by: c, time: 5))
        #expect(circle.roster.members[c.id] == nil)
        #expect(circle.roster.awaitingRotation == [c.id])
        #expect(circle.roster.epoch == 1)
        let rotation = try circle.roster.signing(.remove, subject: c.keys, by: b, time: 6)
        let racing = try circle.roster.signing(.remove, subject: c.keys, by: circle.a, time: 6)
        try circle.roster.append(rotation)
        #expect(circle.roster.epoch == 2 && circle.roster.awaitingRotation.isEmpty)
        // The second member to see the leave finds the rotation there: its entry is refused.
        #expect(thrownStatus { () throws(KeychainError) in try circle.roster.append(racing) } == .decode)
    }

    @Test func aMemberCannotLeaveInAnothersName() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate()
        try circle.add(b)
        #expect(thrownStatus { () throws(KeychainError) in try circle.roster.signing(.leave, subject: b.keys, by: circle.a, time: 5) } == .param)
    }

    @Test func aStoreCopyThatDisagreesWithAVerifiedEntryIsAFork() throws {
        var circle = SyncTestCircle()
        try circle.add(SyncDeviceIdentity.generate())
        var mine = circle.roster
        // The store shows another history from entry 1 on, though validly signed by a member.
        var other = SyncTestCircle()
        other.roster = try SyncRoster(verifying: [circle.roster.entries[0]])
        try other.roster.append(other.roster.signing(.add, subject: SyncDeviceIdentity.generate().keys, by: circle.a, time: 7))
        #expect(thrownStatus { () throws(KeychainError) in try mine.extend(with: other.roster.entries) } == .decode)
        #expect(mine.length == 2)
    }

    @Test func aLongerStoreCopyExtendsTheVerifiedRoster() throws {
        var circle = SyncTestCircle()
        var mine = circle.roster
        try circle.add(SyncDeviceIdentity.generate())
        try mine.extend(with: circle.roster.entries)
        #expect(mine.length == 2 && mine.hash == circle.roster.hash)
    }

    @Test func entriesOutOfOrderOrOfAnotherCircleAreRejected() throws {
        var a = SyncTestCircle()
        let b = SyncDeviceIdentity.generate()
        try a.add(b)
        #expect(thrownStatus { () throws(KeychainError) in try SyncRoster(verifying: [a.roster.entries[1]]) } == .decode)
        #expect(thrownStatus { () throws(KeychainError) in try SyncRoster(verifying: [a.roster.entries[0], a.roster.entries[0]]) } == .decode)
        let elsewhere = SyncRoster.found(circleID: .random(), by: a.a, time: 1)
        #expect(thrownStatus { () throws(KeychainError) in try SyncRoster(verifying: [elsewhere.entries[0], a.roster.entries[1]]) } == .decode)
    }
}

@Suite struct SyncKeyWrapTests {
    @Test func theApprovedDeviceUnwrapsTheCircleKey() throws {
        var circle = SyncTestCircle()
        let n = SyncDeviceIdentity.generate()
        try circle.add(n)
        let wrap = try SyncWrappedKey.wrap(circle.key, to: n.keys, by: circle.a)
        let key = try wrap.unwrap(as: n, roster: circle.roster)
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .always, genp, version: version(writer: circle.a), circleKey: circle.key)
        #expect(try SyncRecordSealer.open(header, body: body, circleKey: key) == .item(.genericPassword, .always, genp))
    }

    @Test func onlyTheRecipientUnwraps() throws {
        var circle = SyncTestCircle()
        let n = SyncDeviceIdentity.generate(), m = SyncDeviceIdentity.generate()
        try circle.add(n)
        try circle.add(m)
        let wrap = try SyncWrappedKey.wrap(circle.key, to: n.keys, by: circle.a)
        #expect(thrownStatus { () throws(KeychainError) in try wrap.unwrap(as: m, roster: circle.roster) } == .decode)
        var readdressed = wrap
        readdressed.recipient = m.id
        #expect(thrownStatus { () throws(KeychainError) in try readdressed.unwrap(as: m, roster: circle.roster) } == .decode)
    }

    @Test func everyFlippedByteOfTheWrapOrItsSignatureIsRejected() throws {
        var circle = SyncTestCircle()
        let n = SyncDeviceIdentity.generate()
        try circle.add(n)
        let wrap = try SyncWrappedKey.wrap(circle.key, to: n.keys, by: circle.a)
        for flipped in everyFlip(of: wrap.wrapped) {
            var w = wrap; w.wrapped = flipped
            #expect(thrownStatus { () throws(KeychainError) in try w.unwrap(as: n, roster: circle.roster) } == .decode)
        }
        for flipped in everyFlip(of: wrap.signature) {
            var w = wrap; w.signature = flipped
            #expect(thrownStatus { () throws(KeychainError) in try w.unwrap(as: n, roster: circle.roster) } == .decode)
        }
    }

    @Test func aWrapByARemovedDeviceIsRefused() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate(), c = SyncDeviceIdentity.generate()
        try circle.add(b)
        try circle.add(c)
        try circle.remove(c)
        // c learned nothing of epoch 2, but even a wrap of a key it made up is not accepted.
        let forged = try SyncWrappedKey.wrap(.random(circleID: circle.circleID, epoch: 2), to: b.keys, by: c)
        #expect(thrownStatus { () throws(KeychainError) in try forged.unwrap(as: b, roster: circle.roster) } == .decode)
    }

    @Test func aRemovedDeviceCannotUnwrapTheNewEpochsKey() throws {
        var circle = SyncTestCircle()
        let b = SyncDeviceIdentity.generate(), c = SyncDeviceIdentity.generate()
        try circle.add(b)
        try circle.add(c)
        let oldWrapToC = try SyncWrappedKey.wrap(circle.key, to: c.keys, by: circle.a)
        try circle.remove(c)
        let toB = try SyncWrappedKey.wrap(circle.key, to: b.keys, by: circle.a)
        #expect(try toB.unwrap(as: b, roster: circle.roster).epoch == 2)
        var readdressed = toB
        readdressed.recipient = c.id
        #expect(thrownStatus { () throws(KeychainError) in try readdressed.unwrap(as: c, roster: circle.roster) } == .decode)
        // Nor is its old epoch's key any use once the roster has moved on.
        #expect(thrownStatus { () throws(KeychainError) in try oldWrapToC.unwrap(as: c, roster: circle.roster) } == .decode)
    }
}

@Suite struct SyncHeadTests {
    @Test func aMembersHeadVerifiesToItsPosition() throws {
        let circle = SyncTestCircle()
        let head = SyncHead.signed(by: circle.a, counter: 42, roster: circle.roster)
        #expect(try head.verify(roster: circle.roster) == SyncHeadPosition(counter: 42, rosterLength: 1))
    }

    @Test func anEditedHeadIsRejected() throws {
        var circle = SyncTestCircle()
        try circle.add(SyncDeviceIdentity.generate())
        let head = SyncHead.signed(by: circle.a, counter: 42, roster: circle.roster)
        var edits: [SyncHead] = []
        var h = head; h.counter = 43; edits.append(h)
        h = head; h.rosterLength = 1; edits.append(h)
        h = head; h.epoch = 0; edits.append(h)
        for flipped in everyFlip(of: head.signature) { h = head; h.signature = flipped; edits.append(h) }
        for flipped in everyFlip(of: head.rosterHash) { h = head; h.rosterHash = flipped; edits.append(h) }
        for edited in edits {
            #expect(thrownStatus { () throws(KeychainError) in try edited.verify(roster: circle.roster) } == .decode)
        }
    }

    @Test func aRemovedDevicesHeadIsRejected() throws {
        var circle = SyncTestCircle()
        let c = SyncDeviceIdentity.generate()
        try circle.add(c)
        let before = circle.roster
        try circle.remove(c)
        let head = SyncHead.signed(by: c, counter: 1_000, roster: before)
        #expect(thrownStatus { () throws(KeychainError) in try head.verify(roster: circle.roster) } == .decode)
    }

    @Test func aHeadOverAnotherRosterOfTheSameLengthIsAFork() throws {
        var mine = SyncTestCircle()
        try mine.add(SyncDeviceIdentity.generate())
        var theirs = try SyncRoster(verifying: [mine.roster.entries[0]])
        try theirs.append(theirs.signing(.add, subject: SyncDeviceIdentity.generate().keys, by: mine.a, time: 8))
        let head = SyncHead.signed(by: mine.a, counter: 3, roster: theirs)
        #expect(thrownStatus { () throws(KeychainError) in try head.verify(roster: mine.roster) } == .decode)
    }

    @Test func aHeadOverALongerRosterPassesForThePartitionCheck() throws {
        var circle = SyncTestCircle()
        let mine = circle.roster
        try circle.add(SyncDeviceIdentity.generate())
        let head = SyncHead.signed(by: circle.a, counter: 3, roster: circle.roster)
        #expect(try head.verify(roster: mine).rosterLength == 2)
    }
}

@Suite struct SyncJoinRequestTests {
    let circleID = SyncCircleID.random()
    let newDevice = SyncDeviceIdentity.generate()

    @Test func theApproverFindsTheRequestByTheFingerprintTypedFromTheNewDevice() throws {
        let request = try SyncJoinRequest.signed(by: newDevice, circleID: circleID, name: "laptop")
        #expect(request.isSigned(by: try SyncFingerprint(typed: newDevice.keys.fingerprint.description), for: circleID))
        #expect(!request.isSigned(by: SyncDeviceIdentity.generate().keys.fingerprint, for: circleID))
        #expect(!request.isSigned(by: newDevice.keys.fingerprint, for: .random()))
    }

    @Test func aRequestWithItsNameKeysOrSignatureChangedIsNotTheDevices() throws {
        let request = try SyncJoinRequest.signed(by: newDevice, circleID: circleID, name: "laptop")
        let fingerprint = newDevice.keys.fingerprint
        var renamed = request
        renamed.name = "laptop2"
        #expect(!renamed.isSigned(by: fingerprint, for: circleID))
        // The store's own keys under the device's signature: another fingerprint, and no match.
        var swapped = request
        swapped.device = try SyncDeviceKeys(signPublicKey: newDevice.keys.signPublicKey,
                                            agreementPublicKey: SyncDeviceIdentity.generate().keys.agreementPublicKey)
        #expect(!swapped.isSigned(by: fingerprint, for: circleID))
        for flipped in everyFlip(of: request.signature) {
            var r = request
            r.signature = flipped
            #expect(!r.isSigned(by: fingerprint, for: circleID))
        }
    }

    @Test func aNameOver64BytesIsParam() {
        #expect(thrownStatus { () throws(KeychainError) in
            try SyncJoinRequest.signed(by: newDevice, circleID: circleID, name: String(repeating: "é", count: 33))
        } == .param)
    }
}
