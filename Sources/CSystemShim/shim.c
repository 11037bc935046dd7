#define _GNU_SOURCE
#include "csystem_shim.h"
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/resource.h>

int csystem_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

int csystem_harden_process(void) {
    struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_CORE, &none) != 0) return -1;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return -1;
    return 0;
}
