// sqlite3 for KeychainStorage, the only target allowed to import it.
// SQLITE_TRANSIENT is a cast macro that Swift cannot import; this gives it a name.
#include <sqlite3.h>

static inline sqlite3_destructor_type csqlite_transient(void) {
    return SQLITE_TRANSIENT;
}
