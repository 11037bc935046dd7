import Foundation
import KeychainModel
import KeychainStore
import Testing
@testable import KeychainServer

/// Who is told of which change (op 47): a subscriber learns of an item's change only when it
/// could read the item, whatever it asks.
@Suite("Change notices: who is told")
struct ChangeNoticeTests {
    private static let ref = Array("genp".utf8) + [UInt8](repeating: 7, count: 16)

    private static func itemNotice(group: String, writerPID: Int32 = 10, writerUID: uid_t = 1000) -> ChangeNotice {
        ChangeNotice(what: .item(SecretServiceChange(kind: .created, persistentRef: ref, service: "secret-service:login", accessGroup: group)),
                     writerPID: writerPID, writerUID: writerUID)
    }

    @Test func aSubscriberHoldingTheItemsGroupIsToldItsReferenceAndCollection() {
        let told = ChangeNotices.describe(Self.itemNotice(group: "uid.1000"), subscriberPID: 20, subscriberUID: 1000,
                                          groups: ["uid.1000"], isBridge: false)
        #expect(told?["kind"] == .string("created"))
        #expect(told?["svce"] == .string("secret-service:login"))
        #expect(told?["v_PersistentRef"] == AttributeValue.data(Self.ref))
        #expect(told?["own"] == .bool(false))
    }

    @Test func anotherAppOfTheSameUserWithoutTheGroupIsToldNothing() {
        #expect(ChangeNotices.describe(Self.itemNotice(group: "com.example.mail"), subscriberPID: 20, subscriberUID: 1000,
                                       groups: ["com.example.browser"], isBridge: false) == nil)
    }

    @Test func anotherUsersBridgeIsToldNothingOfThisUsersItems() {
        #expect(ChangeNotices.describe(Self.itemNotice(group: "uid.1000", writerUID: 1000), subscriberPID: 20, subscriberUID: 1001,
                                       groups: ["uid.1001"], isBridge: true) == nil)
    }

    @Test func theBridgeOfTheWritersUserIsToldOfAnyAppsItem() {
        let told = ChangeNotices.describe(Self.itemNotice(group: "com.example.mail", writerUID: 1000), subscriberPID: 20, subscriberUID: 1000,
                                          groups: [], isBridge: true)
        #expect(told?["kind"] == .string("created"))
    }

    @Test func aChangeMadeThroughTheSubscribersOwnProcessIsMarkedOwn() {
        let told = ChangeNotices.describe(Self.itemNotice(group: "uid.1000", writerPID: 20), subscriberPID: 20, subscriberUID: 1000,
                                          groups: ["uid.1000"], isBridge: false)
        #expect(told?["own"] == .bool(true))
    }

    @Test func aLockStateChangeGoesToEverySubscriberAndNamesNoItem() {
        let told = ChangeNotices.describe(ChangeNotice(what: .lockState(locked: true), writerPID: 0, writerUID: 0),
                                          subscriberPID: 20, subscriberUID: 1001, groups: [], isBridge: false)
        #expect(told == ["kind": .string("lock"), "locked": .bool(true)])
    }

    @Test func anotherUsersSubscriberIsNotToldWhenThisUsersLockedItemIsDeleted() {
        let deletedWhileLocked = ChangeNotice(what: .item(SecretServiceChange(kind: .unknown, persistentRef: [], service: "", accessGroup: "uid.1000")),
                                              writerPID: 10, writerUID: 1000)
        #expect(ChangeNotices.describe(deletedWhileLocked, subscriberPID: 20, subscriberUID: 1001,
                                       groups: ["uid.1001"], isBridge: true) == nil)
        #expect(ChangeNotices.describe(deletedWhileLocked, subscriberPID: 21, subscriberUID: 1000,
                                       groups: ["uid.1000"], isBridge: false) == ["kind": .string("unknown")])
    }

    @Test func aSubscriberThatFallsBehindGetsOneUnknownNoticeInsteadOfTheFlood() throws {
        let notices = ChangeNotices()
        let subscription = try notices.subscribe(uid: 1000)
        defer { notices.unsubscribe(subscription) }
        for _ in 0...ChangeNotices.maxPending { notices.publish([Self.itemNotice(group: "uid.1000")]) }
        let queued = subscription.take()
        #expect(queued.count == 1)
        guard case .item(let change)? = queued.first?.what else { Issue.record("not an item notice"); return }
        #expect(change.kind == .unknown)
    }
}
