import Foundation

/// Tests/Certificates/p256.der (made by generate.sh there): a real certificate to sync.
let p256CertificateDER: [UInt8] = {
    let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Certificates/p256.der")
    return Array(try! Data(contentsOf: path))
}()
