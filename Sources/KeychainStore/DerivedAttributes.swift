import KeychainModel

/// The one rule for attributes the store derives from an item's data (a certificate's from its
/// DER, a private key's from its bytes): a value the caller gives must equal the derived one,
/// and is then stored as derived; a different one is errSecParam naming the attribute, with
/// nothing stored. Apple's client library lets the caller's value win (docs/semantics.md,
/// deviations): here a wrong `pkhh` or `klbl` would join a certificate to a key it does not
/// certify, and a wrong `issr`/`slnr` or `bsiz` would defeat the duplicate check.
enum DerivedAttributes {
    /// `codes`: the attributes derived for this item; those missing from `derived` are ones
    /// this item has none of (a certificate without a subject key id), which a caller may not
    /// give either. `source` names what they are derived from, for the message.
    static func check(_ given: AttributeDictionary, against derived: AttributeDictionary, codes: some Sequence<String>,
                      schema: ClassSchema, source: String) throws(KeychainError) {
        for code in codes {
            guard let value = given[code] else { continue }
            guard let spec = schema.spec(code), let own = derived[code] else {
                throw KeychainError(.param, "attribute \(code) is derived from \(source), which has none; leave it out")
            }
            guard spec.matchKey(value) == spec.matchKey(own) else {
                throw KeychainError(.param, "attribute \(code) does not match \(source); keychaind derives it from v_Data, leave it out")
            }
        }
    }
}
