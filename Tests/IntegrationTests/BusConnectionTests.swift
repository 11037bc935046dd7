import DBus
import Foundation
import KeychainModel
import Testing

/// BusConnection, the sd-bus wrapper, against a private bus: calls, their errors and signals.
@Suite("D-Bus connection")
struct BusConnectionTests {
    @Test func aCallReturnsItsReply() throws {
        let bus = try PrivateSystemBus()
        let connection = try BusConnection(address: bus.address)
        let reply = try connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                        interface: "org.freedesktop.DBus", member: "GetConnectionUnixUser",
                                        arguments: [.string(try connection.uniqueName)])
        #expect(try reply.readUInt32() == getuid())
    }

    @Test func anErrorReplyIsThrownWithItsName() throws {
        let bus = try PrivateSystemBus()
        let connection = try BusConnection(address: bus.address)
        do {
            _ = try connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                    interface: "org.freedesktop.DBus", member: "GetNameOwner",
                                    arguments: [.string("org.example.Nobody")])
            Issue.record("GetNameOwner of a name nobody owns succeeded")
        } catch {
            #expect(error.message.contains("org.freedesktop.DBus.Error.NameHasNoOwner"))
        }
    }

    @Test func aSignalMatchCallsItsHandlerWithTheArguments() throws {
        let bus = try PrivateSystemBus()
        let connection = try BusConnection(address: bus.address)
        var sleeping: [Bool] = []
        try connection.onSignal(sender: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                                interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep") {
            sleeping.append((try? $0.readBool()) ?? false)
        }
        let login1 = try FakeLogin1(on: bus, sessions: [:])
        login1.prepareForSleep(true)
        try waitUntil(timeout: 10, "the signal") {
            try connection.processPending()
            try connection.waitForMessages(timeoutMicroseconds: 20_000)
            return !sleeping.isEmpty
        }
        #expect(sleeping == [true])
    }

    @Test func noBusIsServiceNotAvailable() {
        do {
            _ = try BusConnection(address: "unix:path=/nonexistent/system_bus_socket")
            Issue.record("connected to a bus that does not exist")
        } catch {
            #expect(error.status == .serviceNotAvailable)
        }
    }
}
