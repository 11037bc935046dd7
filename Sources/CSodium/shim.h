// libsodium for KeychainCrypto, the only target allowed to import it.
#include <sodium.h>
