// OpenSSL's libcrypto, for the Secret Service's session crypto only (SessionCrypto imports it):
// the 1024-bit DH group's constant-time modpow, HKDF-SHA256 and AES-128-CBC.
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
