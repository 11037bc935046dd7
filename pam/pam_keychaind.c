/*
 * pam_keychaind: unlocks the user's keychaind with the login password (issue 26;
 * docs/security.md, "The PAM module").
 *
 * Loaded into login, sshd, display managers and screen lockers, so it is plain C against
 * libpam, starts no thread and never changes the outcome of a login: every failure is a log
 * line, and auth, session and password all answer PAM_IGNORE or PAM_SUCCESS.
 *
 * It talks to keychaind as the user, never as the calling process (often root): each call
 * runs in a forked child that drops to the user's uid, gid and groups for real (not only the
 * filesystem uid, which SO_PEERCRED would not show), so keychaind sees the user and applies
 * the user's rights. The parent waits a bounded time and kills the child past it.
 *
 * Options: socket=PATH (default $XDG_RUNTIME_DIR-style /run/user/UID/keychaind.sock, else
 * /tmp/keychaind-UID/keychaind.sock), timeout=MS (default 3000, at most 30000), debug.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define PAM_SM_AUTH
#define PAM_SM_SESSION
#define PAM_SM_PASSWORD
#include <security/pam_ext.h>
#include <security/pam_modules.h>
#include <security/pam_modutil.h>

#define DATA_PASSWORD "pam_keychaind_password"
#define MAX_PASSWORD 1024

/* The child's exit codes: what keychaind answered. */
enum outcome {
    DONE = 0,        /* unlocked, rewrapped, marked stale */
    WRONG = 1,       /* errSecAuthFailed: wrong password, or the slot's delay */
    STALE = 2,       /* errSecNotAvailable: the slot is stale */
    NO_SLOT = 3,     /* errSecItemNotFound: this keychain has no login slot */
    NOT_RUNNING = 4, /* no socket, or nothing listening: keychaind is not running */
    FAILED = 5,      /* anything else: refused, an untrusted server, a malformed answer */
    TIMED_OUT = 6    /* set by the parent: the child did not finish in time */
};

enum op { OP_LOGIN_UNLOCK = 43, OP_LOGIN_SLOT_REWRAP = 44 };

struct options {
    const char *socket;
    int timeout_ms;
    int debug;
};

static void parse_options(int argc, const char **argv, struct options *o) {
    o->socket = NULL;
    o->timeout_ms = 3000;
    o->debug = 0;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "socket=", 7) == 0) {
            o->socket = argv[i] + 7;
        } else if (strncmp(argv[i], "timeout=", 8) == 0) {
            int t = atoi(argv[i] + 8);
            if (t > 0 && t <= 30000) o->timeout_ms = t;
        } else if (strcmp(argv[i], "debug") == 0) {
            o->debug = 1;
        }
    }
}

/* The user's socket, as the keychain client finds it for that user. */
static int socket_path(const struct options *o, const struct passwd *pw, char *out, size_t size) {
    struct stat st;
    uid_t uid = pw->pw_uid;
    if (o->socket) return snprintf(out, size, "%s", o->socket) < (int)size ? 0 : -1;
    char dir[64];
    snprintf(dir, sizeof dir, "/run/user/%u", (unsigned)uid);
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid)
        return snprintf(out, size, "%s/keychaind.sock", dir) < (int)size ? 0 : -1;
    /* The /tmp fallback only when the directory is the user's own and private, as the client. */
    snprintf(dir, sizeof dir, "/tmp/keychaind-%u", (unsigned)uid);
    if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & 077) == 0)
        return snprintf(out, size, "%s/keychaind.sock", dir) < (int)size ? 0 : -1;
    /* Where keychaind listens when another user took the /tmp one (DefaultPaths): the user's
     * ~/.local/state/keychaind (the user's XDG_STATE_HOME is not known here). */
    char home[4096];
    if (!pw->pw_dir || pw->pw_dir[0] != '/'
        || snprintf(home, sizeof home, "%s/.local/state/keychaind", pw->pw_dir) >= (int)sizeof home)
        return -1;
    if (lstat(home, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & 077) == 0)
        return snprintf(out, size, "%s/keychaind.sock", home) < (int)size ? 0 : -1;
    return -1;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = v & 0xff; p[1] = (v >> 8) & 0xff; p[2] = (v >> 16) & 0xff; p[3] = (v >> 24) & 0xff;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * In the child, already the user: one request to keychaind, its status as an outcome.
 * Frame: u32 length, u8 version 1, u8 op, then u32 + old (rewrap only), u32 + password.
 */
static int call_keychaind(const char *path, enum op op, const char *old, const char *password) {
    size_t old_len = old ? strlen(old) : 0, len = strlen(password);
    if (len > MAX_PASSWORD || old_len > MAX_PASSWORD) return FAILED;
    unsigned char frame[4 + 2 + 8 + 2 * MAX_PASSWORD];
    size_t n = 4;
    frame[n++] = 1;
    frame[n++] = (unsigned char)op;
    if (op == OP_LOGIN_SLOT_REWRAP) {
        put_u32(frame + n, (uint32_t)old_len);
        memcpy(frame + n + 4, old, old_len);
        n += 4 + old_len;
    }
    put_u32(frame + n, (uint32_t)len);
    memcpy(frame + n + 4, password, len);
    n += 4 + len;
    put_u32(frame, (uint32_t)(n - 4));

    int result = FAILED;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (fd < 0 || strlen(path) >= sizeof addr.sun_path) goto out;
    strcpy(addr.sun_path, path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        result = (errno == ENOENT || errno == ECONNREFUSED) ? NOT_RUNNING : FAILED;
        goto out;
    }
    /* Who serves must be root or the user (docs/protocol.md, 1): never hand the password to
     * a socket someone else bound first. */
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || (cred.uid != 0 && cred.uid != getuid())) goto out;
    if (write_all(fd, frame, n) != 0) goto out;
    unsigned char head[4 + 1 + 4];
    if (read_all(fd, head, sizeof head) != 0 || get_u32(head) < 5 || head[4] != 1) goto out;
    int32_t status = (int32_t)get_u32(head + 5);
    switch (status) {
    case 0: result = DONE; break;
    case -25293: result = WRONG; break;
    case -25291: result = STALE; break;
    case -25300: result = NO_SLOT; break;
    default: result = FAILED; break;
    }
out:
    explicit_bzero(frame, sizeof frame);
    if (fd >= 0) close(fd);
    return result;
}

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/*
 * Runs the call in a child that is the user in every id, and waits at most the timeout.
 * The password is in the child's copy of memory only for the call, and wiped before it exits.
 */
static int as_user(pam_handle_t *pamh, const struct options *o, const struct passwd *pw,
                   enum op op, const char *old, const char *password) {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    if (socket_path(o, pw, path, sizeof path) != 0) return NOT_RUNNING;

    /* The user's groups are looked up here, before the fork: a host with threads (gdm, a
     * screen locker) may hold an NSS or malloc lock that the child would wait on forever. */
    gid_t groups[256];
    int ngroups = (int)(sizeof groups / sizeof groups[0]);
    if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &ngroups) < 0) {
        pam_syslog(pamh, LOG_ERR, "the user is in %d groups, more than the 256 this module takes", ngroups);
        return FAILED;
    }

    /* An application that ignores SIGCHLD would have the child reaped before waitpid. */
    struct sigaction dfl = { .sa_handler = SIG_DFL }, saved;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &saved);
    pid_t child = fork();
    if (child < 0) {
        sigaction(SIGCHLD, &saved, NULL);
        pam_syslog(pamh, LOG_ERR, "fork failed: %s", strerror(errno));
        return FAILED;
    }
    if (child == 0) {
        /* Never back to the caller's ids: groups, gid, then uid, and check that root is gone. */
        if (setgroups((size_t)ngroups, groups) != 0 || setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) != 0
            || setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) != 0
            || (pw->pw_uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)))
            _exit(FAILED);
        alarm((unsigned)(o->timeout_ms / 1000 + 2)); /* even if the parent is gone */
        _exit(call_keychaind(path, op, old, password));
    }
    int status = 0, result = TIMED_OUT;
    long deadline = now_ms() + o->timeout_ms;
    for (;;) {
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child) {
            result = WIFEXITED(status) ? WEXITSTATUS(status) : FAILED;
            break;
        }
        if (w < 0 && errno != EINTR) { result = FAILED; break; }
        if (now_ms() >= deadline) {
            kill(child, SIGKILL);
            while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
            break;
        }
        struct timespec tick = { 0, 10 * 1000000L };
        nanosleep(&tick, NULL);
    }
    sigaction(SIGCHLD, &saved, NULL);
    return result;
}

static const char *describe(int outcome) {
    switch (outcome) {
    case DONE: return "done";
    case WRONG: return "the login password does not open the login slot (or its delay is in force)";
    case STALE: return "the login slot is stale: unlock with the passcode, which offers to rebuild it";
    case NO_SLOT: return "this keychain has no login slot (keychain passcode login-slot add)";
    case NOT_RUNNING: return "keychaind is not running";
    case TIMED_OUT: return "keychaind did not answer in time";
    default: return "keychaind refused the call or could not be reached";
    }
}

static void tell_stale(pam_handle_t *pamh, int outcome) {
    if (outcome == STALE)
        pam_info(pamh, "Your keychain was not unlocked: its login slot is stale since the password change. "
                       "Run `keychain unlock` with your passcode to rebuild it.");
}

static void wipe_password(pam_handle_t *pamh, void *data, int error_status) {
    (void)pamh;
    (void)error_status;
    if (data) {
        explicit_bzero(data, strlen(data));
        free(data);
    }
}

static int user_entry(pam_handle_t *pamh, const struct passwd **pw) {
    const char *user = NULL;
    if (pam_get_user(pamh, &user, NULL) != PAM_SUCCESS || !user) return -1;
    *pw = pam_modutil_getpwnam(pamh, user);
    return *pw ? 0 : -1;
}

PAM_EXTERN int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    struct options o;
    parse_options(argc, argv, &o);
    const struct passwd *pw;
    const void *item = NULL;
    if (user_entry(pamh, &pw) != 0) return PAM_IGNORE;
    if (pam_get_item(pamh, PAM_AUTHTOK, &item) != PAM_SUCCESS || !item || !*(const char *)item) return PAM_IGNORE;
    const char *password = item;
    /* A running keychaind is unlocked now: a screen locker's unlock has no session stage. */
    int outcome = as_user(pamh, &o, pw, OP_LOGIN_UNLOCK, NULL, password);
    if (outcome == DONE) {
        pam_syslog(pamh, LOG_INFO, "unlocked the keychain of %s", pw->pw_name);
        return PAM_IGNORE;
    }
    if (outcome != NOT_RUNNING) {
        /* A keychain without a slot is the user's choice, not news at every login. */
        if (outcome != NO_SLOT || o.debug)
            pam_syslog(pamh, outcome == NO_SLOT ? LOG_DEBUG : LOG_NOTICE, "keychain of %s not unlocked: %s", pw->pw_name, describe(outcome));
        tell_stale(pamh, outcome);
        return PAM_IGNORE;
    }
    /* Not running yet: kept for the session stage, which may start it; wiped in cleanup. */
    char *copy = strndup(password, MAX_PASSWORD + 1);
    if (copy && pam_set_data(pamh, DATA_PASSWORD, copy, wipe_password) != PAM_SUCCESS) wipe_password(pamh, copy, 0);
    if (o.debug) pam_syslog(pamh, LOG_DEBUG, "keychaind of %s not running; password kept for the session", pw->pw_name);
    return PAM_IGNORE;
}

PAM_EXTERN int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags; (void)argc; (void)argv;
    return PAM_IGNORE;
}

PAM_EXTERN int pam_sm_open_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    struct options o;
    parse_options(argc, argv, &o);
    const struct passwd *pw;
    const void *data = NULL;
    if (pam_get_data(pamh, DATA_PASSWORD, &data) != PAM_SUCCESS || !data) return PAM_SUCCESS;
    if (user_entry(pamh, &pw) == 0) {
        int outcome = as_user(pamh, &o, pw, OP_LOGIN_UNLOCK, NULL, data);
        if (outcome == DONE)
            pam_syslog(pamh, LOG_INFO, "unlocked the keychain of %s", pw->pw_name);
        else if (outcome != NO_SLOT || o.debug)
            pam_syslog(pamh, outcome == NO_SLOT ? LOG_DEBUG : LOG_NOTICE, "keychain of %s not unlocked: %s", pw->pw_name, describe(outcome));
        tell_stale(pamh, outcome);
    }
    pam_set_data(pamh, DATA_PASSWORD, NULL, NULL); /* runs wipe_password on the copy */
    return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags; (void)argc; (void)argv;
    return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_chauthtok(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    if (!(flags & PAM_UPDATE_AUTHTOK)) return PAM_IGNORE;
    struct options o;
    parse_options(argc, argv, &o);
    const struct passwd *pw;
    const void *old = NULL, *new = NULL;
    if (user_entry(pamh, &pw) != 0) return PAM_IGNORE;
    if (pam_get_item(pamh, PAM_AUTHTOK, &new) != PAM_SUCCESS || !new || !*(const char *)new) return PAM_IGNORE;
    pam_get_item(pamh, PAM_OLDAUTHTOK, &old);
    /* No old password (root's `passwd USER`): an empty one tells keychaind to mark the slot stale. */
    int outcome = as_user(pamh, &o, pw, OP_LOGIN_SLOT_REWRAP, old ? old : "", new);
    if (outcome == DONE)
        pam_syslog(pamh, LOG_INFO, old && *(const char *)old ? "login slot of %s follows the new password"
                                                             : "login slot of %s marked stale (password reset without the old one)",
                   pw->pw_name);
    else if (outcome != NOT_RUNNING && outcome != NO_SLOT)
        pam_syslog(pamh, LOG_NOTICE, "login slot of %s not rewrapped: %s", pw->pw_name, describe(outcome));
    /* PAM has no transactions: the password has changed whatever keychaind said. */
    return PAM_IGNORE;
}
