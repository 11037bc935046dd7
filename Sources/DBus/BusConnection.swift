#if canImport(Glibc)
import Glibc
#endif
internal import CSystemd
import KeychainModel

/// A private connection to a D-Bus message bus, through sd-bus. sd-bus is not thread-safe, so
/// neither is this: the thread that opens it is the one that calls, subscribes and processes
/// its messages. Every C pointer of sd-bus stays in this target (BusServer.swift has the
/// server's half: names, object handlers, replies, signals).
public final class BusConnection {
    public enum Bus: Sendable {
        /// The system bus: $DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket.
        case system
        /// The user's session bus: $DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus.
        case user
    }

    let bus: OpaquePointer
    /// What sd-bus calls back with, by unretained pointer: kept alive as long as the bus.
    var signalHandlers: [SignalHandler] = []
    var objectHandlers: [ObjectHandler] = []

    public init(_ which: Bus) throws(KeychainError) {
        var opened: OpaquePointer?
        let r = switch which {
        case .system: sd_bus_open_system(&opened)
        case .user: sd_bus_open_user(&opened)
        }
        guard r >= 0, let opened else {
            throw Self.failure(r, "cannot connect to the \(which == .system ? "system" : "session") bus", status: .serviceNotAvailable)
        }
        bus = opened
    }

    /// Connects to the bus at a D-Bus `address` ("unix:path=/run/dbus/system_bus_socket").
    public init(address: String) throws(KeychainError) {
        var created: OpaquePointer?
        var r = sd_bus_new(&created)
        guard r >= 0, let created else { throw Self.failure(r, "cannot create a bus connection") }
        r = sd_bus_set_address(created, address)
        if r >= 0 { r = sd_bus_set_bus_client(created, 1) }
        if r >= 0 { r = sd_bus_start(created) }
        guard r >= 0 else {
            sd_bus_unref(created)
            throw Self.failure(r, "cannot connect to the bus at \(address)", status: .serviceNotAvailable)
        }
        bus = created
    }

    deinit {
        sd_bus_flush_close_unref(bus)
    }

    /// This connection's unique name on the bus (":1.42").
    public var uniqueName: String {
        get throws(KeychainError) {
            var name: UnsafePointer<CChar>?
            let r = sd_bus_get_unique_name(bus, &name)
            guard r >= 0, let name else { throw Self.failure(r, "cannot read the bus's unique name") }
            return String(cString: name)
        }
    }

    /// Calls a method and waits for its reply (at most `timeoutMicroseconds`; 0: sd-bus's
    /// default of 25 s). A D-Bus error reply is thrown with its name and message.
    public func call(destination: String, path: String, interface: String, member: String,
                     arguments: [BusValue] = [], timeoutMicroseconds: UInt64 = 0) throws(KeychainError) -> BusMessage {
        switch try answer(destination: destination, path: path, interface: interface, member: member,
                          arguments: arguments, timeoutMicroseconds: timeoutMicroseconds) {
        case .reply(let reply): return reply
        case .error(let name, let text):
            throw KeychainError(.io, "\(destination) \(interface).\(member) failed: \(name): \(text)")
        case .timedOut:
            throw KeychainError(.io, "\(destination) \(interface).\(member) failed: no answer in time")
        }
    }

    /// What a method call came back with, for a caller that tells a service's errors apart by
    /// their names. Failing to send or a lost bus is thrown.
    public enum Answer {
        case reply(BusMessage)
        /// The D-Bus error the call was answered with (the bus's own, such as
        /// org.freedesktop.DBus.Error.ServiceUnknown, or the service's).
        case error(name: String, message: String)
        /// No answer within the call's time.
        case timedOut
    }

    /// Calls a method and waits for its answer (at most `timeoutMicroseconds`; 0: sd-bus's
    /// default of 25 s).
    public func answer(destination: String, path: String, interface: String, member: String,
                       arguments: [BusValue] = [], timeoutMicroseconds: UInt64 = 0) throws(KeychainError) -> Answer {
        var message: OpaquePointer?
        let r = sd_bus_message_new_method_call(bus, &message, destination, path, interface, member)
        guard r >= 0, let message else { throw Self.failure(r, "cannot build a call to \(interface).\(member)") }
        defer { sd_bus_message_unref(message) }
        for argument in arguments { try BusMessage.append(argument, to: message) }
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        var reply: OpaquePointer?
        let status = sd_bus_call(bus, message, timeoutMicroseconds, &error, &reply)
        guard status >= 0, let reply else {
            if status == -ETIMEDOUT { return .timedOut }
            if sd_bus_error_is_set(&error) != 0 {
                return .error(name: error.name.map { String(cString: $0) } ?? "?",
                              message: error.message.map { String(cString: $0) } ?? "")
            }
            throw Self.failure(status, "\(destination) \(interface).\(member) failed")
        }
        defer { sd_bus_message_unref(reply) }
        return .reply(BusMessage(reply))
    }

    /// Calls `handler` for every signal that matches (nil: any). With a well-known `sender`
    /// the bus delivers only signals sent by that name's current owner, so no other client
    /// can pass for it. Handlers run inside `processPending()` and may make calls.
    public func onSignal(sender: String?, path: String?, interface: String?, member: String?,
                         _ handler: @escaping (BusMessage) -> Void) throws(KeychainError) {
        let box = SignalHandler(handler)
        let strings = [sender, path, interface, member].map { $0.map { strdup($0) } ?? nil }
        defer { for s in strings { free(s) } }
        // A nil slot makes the match last as long as the connection; the box does too.
        // The callback returns 0 so that other matches for the same message still run.
        let r = sd_bus_match_signal(bus, nil, strings[0], strings[1], strings[2], strings[3], { message, userdata, _ in
            guard let message, let userdata else { return 0 }
            Unmanaged<SignalHandler>.fromOpaque(userdata).takeUnretainedValue().body(BusMessage(message))
            return 0
        }, Unmanaged.passUnretained(box).toOpaque())
        guard r >= 0 else {
            throw Self.failure(r, "cannot subscribe to \(interface ?? "*").\(member ?? "*") signals")
        }
        signalHandlers.append(box)
    }

    /// Handles every message that has arrived (signal handlers run here), then returns.
    public func processPending() throws(KeychainError) {
        while true {
            let r = sd_bus_process(bus, nil)
            guard r >= 0 else { throw Self.failure(r, "lost the bus connection", status: .serviceNotAvailable) }
            if r == 0 { return }
        }
    }

    /// Blocks until a message may have arrived, or `timeoutMicroseconds` passed (nil: no limit).
    public func waitForMessages(timeoutMicroseconds: UInt64? = nil) throws(KeychainError) {
        let r = sd_bus_wait(bus, timeoutMicroseconds ?? UInt64.max)
        guard r >= 0 || r == -EINTR else { throw Self.failure(r, "lost the bus connection", status: .serviceNotAvailable) }
    }

    static func failure(_ negativeErrno: Int32, _ doing: String, status: KeychainStatus = .io) -> KeychainError {
        KeychainError(status, "\(doing): \(String(cString: strerror(-negativeErrno)))")
    }
}

final class SignalHandler {
    let body: (BusMessage) -> Void
    init(_ body: @escaping (BusMessage) -> Void) { self.body = body }
}

/// A received message (a reply or a signal), read front to back like sd-bus reads it. Holds
/// its own reference, so it may outlive the handler it was given to (on the bus's thread).
public final class BusMessage {
    let message: OpaquePointer

    init(_ message: OpaquePointer) {
        self.message = sd_bus_message_ref(message)
    }

    deinit {
        sd_bus_message_unref(message)
    }

    public var path: String? { sd_bus_message_get_path(message).map { String(cString: $0) } }
    public var interface: String? { sd_bus_message_get_interface(message).map { String(cString: $0) } }
    public var member: String? { sd_bus_message_get_member(message).map { String(cString: $0) } }
    /// The sender's unique name (the bus puts it on every message it delivers).
    public var sender: String? { sd_bus_message_get_sender(message).map { String(cString: $0) } }

    public func readString() throws(KeychainError) -> String { try readText("s") }
    public func readObjectPath() throws(KeychainError) -> String { try readText("o") }

    public func readBool() throws(KeychainError) -> Bool {
        var v: Int32 = 0
        try readBasic("b", &v)
        return v != 0
    }

    public func readUInt32() throws(KeychainError) -> UInt32 {
        var v: UInt32 = 0
        try readBasic("u", &v)
        return v
    }

    public func readInt32() throws(KeychainError) -> Int32 {
        var v: Int32 = 0
        try readBasic("i", &v)
        return v
    }

    public enum Container: Character, Sendable {
        case variant = "v", structure = "r", array = "a", dictionaryEntry = "e"
    }

    /// Steps into a container whose contents have `signature` ("(uo)" for a variant holding
    /// a struct, "uo" for that struct); reads then take its members until `exitContainer()`.
    public func enterContainer(_ kind: Container, signature: String) throws(KeychainError) {
        let r = sd_bus_message_enter_container(message, CChar(kind.rawValue.asciiValue!), signature)
        guard r > 0 else { throw mismatch(r, "a container \(kind.rawValue) of \(signature)") }
    }

    public func exitContainer() throws(KeychainError) {
        let r = sd_bus_message_exit_container(message)
        guard r >= 0 else { throw BusConnection.failure(r, "cannot leave a container of a bus message", status: .decode) }
    }

    func readText(_ type: Character) throws(KeychainError) -> String {
        var text: UnsafePointer<CChar>?
        try readBasic(type, &text)
        guard let text else { throw mismatch(0, "a value of type \(type)") }
        return String(cString: text)
    }

    func readBasic<T>(_ type: Character, _ value: inout T) throws(KeychainError) {
        let r = withUnsafeMutablePointer(to: &value) {
            sd_bus_message_read_basic(message, CChar(type.asciiValue!), $0)
        }
        guard r > 0 else { throw mismatch(r, "a value of type \(type)") }
    }

    func mismatch(_ r: Int32, _ wanted: String) -> KeychainError {
        let what = "\(interface ?? "?").\(member ?? "?")"
        return r < 0 ? BusConnection.failure(r, "\(what): expected \(wanted)", status: .decode)
                     : KeychainError(.decode, "\(what): expected \(wanted), found the end of the message")
    }
}
