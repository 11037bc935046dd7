@testable import SecretService
import Testing

/// The paths the bridge serves and what each names (Sources/SecretService/SecretObjectPath.swift).
@Suite("Secret Service object paths")
struct SecretObjectPathTests {
    let id = "0123456789abcdef0123456789abcdef"

    @Test func theRootIsTheService() throws {
        #expect(try SecretObjectPath("/org/freedesktop/secrets") == .service)
    }

    @Test func sessionAndPromptPathsAreKeptWhole() throws {
        #expect(try SecretObjectPath("/org/freedesktop/secrets/session/s7") == .session("/org/freedesktop/secrets/session/s7"))
        #expect(try SecretObjectPath("/org/freedesktop/secrets/prompt/p3") == .prompt("/org/freedesktop/secrets/prompt/p3"))
    }

    @Test func aCollectionAndItsItemsAreNamedByTheirElements() throws {
        #expect(try SecretObjectPath("/org/freedesktop/secrets/collection/login") == .collection(.login))
        #expect(try SecretObjectPath("/org/freedesktop/secrets/collection/session/\(id)") == .item(.session, id: id))
        let created = ItemID(hex: id)!
        #expect(try SecretObjectPath("/org/freedesktop/secrets/collection/c\(id)/5") == .item(.created(created), id: "5"))
    }

    @Test func anAliasResolvesThroughTheLookupGiven() throws {
        #expect(try SecretObjectPath("/org/freedesktop/secrets/aliases/default") == .collection(.login))
        #expect(try SecretObjectPath("/org/freedesktop/secrets/aliases/default/\(id)") == .item(.login, id: id))
        #expect(try SecretObjectPath("/org/freedesktop/secrets/aliases/work", alias: { $0 == "work" ? .session : nil }) == .collection(.session))
        #expect(try SecretObjectPath("/org/freedesktop/secrets/aliases/other") == nil)
    }

    @Test func emptyOrExtraElementsAndUnknownCollectionsNameNothing() throws {
        for path in ["/org/freedesktop/secrets/collection/", "/org/freedesktop/secrets/collection/login/",
                     "/org/freedesktop/secrets/collection/login/a/b", "/org/freedesktop/secrets/collection/cnothex",
                     "/org/freedesktop/secrets/collection/other", "/org/freedesktop/secrets/aliases/",
                     "/org/freedesktop/secrets/aliases/default/", "/org/freedesktop/secrets/other", "/org/freedesktop/secret", "/"] {
            #expect(try SecretObjectPath(path) == nil, "\(path)")
        }
    }
}
