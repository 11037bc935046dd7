// OpenSSL's libcrypto: the Secret Service's session crypto (SessionCrypto: the 1024-bit DH
// group's constant-time modpow, HKDF-SHA256 and AES-128-CBC) and keychaind's P-256 signatures
// (KeychainCrypto's P256Signer, below).
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

/*
 * An ECDSA P-256 signature (DER, at most 72 bytes) of a 32-byte digest, with the key built from
 * its stored parts as they are: the 65-byte X9.63 point and the scalar, native-endian (what
 * OSSL_PARAM's unsigned integers are). EVP_PKEY_fromdata checks that the point is on the curve
 * but runs no pairwise check: keychaind checked the point against the scalar when the key was
 * made or imported, and the row that holds both is authenticated (docs/keys.md). The scalar is
 * copied only into OpenSSL's key (BN_secure_new, cleared on free). 1 on success.
 */
static inline int keychaind_p256_sign_digest(const unsigned char *point, const unsigned char *scalar_native,
                                             const unsigned char *digest, size_t digest_len,
                                             unsigned char *signature, size_t *signature_len) {
    EVP_PKEY_CTX *build = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (build == NULL) return 0;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)"prime256v1", 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)point, 65),
        OSSL_PARAM_construct_BN(OSSL_PKEY_PARAM_PRIV_KEY, (unsigned char *)scalar_native, 32),
        OSSL_PARAM_construct_end(),
    };
    EVP_PKEY *key = NULL;
    int ok = EVP_PKEY_fromdata_init(build) > 0 && EVP_PKEY_fromdata(build, &key, EVP_PKEY_KEYPAIR, params) > 0;
    EVP_PKEY_CTX_free(build);
    if (!ok) return 0;
    EVP_PKEY_CTX *sign = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    ok = sign != NULL && EVP_PKEY_sign_init(sign) > 0
        && EVP_PKEY_sign(sign, signature, signature_len, digest, digest_len) > 0;
    EVP_PKEY_CTX_free(sign);
    EVP_PKEY_free(key);
    return ok;
}
