// Linux calls that Swift's Glibc module cannot reach: it is built without _GNU_SOURCE, so
// struct ucred (SO_PEERCRED) is missing, and prctl's header is not part of it.
#ifndef CSYSTEM_SHIM_H
#define CSYSTEM_SHIM_H
#include <stdint.h>

/// The peer's credentials on a connected Unix socket, as the kernel recorded them at connect.
/// Returns 0, or -1 with errno set.
int csystem_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid);

/// Makes the process non-dumpable (no core files, no ptrace by same-uid processes) and sets
/// RLIMIT_CORE to 0. Returns 0, or -1 with errno set.
int csystem_harden_process(void);

#endif
