#define _GNU_SOURCE
#include <sys/epoll.h>
#include "csystem_shim.h"
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

int csystem_harden_process(void) {
    struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_CORE, &none) != 0) return -1;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return -1;
    return 0;
}

int csystem_become_subreaper(void) {
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

int csystem_pidfd_open(int32_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

int csystem_eventfd(void) {
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

int csystem_spawn_detached(int32_t *pid, const char *path, char *const argv[], char *const envp[]) {
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_t actions;
    int rc = posix_spawnattr_init(&attributes);
    if (rc != 0) return rc;
    rc = posix_spawn_file_actions_init(&actions);
    if (rc != 0) { posix_spawnattr_destroy(&attributes); return rc; }
    pid_t child = 0;
    if ((rc = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID)) == 0
        && (rc = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)) == 0
        && (rc = posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)) == 0
        && (rc = posix_spawn_file_actions_addclosefrom_np(&actions, 3)) == 0) {
        rc = posix_spawn(&child, path, &actions, &attributes, argv, envp);
    }
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (rc == 0) *pid = (int32_t)child;
    return rc;
}

int csystem_accept(int listener) {
    return accept4(listener, NULL, NULL, SOCK_CLOEXEC);
}

int csystem_connection_waiter(int listener, int wake) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return -1;
    struct epoll_event on_listener = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u32 = 1 };
    struct epoll_event on_wake = { .events = EPOLLIN, .data.u32 = 0 };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, listener, &on_listener) != 0 || epoll_ctl(ep, EPOLL_CTL_ADD, wake, &on_wake) != 0) {
        int saved = errno;
        close(ep);
        errno = saved;
        return -1;
    }
    return ep;
}

int csystem_wait_connection(int waiter) {
    struct epoll_event got[2];
    int n = epoll_wait(waiter, got, 2, -1);
    if (n < 0) return -1;
    int result = 1;
    for (int i = 0; i < n; i++) if (got[i].data.u32 == 0) result = 0;
    return result;
}
