/*
 * freescan: an LD_PRELOAD hook that checks that freed heap memory never holds a secret in clear.
 *
 * Why: keychaind promises to wipe per-item plaintexts, request frames and passcodes right after
 * use (docs/security.md, "Memory"). A block handed back to malloc with the secret still in it
 * stays readable in the heap (and in whatever later allocation reuses it) for as long as the
 * process lives. This library interposes free() and realloc() in the real daemon, searches every
 * block being released for a marker string that the test put into its secrets, and reports each
 * block that still contains it. Zero hits means every freed block was wiped first.
 *
 * Build (scripts/freescan-check does this):
 *
 *     cc -shared -fPIC -O1 -o freescan.so Tests/Hooks/freescan.c -ldl
 *
 * Use:
 *
 *     LD_PRELOAD=/abs/path/freescan.so \
 *     FREESCAN_MARKER=FREESCAN-MARKER-7f3a9c \  the marker, 8..64 bytes (or FREESCAN_MARKER_HEX)
 *     FREESCAN_REPORT=/tmp/report \             appended to, created 0600 (default: stderr)
 *     FREESCAN_BACKTRACE=1 \                    optional: a backtrace after every hit: 1 with
 *                                               the unwinder (backtrace()), fp by frame pointers
 *     FREESCAN_WIPE=0 \                         optional: see "Each leak is counted once"
 *     keychaind --state-dir ... --socket ...
 *
 * then put the marker inside the secrets sent to the daemon. Once armed, the hook writes
 * "start pid=<pid> marker_len=<n>" (so a caller can tell a hook that never loaded from a clean
 * run). Each hit is one line, written with one write() as it happens (a SIGKILLed daemon still
 * leaves its report), and counted by `grep -c '^hit '`:
 *
 *     hit size=<malloc_usable_size of the block> offset=<offset of the first marker>
 *
 * With FREESCAN_BACKTRACE it is followed by "bt via=<free|realloc> tid=<tid>", one line per
 * frame (backtrace_symbols_fd: "binary(symbol+0xoff)[0xaddr]" or "binary(+0xoff)[0xaddr]" where
 * the symbol is not exported: symbolize with `llvm-symbolizer --obj=binary 0xoff`, demangle with
 * `swift demangle`) and "bt end". The unwinder stops at some frames of the Swift runtime; frame
 * pointers (which Swift code and its runtime keep) go through them, read with process_vm_readv
 * so that a bad chain ends the walk instead of crashing.
 *
 * Each leak is counted once: after reporting a hit, free() zeroes the block before releasing it
 * (harmless: nobody may read a block being freed). Otherwise a later allocation reusing the
 * block, not overwriting all of it and freed again would count the same leaked copy a second
 * time, under an innocent call site. FREESCAN_WIPE=0 turns that off. A block that realloc()
 * moved cannot be wiped (realloc frees it itself) and may be counted again when reused.
 *
 * Without a marker the hook only forwards. The marker must not be in the heap for any other
 * reason, and the environment is such a place (Foundation's ProcessInfo.environment copies each
 * variable into a Swift string, and frees it): the constructor replaces FREESCAN_MARKER by
 * FREESCAN_MARKER_HEX, its hex form, which a re-exec'd process (keychaind re-execs itself to set
 * SWIFT_BACKTRACE) reads back.
 *
 * Limits: only frees that go through the dynamic symbols free, realloc and reallocarray are
 * seen; glibc's internal frees (stdio buffers...) and munmap'ed memory (libsodium's sodium_free,
 * which zeroes anyway) are not, nor is the stack. A statically linked executable (the `keychain`
 * CLI) cannot be hooked at all. cfree is not interposed: glibc 2.26+ keeps it only as a compat
 * symbol that nothing links against. The whole usable size is searched: a stale copy in the
 * block's unused tail counts, as it should (the secret is in freed memory all the same).
 *
 * Implementation: the real functions are glibc's exported __libc_free and __libc_realloc,
 * called directly, so there is no dlsym (which allocates) and nothing can recurse through a
 * half-resolved pointer. A hook only reads the block (memmem) and calls write(): no stdio, no
 * malloc, no lock on the common path; a spin lock keeps a hit's lines together when backtraces
 * are on. A thread-local flag (initial-exec TLS, which never allocates) keeps the frees made
 * inside a hook (the unwinder's) out of the scan.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

extern void __libc_free(void *ptr);
extern void *__libc_realloc(void *ptr, size_t size);

#define MARKER_MIN 8
#define MARKER_MAX 64
#define MAX_FRAMES 64

enum { BT_NONE, BT_UNWIND, BT_FP };

static char marker[MARKER_MAX];
static size_t marker_len;  /* 0: the hook is off, every call is only forwarded */
static int report_fd = 2;
static int backtrace_mode = BT_NONE;
static int wipe = 1;
static volatile char report_lock;
static __thread int inside __attribute__((tls_model("initial-exec")));

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void say(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(report_fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static char *put_num(char *p, size_t v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *p++ = digits[--n];
    return p;
}

static char *put_str(char *p, const char *s) {
    while (*s) *p++ = *s++;
    return p;
}

__attribute__((constructor)) static void freescan_init(void) {
    const char *plain = getenv("FREESCAN_MARKER");
    const char *hex = getenv("FREESCAN_MARKER_HEX");
    const char *path = getenv("FREESCAN_REPORT");
    const char *bt = getenv("FREESCAN_BACKTRACE");
    const char *w = getenv("FREESCAN_WIPE");
    size_t len = 0;

    if (path && *path) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) report_fd = fd;
    }
    if (plain && *plain) {
        len = strlen(plain);
        if (len < MARKER_MIN || len > MARKER_MAX) {
            say("freescan: FREESCAN_MARKER must be 8 to 64 bytes; hook disabled\n");
            return;
        }
        memcpy(marker, plain, len);
        /* Keep the clear marker out of the environment (see the header); hex for a re-exec. */
        char hexbuf[2 * MARKER_MAX + 1];
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < len; i++) {
            hexbuf[2 * i] = digits[(unsigned char)marker[i] >> 4];
            hexbuf[2 * i + 1] = digits[(unsigned char)marker[i] & 15];
        }
        hexbuf[2 * len] = 0;
        setenv("FREESCAN_MARKER_HEX", hexbuf, 1);
        unsetenv("FREESCAN_MARKER");
    } else if (hex && *hex) {
        size_t n = strlen(hex);
        if (n % 2 || n / 2 < MARKER_MIN || n / 2 > MARKER_MAX) {
            say("freescan: FREESCAN_MARKER_HEX must be 16 to 128 hex digits; hook disabled\n");
            return;
        }
        for (size_t i = 0; i < n / 2; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                say("freescan: FREESCAN_MARKER_HEX is not hex; hook disabled\n");
                return;
            }
            marker[i] = (char)(hi << 4 | lo);
        }
        len = n / 2;
    } else {
        return;
    }
    if (w && strcmp(w, "0") == 0) wipe = 0;
    if (bt && strcmp(bt, "1") == 0) {
        /* The first backtrace() loads libgcc_s (dlopen, malloc): do it now, not inside a hook. */
        void *frames[4];
        inside = 1;
        backtrace(frames, 4);
        inside = 0;
        backtrace_mode = BT_UNWIND;
    } else if (bt && strcmp(bt, "fp") == 0) {
        backtrace_mode = BT_FP;
    }
    /* Lets a caller check that the hook is really loaded and armed (a missing hook finds 0). */
    char line[64];
    char *p = put_str(line, "start pid=");
    p = put_num(p, (size_t)getpid());
    p = put_str(p, " marker_len=");
    p = put_num(p, len);
    *p++ = '\n';
    *p = 0;
    say(line);
    marker_len = len;  /* last: turns the hook on */
}

/* Reads memory that may not be mapped: false instead of a fault. */
static int safe_read(const void *from, void *to, size_t n) {
    struct iovec local = {to, n}, remote = {(void *)from, n};
    return syscall(SYS_process_vm_readv, getpid(), &local, 1UL, &remote, 1UL, 0UL) == (long)n;
}

/* Return addresses up the frame-pointer chain, from the frame of a hook (free or realloc). */
static int fp_backtrace(void *hook_frame, void **out, int max) {
    uintptr_t fp = (uintptr_t)hook_frame;
    int n = 0;
    while (n < max && fp && fp % sizeof(void *) == 0) {
        uintptr_t pair[2];  /* saved frame pointer, return address */
        if (!safe_read((const void *)fp, pair, sizeof pair) || pair[1] == 0) break;
        out[n++] = (void *)pair[1];
        if (pair[0] <= fp || pair[0] - fp > (16u << 20)) break;  /* stacks grow down */
        fp = pair[0];
    }
    return n;
}

/* Whether a live block holds the marker: its usable size and the marker's first offset. */
static int holds_marker(void *ptr, size_t *size, size_t *offset) {
    size_t n = malloc_usable_size(ptr);
    if (n < marker_len) return 0;
    const char *at = memmem(ptr, n, marker, marker_len);
    if (!at) return 0;
    *size = n;
    *offset = (size_t)(at - (const char *)ptr);
    return 1;
}

/* One hit: a single write() of the line (lines from several threads never interleave), then,
 * if asked, the backtrace under a spin lock that keeps a hit's lines together. */
static void report(size_t size, size_t offset, const char *via, void *hook_frame) {
    char line[96];
    char *p = put_str(line, "hit size=");
    p = put_num(p, size);
    p = put_str(p, " offset=");
    p = put_num(p, offset);
    *p++ = '\n';
    *p = 0;
    if (backtrace_mode == BT_NONE) {
        say(line);
        return;
    }
    while (__atomic_test_and_set(&report_lock, __ATOMIC_ACQUIRE)) {
    }
    say(line);
    p = put_str(line, "bt via=");
    p = put_str(p, via);
    p = put_str(p, " tid=");
    p = put_num(p, (size_t)syscall(SYS_gettid));
    *p++ = '\n';
    *p = 0;
    say(line);
    void *frames[MAX_FRAMES];
    int n = backtrace_mode == BT_FP ? fp_backtrace(hook_frame, frames, MAX_FRAMES)
                                    : backtrace(frames, MAX_FRAMES);
    backtrace_symbols_fd(frames, n, report_fd);
    say("bt end\n");
    __atomic_clear(&report_lock, __ATOMIC_RELEASE);
}

void free(void *ptr) {
    if (ptr && marker_len && !inside) {
        size_t size, offset;
        inside = 1;
        if (holds_marker(ptr, &size, &offset)) {
            report(size, offset, "free", __builtin_frame_address(0));
            if (wipe) memset(ptr, 0, size);
        }
        inside = 0;
    }
    __libc_free(ptr);
}

void *realloc(void *ptr, size_t size) {
    if (!ptr || !marker_len || inside) return __libc_realloc(ptr, size);
    /* Look before the call: once the block has moved it is free and may be reused already.
     * Report only if it did move (or was freed by a size of 0): growing or shrinking in place
     * keeps the data live, and a failed realloc (NULL for a size > 0) leaves the block alone. */
    size_t old_size = 0, offset = 0;
    inside = 1;
    int had = holds_marker(ptr, &old_size, &offset);
    inside = 0;
    void *result = __libc_realloc(ptr, size);
    if (had && result != ptr && (result || size == 0)) {
        inside = 1;
        report(old_size, offset, "realloc", __builtin_frame_address(0));
        inside = 0;
    }
    return result;
}

/* glibc's reallocarray calls its realloc internally, past this hook: route it through ours. */
void *reallocarray(void *ptr, size_t nmemb, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(nmemb, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(ptr, bytes);
}
