import KeychainCertificates
import KeychainModel

/// Certificate items describe their DER: on add, and on an update that changes v_Data, the
/// store derives ctyp, cenc, subj, issr, slnr, skid, pkhh and spkh from it
/// (CertificateAttributes), so that the primary key and the identity join (pkhh = klbl) hold
/// for any caller. A value the caller gives for one of them follows the one rule of
/// `DerivedAttributes`, as a key's do.
enum CertificateItem {
    /// Fills the derived attributes of a certificate being added, and labl from the subject
    /// when the caller gave none (as Apple's client does).
    static func derive(_ attributes: inout AttributeDictionary, data: SecretBytes?) throws(KeychainError) {
        guard let data, !data.isEmpty else {
            throw KeychainError(.param, "a certificate item needs v_Data: the certificate's DER")
        }
        let derived = try CertificateAttributes(der: data)
        try checkCallerValues(attributes, agreeWith: derived)
        attributes.merge(derived.attributes) { _, new in new }
        if attributes["labl"] == nil, let summary = derived.summary {
            attributes["labl"] = .string(summary)
        }
    }

    /// A certificate's attributes after an update: re-derived when v_Data changes (a derived
    /// attribute the new certificate lacks, such as skid, is removed); otherwise changes to
    /// derived attributes must agree with the stored certificate.
    static func updated(_ attributes: AttributeDictionary, changes: ItemChanges, currentData: SecretBytes) throws(KeychainError) -> AttributeDictionary {
        var out = attributes
        let touchesDerived = CertificateAttributes.derivedCodes.contains { changes.attributes[$0] != nil }
        guard changes.data != nil || touchesDerived else {
            out.merge(changes.attributes) { _, new in new }
            return out
        }
        if let data = changes.data, data.isEmpty {
            throw KeychainError(.param, "a certificate item needs v_Data: the certificate's DER")
        }
        let derived = try CertificateAttributes(der: changes.data ?? currentData)
        try checkCallerValues(changes.attributes, agreeWith: derived)
        for code in CertificateAttributes.derivedCodes { out[code] = nil }
        out.merge(changes.attributes) { _, new in new }
        out.merge(derived.attributes) { _, new in new }
        return out
    }

    private static func checkCallerValues(_ given: AttributeDictionary, agreeWith derived: CertificateAttributes) throws(KeychainError) {
        try DerivedAttributes.check(given, against: derived.attributes, codes: CertificateAttributes.derivedCodes,
                                    schema: .certificate, source: "the certificate")
    }
}
