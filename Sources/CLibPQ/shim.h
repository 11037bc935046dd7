// libpq for KeychainSync's PostgresConnection, the only code allowed to call it (docs/sync.md §10).
// pkg-config's libpq gives the include directory (/usr/include/postgresql on Debian).
#include <libpq-fe.h>
