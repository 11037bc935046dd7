// Linux calls that Swift's Glibc module cannot reach: prctl's header is not part of it.
#ifndef CSYSTEM_SHIM_H
#define CSYSTEM_SHIM_H
#include <stdint.h>

/// Makes the process non-dumpable (no core files, no ptrace by same-uid processes) and sets
/// RLIMIT_CORE to 0. Returns 0, or -1 with errno set.
int csystem_harden_process(void);

/// pidfd_open(2) (Linux 5.3; no glibc wrapper before 2.36): a descriptor that becomes readable
/// once process `pid` has exited. Close-on-exec. Returns it, or -1 with errno set (ENOSYS on
/// an older kernel).
int csystem_pidfd_open(int32_t pid);

/// eventfd(2), which the Glibc module does not import: a counter, close-on-exec and
/// non-blocking, readable while non-zero. Returns it, or -1 with errno set.
int csystem_eventfd(void);

/// posix_spawn(3) of `path` in a session of its own (POSIX_SPAWN_SETSID: no controlling
/// terminal), with stdin and stdout on /dev/null, stderr inherited and every other descriptor
/// closed (posix_spawn_file_actions_addclosefrom_np): both are GNU extensions the Glibc
/// module does not import. Returns 0 and sets *pid, or an errno value.
int csystem_spawn_detached(int32_t *pid, const char *path, char *const argv[], char *const envp[]);

/// prctl(PR_SET_CHILD_SUBREAPER, 1): orphaned descendants become this process's children, for
/// `keychain run` to end what its command leaves behind. Returns 0, or -1 with errno set.
int csystem_become_subreaper(void);

/// accept4(listener, NULL, NULL, SOCK_CLOEXEC): a connection already close-on-exec, in one
/// system call (the Glibc module does not import accept4).
int csystem_accept(int listener);

/// An epoll instance for one thread that waits on the listening socket `listener` and the
/// descriptor `wake` (close-on-exec), or -1 with errno set. The listener goes in with
/// EPOLLEXCLUSIVE (Linux 4.5), so of the threads waiting on one listener a new connection
/// wakes one, where poll(2) wakes them all; `wake` wakes every waiter. Made once per thread:
/// an instance per wait cost four system calls per connection (docs/performance.md). The Glibc
/// module does not import sys/epoll.h.
int csystem_connection_waiter(int listener, int wake);

/// Waits in `waiter` (csystem_connection_waiter): 1 for a connection (perhaps already taken
/// by another thread), 0 for `wake` (which wins when both are), -1 with errno set (EINTR
/// included: the caller retries).
int csystem_wait_connection(int waiter);

#endif
