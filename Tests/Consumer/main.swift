// Uses KeychainClient with this one import: the client, its errors and its value types.
import KeychainClient

func check() -> Int32 {
    let keychain = Keychain(service: "consumer.example", connection: KeychainConnection(socketPath: "/nonexistent/kc.sock"))
    do {
        try keychain.set("token", forKey: "me")
        print("unexpected: a daemon answered")
        return 1
    } catch let error as KeychainError {
        // No daemon there: the typed error, with Apple's status.
        print("\(error.status.name) \(error.status.rawValue)")
        guard error.status == .serviceNotAvailable else { return 1 }
    } catch {
        print("unexpected error \(error)")
        return 1
    }
    let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("consumer.example"), "r_Data": .bool(true)]
    let connection = KeychainConnection(socketPath: "/nonexistent/kc.sock", trust: ServerTrust(named: 1000))
    do throws(KeychainError) {
        if case .single(.data(let secret)) = try connection.copyMatching(query) { print(secret.count) }
    } catch {
        print("copyMatching: \(error.status.name)")
    }
    return 0
}

/// The async form of a call: the same errors, awaited without holding a thread of the pool.
func checkAsync() async -> Int32 {
    let connection = KeychainConnection(socketPath: "/nonexistent/kc.sock")
    do throws(KeychainError) {
        _ = try await connection.status()
        print("unexpected: a daemon answered")
        return 1
    } catch {
        print("async status: \(error.status.name)")
        return error.status == .serviceNotAvailable ? 0 : 1
    }
}

if check() != 0 { fatalError("the consumer check failed") }
if await checkAsync() != 0 { fatalError("the consumer's async check failed") }
