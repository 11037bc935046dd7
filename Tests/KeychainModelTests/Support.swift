import KeychainModel

/// The status `body` throws, or nil when it returns normally: lets a test say
/// `#expect(thrownStatus { ... } == .param)` and get both values in the failure message.
func thrownStatus<T>(_ body: () throws(KeychainError) -> T) -> KeychainStatus? {
    do {
        _ = try body()
        return nil
    } catch {
        return error.status
    }
}

/// Parses `dict` for `operation`, turning the throw into a status for `#expect`.
func queryStatus(_ dict: AttributeDictionary, for operation: ItemOperation) -> KeychainStatus? {
    thrownStatus { () throws(KeychainError) in try ItemQuery(dict, for: operation) }
}

/// A 20-byte persistent reference for `itemClass` with a fixed 16-byte id.
func persistentRefBytes(_ itemClass: ItemClass, idByte: UInt8 = 0xA5) -> [UInt8] {
    PersistentRef(itemClass: itemClass, id: [UInt8](repeating: idByte, count: 16)).bytes
}

/// Every operation, for parameterised tests.
let allOperations: [ItemOperation] = [.add, .copyMatching, .update, .delete]
