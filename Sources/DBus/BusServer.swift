#if canImport(Glibc)
import Glibc
#endif
internal import CSystemd
import KeychainModel

/// What a bus said to a name request.
public enum NameRequestResult: Sendable, Equatable {
    case acquired
    /// Another connection owns it and did not let it go (it does not allow replacement, or we
    /// did not ask to replace it).
    case taken
}

/// What the bus recorded about a connection when it connected (GetConnectionCredentials).
public struct BusCredentials: Sendable {
    public let uid: UInt32?
    public let pid: UInt32?
    /// A pidfd of the process, where the bus offers one (dbus ≥ 1.15.8, dbus-broker; not
    /// bookworm's dbus-daemon). A duplicate the caller owns and must close.
    public let processFD: Int32?
}

/// The server's half of a bus connection: owning names, answering method calls, sending signals.
extension BusConnection {
    /// Asks for a well-known name. `replaceExisting` takes it from an owner that allows
    /// replacement; `allowReplacement` lets a later `replaceExisting` take it from us (we then
    /// get NameLost). Never queues. sd-bus's own flag values, not the wire's.
    public func requestName(_ name: String, replaceExisting: Bool, allowReplacement: Bool) throws(KeychainError) -> NameRequestResult {
        var flags: UInt64 = 0
        if replaceExisting { flags |= UInt64(SD_BUS_NAME_REPLACE_EXISTING) }
        if allowReplacement { flags |= UInt64(SD_BUS_NAME_ALLOW_REPLACEMENT) }
        let r = sd_bus_request_name(bus, name, flags)
        if r == -EEXIST { return .taken }
        guard r >= 0 else { throw Self.failure(r, "cannot request the bus name \(name)") }
        return .acquired
    }

    /// Calls `handler` for every method call to `prefix` or a path below it. The handler
    /// returns whether it answered (with `reply` or `replyError`); if not, sd-bus answers
    /// (UnknownMethod, UnknownObject, its generic Introspect).
    public func addFallback(_ prefix: String, _ handler: @escaping (BusMessage) -> Bool) throws(KeychainError) {
        let box = ObjectHandler(handler)
        let r = sd_bus_add_fallback(bus, nil, prefix, { message, userdata, _ in
            guard let message, let userdata else { return 0 }
            return Unmanaged<ObjectHandler>.fromOpaque(userdata).takeUnretainedValue().body(BusMessage(message)) ? 1 : 0
        }, Unmanaged.passUnretained(box).toOpaque())
        guard r >= 0 else { throw Self.failure(r, "cannot serve \(prefix)") }
        objectHandlers.append(box)
    }

    /// Sends the method return for `call` with `values` as its body.
    public func reply(to call: BusMessage, _ values: [BusValue]) throws(KeychainError) {
        var reply: OpaquePointer?
        let r = sd_bus_message_new_method_return(call.message, &reply)
        guard r >= 0, let reply else { throw Self.failure(r, "cannot build a reply") }
        defer { sd_bus_message_unref(reply) }
        // Marked before the secret goes in: sd-bus then erases the message's memory when the
        // last reference (ours, or its write queue's) goes.
        if values.contains(where: \.holdsSecret) { _ = sd_bus_message_sensitive(reply) }
        for value in values { try BusMessage.append(value, to: reply) }
        let sent = sd_bus_send(bus, reply, nil)
        guard sent >= 0 else { throw Self.failure(sent, "cannot send a reply") }
    }

    /// Sends an error reply for `call`: a D-Bus error `name` ("org.freedesktop.Secret.Error.NoSession")
    /// and a message for people.
    public func replyError(to call: BusMessage, name: String, message: String) throws(KeychainError) {
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        _ = sd_bus_error_set(&error, name, message)
        let r = sd_bus_reply_method_error(call.message, &error)
        guard r >= 0 else { throw Self.failure(r, "cannot send an error reply") }
    }

    /// Sends a signal from `path`: broadcast, or with a `destination` only to that connection.
    public func emitSignal(path: String, interface: String, member: String, _ values: [BusValue],
                           destination: String? = nil) throws(KeychainError) {
        var signal: OpaquePointer?
        let r = sd_bus_message_new_signal(bus, &signal, path, interface, member)
        guard r >= 0, let signal else { throw Self.failure(r, "cannot build the signal \(interface).\(member)") }
        defer { sd_bus_message_unref(signal) }
        if let destination {
            let set = sd_bus_message_set_destination(signal, destination)
            guard set >= 0 else { throw Self.failure(set, "cannot address the signal \(interface).\(member)") }
        }
        for value in values { try BusMessage.append(value, to: signal) }
        let sent = sd_bus_send(bus, signal, nil)
        guard sent >= 0 else { throw Self.failure(sent, "cannot send the signal \(interface).\(member)") }
    }

    /// The bus's record of the connection `name` (a unique name): uid, pid and, where offered,
    /// a pidfd. Read from the a{sv} itself: sd-bus 252's creds API has no pidfd.
    public func credentials(of name: String) throws(KeychainError) -> BusCredentials {
        let reply = try call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                             interface: "org.freedesktop.DBus", member: "GetConnectionCredentials",
                             arguments: [.string(name)])
        let fields = try reply.readValue().variantDictionaryValue ?? [:]
        var processFD: Int32?
        if case .fileDescriptor(let fd)? = fields["ProcessFD"] { processFD = fd }
        return BusCredentials(uid: fields["UnixUserID"]?.uint32Value, pid: fields["ProcessID"]?.uint32Value,
                              processFD: processFD)
    }

    /// The descriptor to poll for this connection (with `pollEvents`), for a loop that also
    /// waits on other descriptors.
    public var fileDescriptor: Int32 { sd_bus_get_fd(bus) }

    /// The poll(2) events sd-bus waits for now.
    public var pollEvents: Int16 { Int16(truncatingIfNeeded: sd_bus_get_events(bus)) }

    /// When sd-bus next needs `processPending` even without input (CLOCK_MONOTONIC µs; nil: never).
    public var nextTimeout: UInt64? {
        var usec: UInt64 = 0
        guard sd_bus_get_timeout(bus, &usec) >= 0, usec != UInt64.max else { return nil }
        return usec
    }
}

final class ObjectHandler {
    let body: (BusMessage) -> Bool
    init(_ body: @escaping (BusMessage) -> Bool) { self.body = body }
}

extension BusMessage {
    /// Whether this is a method call (not a reply, error or signal).
    public var isMethodCall: Bool {
        var type: UInt8 = 0
        return sd_bus_message_get_type(message, &type) >= 0 && type == UInt8(SD_BUS_MESSAGE_METHOD_CALL)
    }

    /// The body's whole signature ("a{sv}(oayays)b").
    public var signature: String { sd_bus_message_get_signature(message, 1).map { String(cString: $0) } ?? "" }

    /// Has sd-bus erase this message's memory when it is freed: a call that may carry a
    /// secret in, since the bridge cannot tell before reading it.
    public func markSensitive() {
        _ = sd_bus_message_sensitive(message)
    }

    /// Whether every value of the body (or of the container being read) has been read.
    public var atEnd: Bool { sd_bus_message_at_end(message, 0) > 0 }

    /// `ay` into wiped memory (for secrets).
    public func readSecretBytes() throws(KeychainError) -> SecretBytes {
        var pointer: UnsafeRawPointer?
        var size = 0
        let r = sd_bus_message_read_array(message, CChar(UInt8(ascii: "y")), &pointer, &size)
        guard r > 0 else { throw mismatch(r, "a byte array") }
        guard let pointer, size > 0 else { return .empty }
        let secret = SecretBytes(UnsafeRawBufferPointer(start: pointer, count: size))
        // sd-bus hands out a pointer into the received message's own buffer; nothing reads
        // these bytes again, so they are wiped there at once rather than left to whenever (and
        // whether) sd-bus erases the message.
        explicit_bzero(UnsafeMutableRawPointer(mutating: pointer), size)
        return secret
    }

    /// `ay` that is not secret.
    public func readBytes() throws(KeychainError) -> [UInt8] {
        var pointer: UnsafeRawPointer?
        var size = 0
        let r = sd_bus_message_read_array(message, CChar(UInt8(ascii: "y")), &pointer, &size)
        guard r > 0 else { throw mismatch(r, "a byte array") }
        guard let pointer, size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: size))
    }

    /// The next value, whatever its type (containers whole). `ay` comes as `.bytes`: read a
    /// secret with `readSecretBytes` instead.
    public func readValue() throws(KeychainError) -> BusValue {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        let r = sd_bus_message_peek_type(message, &type, &contents)
        guard r > 0 else { throw mismatch(r, "a value") }
        let inner = contents.map { String(cString: $0) } ?? ""
        switch UInt8(bitPattern: type) {
        case UInt8(ascii: "s"): return .string(try readString())
        case UInt8(ascii: "o"): return .objectPath(try readObjectPath())
        case UInt8(ascii: "g"): return .string(try readText("g"))
        case UInt8(ascii: "b"): return .bool(try readBool())
        case UInt8(ascii: "y"):
            var v: UInt8 = 0
            try readBasic("y", &v)
            return .byte(v)
        case UInt8(ascii: "i"): return .int32(try readInt32())
        case UInt8(ascii: "u"): return .uint32(try readUInt32())
        case UInt8(ascii: "t"):
            var v: UInt64 = 0
            try readBasic("t", &v)
            return .uint64(v)
        case UInt8(ascii: "h"):
            var fd: Int32 = -1
            try readBasic("h", &fd)
            let copy = fcntl(fd, F_DUPFD_CLOEXEC, 3)
            guard copy >= 0 else { throw SystemCallError.current("fcntl").keychainError("cannot keep a file descriptor from the bus") }
            return .fileDescriptor(copy)
        case UInt8(ascii: "a"):
            if inner == "y" { return .bytes(try readBytes()) }
            try enterContainer(.array, signature: inner)
            var elements: [BusValue] = []
            while !atEnd { elements.append(try readValue()) }
            try exitContainer()
            return .array(element: inner, elements)
        case UInt8(ascii: "e"):
            try enterContainer(.dictionaryEntry, signature: inner)
            let key = try readValue()
            let value = try readValue()
            try exitContainer()
            return .entry(key, value)
        case UInt8(ascii: "r"):
            try enterContainer(.structure, signature: inner)
            var members: [BusValue] = []
            while !atEnd { members.append(try readValue()) }
            try exitContainer()
            return .structure(members)
        case UInt8(ascii: "v"):
            try enterContainer(.variant, signature: inner)
            let value = try readValue()
            try exitContainer()
            return .variant(value)
        default:
            // A type nobody here sends (n, q, x, d): skipped, so the caller can read on.
            let skipped = sd_bus_message_skip(message, String(UnicodeScalar(UInt8(bitPattern: type))))
            guard skipped >= 0 else { throw mismatch(skipped, "a value") }
            return .variant(.structure([]))
        }
    }

    static func append(_ value: BusValue, to message: OpaquePointer) throws(KeychainError) {
        func basic(_ type: Character, _ pointer: UnsafeRawPointer) -> Int32 {
            sd_bus_message_append_basic(message, CChar(type.asciiValue!), pointer)
        }
        func byteArray(_ buffer: UnsafeRawBufferPointer) -> Int32 {
            // A zero-length array still needs a valid pointer.
            sd_bus_message_append_array(message, CChar(UInt8(ascii: "y")), buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, buffer.count)
        }
        func container(_ kind: Character, _ contents: String, _ members: [BusValue]) throws(KeychainError) -> Int32 {
            let opened = sd_bus_message_open_container(message, CChar(kind.asciiValue!), contents)
            guard opened >= 0 else { return opened }
            for member in members { try append(member, to: message) }
            return sd_bus_message_close_container(message)
        }
        let r: Int32
        switch value {
        case .string(let s): r = s.withCString { basic("s", $0) }
        case .objectPath(let p): r = p.withCString { basic("o", $0) }
        case .bool(let b): var v: Int32 = b ? 1 : 0; r = basic("b", &v)
        case .byte(var v): r = basic("y", &v)
        case .int32(var v): r = basic("i", &v)
        case .uint32(var v): r = basic("u", &v)
        case .uint64(var v): r = basic("t", &v)
        case .fileDescriptor(var fd): r = basic("h", &fd)
        case .bytes(let b): r = b.withUnsafeBytes { byteArray($0) }
        case .secret(let s): r = s.withUnsafeBytes { byteArray($0) }
        case .array(let element, let elements): r = try container("a", element, elements)
        case .entry(let key, let value): r = try container("e", key.signature + value.signature, [key, value])
        case .structure(let members): r = try container("r", members.map(\.signature).joined(), members)
        case .variant(let inner): r = try container("v", inner.signature, [inner])
        }
        guard r >= 0 else { throw BusConnection.failure(r, "cannot add a \(value.signature) value to a bus message", status: .param) }
    }
}
