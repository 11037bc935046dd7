// The types of the client's API (KeychainError and its status codes, AttributeValue and
// AttributeDictionary, QueryResult, SecretBytes) come with `import KeychainClient`: a package
// that depends on keychaind needs no other module to call it and catch its errors.
@_exported import KeychainModel
