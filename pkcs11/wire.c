/* keychaind's wire protocol for the PKCS#11 module: requests, bounded answers, one socket. */
#define _GNU_SOURCE
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A call to a daemon that serves answers in microseconds; a daemon that does not answer in
 * this long is treated as gone, so the host never hangs on it. */
#define CALL_TIMEOUT_MS 30000
/* A probe of whether keychaind is there at all (the slot calls): a host must not wait on it. */
#define PROBE_TIMEOUT_MS 2000
#define FRAME_TIMEOUT_MS 10000
/* Longer than keychaind's unlock prompt (120 s): its answer, not ours, ends a prompt. */
#define PERSON_TIMEOUT_MS 180000

void wire_wipe(void *p, size_t n) {
    if (p) explicit_bzero(p, n);
}

/* MARK: writing */

static void reserve(struct wire_writer *w, size_t more) {
    if (w->failed) return;
    if (w->length + more <= w->capacity) return;
    size_t capacity = w->capacity ? w->capacity : 256;
    while (capacity < w->length + more) capacity *= 2;
    /* Not realloc: the old buffer may hold data to sign or a peer key, wiped before it goes. */
    uint8_t *bytes = malloc(capacity);
    if (!bytes) { w->failed = 1; return; }
    if (w->bytes) {
        memcpy(bytes, w->bytes, w->length);
        wire_wipe(w->bytes, w->capacity);
        free(w->bytes);
    }
    w->bytes = bytes;
    w->capacity = capacity;
}

static void put(struct wire_writer *w, const void *p, size_t n) {
    reserve(w, n);
    if (w->failed) return;
    if (n) memcpy(w->bytes + w->length, p, n);
    w->length += n;
}

static void put_u32(struct wire_writer *w, uint32_t v) {
    uint8_t b[4] = { v, v >> 8, v >> 16, v >> 24 };
    put(w, b, 4);
}

static void put_u16(struct wire_writer *w, uint16_t v) {
    uint8_t b[2] = { v, v >> 8 };
    put(w, b, 2);
}

void wire_begin(struct wire_writer *w, uint8_t op) {
    memset(w, 0, sizeof *w);
    uint8_t head[6] = { 0, 0, 0, 0, 1, op };
    put(w, head, sizeof head);
}

void wire_dict_begin(struct wire_writer *w) {
    w->count_at = w->length;
    w->entries = 0;
    put_u32(w, 0);
}

void wire_dict_end(struct wire_writer *w) {
    if (w->failed) return;
    uint32_t n = w->entries;
    uint8_t *p = w->bytes + w->count_at;
    p[0] = n; p[1] = n >> 8; p[2] = n >> 16; p[3] = n >> 24;
}

static void key(struct wire_writer *w, const char *k, uint8_t type) {
    size_t n = strlen(k);
    put_u16(w, (uint16_t)n);
    put(w, k, n);
    put(w, &type, 1);
    w->entries++;
}

void wire_string(struct wire_writer *w, const char *k, const char *value) {
    key(w, k, VALUE_STRING);
    size_t n = strlen(value);
    put_u32(w, (uint32_t)n);
    put(w, value, n);
}

void wire_data(struct wire_writer *w, const char *k, const void *value, size_t length) {
    if (length > 2u * 1024 * 1024) { w->failed = 1; return; }
    key(w, k, VALUE_DATA);
    put_u32(w, (uint32_t)length);
    put(w, value, length);
}

void wire_int(struct wire_writer *w, const char *k, int64_t value) {
    key(w, k, VALUE_INT);
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)value >> (8 * i));
    put(w, b, 8);
}

void wire_bool(struct wire_writer *w, const char *k, int value) {
    key(w, k, VALUE_BOOL);
    uint8_t b = value ? 1 : 0;
    put(w, &b, 1);
}

void wire_free(struct wire_writer *w) {
    if (w->bytes) {
        wire_wipe(w->bytes, w->capacity);
        free(w->bytes);
    }
    memset(w, 0, sizeof *w);
}

/* MARK: reading, every length checked against what remains */

static int take(struct wire_answer *a, size_t n, const uint8_t **p) {
    if (n > a->length - a->offset) return -1;
    *p = a->bytes + a->offset;
    a->offset += n;
    return 0;
}

static int take_u32(struct wire_answer *a, uint32_t *v) {
    const uint8_t *p;
    if (take(a, 4, &p)) return -1;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return 0;
}

static int take_dict(struct wire_answer *a, struct wire_dict *d) {
    uint32_t count;
    if (take_u32(a, &count) || count > WIRE_MAX_ENTRIES) return -1;
    d->count = 0;
    for (uint32_t i = 0; i < count; i++) {
        struct wire_value *v = &d->entries[d->count];
        const uint8_t *p;
        if (take(a, 2, &p)) return -1;
        uint16_t klen = (uint16_t)(p[0] | p[1] << 8);
        if (klen == 0 || klen > 64 || take(a, klen, &p)) return -1;
        memcpy(v->key, p, klen);
        v->key[klen] = 0;
        if (take(a, 1, &p)) return -1;
        v->type = p[0];
        v->bytes = NULL;
        v->length = 0;
        v->number = 0;
        switch (v->type) {
        case VALUE_STRING: case VALUE_DATA:
            if (take_u32(a, &v->length) || take(a, v->length, &v->bytes)) return -1;
            break;
        case VALUE_INT: case VALUE_DATE:
            if (take(a, 8, &p)) return -1;
            for (int b = 0; b < 8; b++) v->number |= (int64_t)((uint64_t)p[b] << (8 * b));
            break;
        case VALUE_BOOL:
            if (take(a, 1, &p) || p[0] > 1) return -1;
            v->number = p[0];
            break;
        default:
            return -1;
        }
        d->count++;
    }
    return 0;
}

const struct wire_value *wire_find(const struct wire_dict *d, const char *k) {
    for (uint32_t i = 0; i < d->count; i++)
        if (strcmp(d->entries[i].key, k) == 0) return &d->entries[i];
    return NULL;
}

int wire_next_item(struct wire_answer *a, const uint8_t **data, uint32_t *length, struct wire_dict *dict) {
    const uint8_t *p;
    if (take(a, 1, &p)) return -1;
    switch (p[0]) {
    case 1: case 2:
        if (take_u32(a, length) || take(a, *length, data)) return -1;
        return p[0];
    case 3:
        if (!dict || take_dict(a, dict)) return -1;
        return 3;
    default:
        return -1;
    }
}

void wire_answer_free(struct wire_answer *a) {
    if (a->bytes) {
        wire_wipe(a->bytes, a->length);
        free(a->bytes);
    }
    memset(a, 0, sizeof *a);
}

/* MARK: the socket */

static int io_wait(int fd, short events, int timeout_ms) {
    struct pollfd p = { .fd = fd, .events = events };
    for (;;) {
        int r = poll(&p, 1, timeout_ms);
        if (r > 0) return 0;
        if (r == 0) return -1;
        if (errno != EINTR) return -1;
    }
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        if (io_wait(fd, POLLOUT, CALL_TIMEOUT_MS)) return -1;
        ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
        if (r < 0) { if (errno == EINTR || errno == EAGAIN) continue; return -1; }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int read_all(int fd, uint8_t *p, size_t n, int timeout_ms) {
    while (n > 0) {
        if (io_wait(fd, POLLIN, timeout_ms)) return -1;
        ssize_t r = recv(fd, p, n, 0);
        if (r == 0) return -1;
        if (r < 0) { if (errno == EINTR || errno == EAGAIN) continue; return -1; }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int private_directory(const char *dir) {
    struct stat st;
    return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() && (st.st_mode & 0777) == 0700;
}

int wire_socket_path(char *path, size_t size) {
    const char *given = secure_getenv("KEYCHAIN_SOCKET");
    int n;
    if (given && *given) n = snprintf(path, size, "%s", given);
    else if (getuid() == 0) n = snprintf(path, size, "/run/keychaind/keychaind.sock");
    else {
        const char *runtime = secure_getenv("XDG_RUNTIME_DIR");
        if (runtime && *runtime) n = snprintf(path, size, "%s/keychaind.sock", runtime);
        else {
            char dir[64];
            snprintf(dir, sizeof dir, "/tmp/keychaind-%u", (unsigned)getuid());
            /* A directory another user made first would let that user answer as keychaind;
             * keychaind then listens in the user's own state directory (DefaultPaths). */
            if (private_directory(dir)) n = snprintf(path, size, "%s/keychaind.sock", dir);
            else {
                char home_dir[4096];
                const char *state = secure_getenv("XDG_STATE_HOME");
                const char *home = secure_getenv("HOME");
                int m;
                if (state && state[0] == '/') m = snprintf(home_dir, sizeof home_dir, "%s/keychaind", state);
                else if (home && home[0] == '/' && home[1]) m = snprintf(home_dir, sizeof home_dir, "%s/.local/state/keychaind", home);
                else return 0;
                if (m <= 0 || (size_t)m >= sizeof home_dir || !private_directory(home_dir)) return 0;
                n = snprintf(path, size, "%s/keychaind.sock", home_dir);
            }
        }
    }
    return n > 0 && (size_t)n < size;
}

/* Whether `uid` may serve this process: root, its own uid, or the one KEYCHAIN_TRUST_UID names. */
static int trusted(uid_t uid) {
    if (uid == 0 || uid == getuid()) return 1;
    const char *named = secure_getenv("KEYCHAIN_TRUST_UID");
    if (!named || !*named) return 0;
    char *end;
    unsigned long number = strtoul(named, &end, 10);
    if (*end == 0) return number == uid;
    struct passwd pw, *found = NULL;
    char buffer[1024];
    if (getpwnam_r(named, &pw, buffer, sizeof buffer, &found) != 0 || !found) return 0;
    return found->pw_uid == uid;
}

int wire_connect(struct wire_connection *c) {
    c->fd = -1;
    c->timeout_ms = CALL_TIMEOUT_MS;
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    if (!wire_socket_path(address.sun_path, sizeof address.sun_path)) return -1;
    /* Close-on-exec: a program the host execs must not inherit its keychain connection. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) { close(fd); return -1; }
        int error = 0;
        socklen_t len = sizeof error;
        if (io_wait(fd, POLLOUT, 1000) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) || error) {
            close(fd);
            return -1;
        }
    }
    struct ucred peer;
    socklen_t len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || !trusted(peer.uid)) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    return 0;
}

void wire_probe(struct wire_connection *c) { c->timeout_ms = PROBE_TIMEOUT_MS; }

void wire_await_person(struct wire_connection *c, int awaiting) { c->timeout_ms = awaiting ? PERSON_TIMEOUT_MS : CALL_TIMEOUT_MS; }

void wire_close(struct wire_connection *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

static int parse_head(struct wire_answer *a) {
    const uint8_t *p;
    uint32_t message;
    if (take(a, 1, &p) || p[0] != 1) return -1;
    if (take(a, 4, &p)) return -1;
    a->status = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    if (take_u32(a, &message) || take(a, message, &p)) return -1;
    if (take(a, 1, &p) || p[0] > 3) return -1;
    a->kind = p[0];
    a->items = a->kind == 1 ? 1 : 0;
    if (a->kind >= 2 && take_u32(a, &a->items)) return -1;
    return 0;
}

int wire_read_answer(struct wire_connection *c, struct wire_answer *a) {
    wire_answer_free(a);
    uint8_t head[4];
    if (c->fd < 0 || read_all(c->fd, head, 4, c->timeout_ms)) goto fail;
    uint32_t length = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
    if (length == 0 || length > WIRE_MAX_RESPONSE) goto fail;
    a->bytes = malloc(length);
    if (!a->bytes) goto fail;
    a->length = length;
    if (read_all(c->fd, a->bytes, length, FRAME_TIMEOUT_MS) || parse_head(a)) goto fail;
    return 0;
fail:
    wire_answer_free(a);
    wire_close(c);
    return -1;
}

int wire_call(struct wire_connection *c, struct wire_writer *w, struct wire_answer *a) {
    memset(a, 0, sizeof *a);
    if (w->failed || c->fd < 0) return -1;
    uint32_t n = (uint32_t)(w->length - 4);
    w->bytes[0] = n; w->bytes[1] = n >> 8; w->bytes[2] = n >> 16; w->bytes[3] = n >> 24;
    if (write_all(c->fd, w->bytes, w->length)) { wire_close(c); return -1; }
    return wire_read_answer(c, a);
}
