/* libkeychaind-pkcs11.so: keychaind's keys for every PKCS#11 consumer (docs/pkcs11.md).
 *
 * Plain C with no runtime of its own, because p11-kit loads it into every process that asks,
 * root daemons included. It holds no private key: each signature and shared secret is made
 * inside keychaind, which the module reaches over its socket as the calling process, so that
 * process's access groups and the keychain's lock state decide. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <p11-kit/pkcs11.h>

#include "wire.h"

/* PKCS#11 3.0's, which p11-kit 0.24's 2.40 header lacks. */
#ifndef CKK_EC_MONTGOMERY
#define CKK_EC_MONTGOMERY 0x41UL
#endif

#define EXPORT __attribute__((visibility("default")))

#define SLOT_ID 1
#define MAX_SESSIONS 1024
/* Objects are never freed while the module is initialized (a handle another thread holds
 * stays valid memory), so their number is bounded. */
#define MAX_OBJECTS 8192
#define MAX_SIGNED_DATA (1024 * 1024)

enum { KEY_P256 = 73, KEY_ED25519 = 105, KEY_X25519 = 106 };

static const uint8_t OID_P256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07 };
static const uint8_t OID_ED25519[] = { 0x06, 0x03, 0x2b, 0x65, 0x70 };
static const uint8_t OID_X25519[] = { 0x06, 0x03, 0x2b, 0x65, 0x6e };
static const uint8_t NAME_ED25519[] = { 0x13, 0x0c, 'e', 'd', 'w', 'a', 'r', 'd', 's', '2', '5', '5', '1', '9' };

struct object {
    CK_OBJECT_CLASS class;
    int key_type;                /* keychaind's type for keys */
    uint8_t ref[20];             /* the item's persistent reference (token objects) */
    uint8_t id[20];              /* klbl, or a certificate's pkhh */
    size_t id_length;
    char label[256];
    size_t label_length;
    uint8_t public_key[65];      /* raw point (P-256 X9.63, 32 bytes for the 25519 keys) */
    size_t public_length;
    uint8_t *value;              /* a certificate's DER, or a derived secret (wiped) */
    size_t value_length;
    /* Offsets in a certificate's DER of its serial (the whole INTEGER), issuer and subject. */
    size_t serial_at, serial_length, issuer_at, issuer_length, subject_at, subject_length;
    int can_sign, can_derive, always_sensitive;
    CK_SESSION_HANDLE session;   /* non-zero: a session object (a derived secret) */
    int live;
    uint64_t listed;             /* the latest listing (its number) that showed it */
};

struct session {
    int open;
    CK_FLAGS flags;
    pthread_mutex_t lock;        /* one call at a time on a session, as the standard asks */
    struct wire_connection connection;
    CK_OBJECT_HANDLE *found;
    size_t found_count, found_position;
    int finding;
    int signing;
    CK_MECHANISM_TYPE mechanism;
    CK_OBJECT_HANDLE key;
    uint8_t *data;
    size_t data_length;
};

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static pid_t initialized_by;
static int logged_in;
static struct session *sessions[MAX_SESSIONS];
static struct object *objects[MAX_OBJECTS];
static size_t object_count;
/* Listings started, under state_lock: each listing's number. */
static uint64_t listings;

/* MARK: helpers */

static CK_RV unsupported(void) { return CKR_FUNCTION_NOT_SUPPORTED; }

/* Initialized, and by this process: a child after fork() must call C_Initialize again, and
 * never speaks on the sockets it inherited from its parent. */
static int ready(void) { return initialized && initialized_by == getpid(); }

/* The token has no random number generator (no CKF_RNG): a host takes its randomness from the
 * kernel, not over a socket. CKR_RANDOM_NO_RNG says exactly that; CKR_FUNCTION_NOT_SUPPORTED
 * made pkcs11-tool --test count an error where it skips a token without one. */
EXPORT CK_RV C_SeedRandom(CK_SESSION_HANDLE session, unsigned char *seed, unsigned long seed_len) {
    (void)session; (void)seed; (void)seed_len;
    return ready() ? CKR_RANDOM_NO_RNG : CKR_CRYPTOKI_NOT_INITIALIZED;
}
EXPORT CK_RV C_GenerateRandom(CK_SESSION_HANDLE session, unsigned char *random_data, unsigned long random_len) {
    (void)session; (void)random_data; (void)random_len;
    return ready() ? CKR_RANDOM_NO_RNG : CKR_CRYPTOKI_NOT_INITIALIZED;
}

static void pad(unsigned char *field, size_t size, const char *text) {
    memset(field, ' ', size);
    size_t n = strlen(text);
    memcpy(field, text, n < size ? n : size);
}

static void wipe_free(uint8_t *p, size_t n) {
    if (!p) return;
    wire_wipe(p, n);
    free(p);
}

/* keychaind's OSStatus as the PKCS#11 code a host understands (docs/pkcs11.md, "Errors"). */
static CK_RV error_of(int32_t status, CK_RV not_found) {
    switch (status) {
    case 0: return CKR_OK;
    case ERR_INTERACTION_NOT_ALLOWED: return CKR_USER_NOT_LOGGED_IN;
    /* Another group's key is not found, as for any keychain item. */
    case ERR_ITEM_NOT_FOUND: case ERR_MISSING_ENTITLEMENT: return not_found;
    case ERR_PARAM: return CKR_KEY_FUNCTION_NOT_PERMITTED;
    case ERR_SERVICE_NOT_AVAILABLE: return CKR_DEVICE_REMOVED;
    /* A key that asks first: the person declined keychaind's prompt (docs/pkcs11.md). */
    case ERR_USER_CANCELED: return CKR_FUNCTION_CANCELED;
    default: return CKR_FUNCTION_FAILED;
    }
}

static struct session *session_of(CK_SESSION_HANDLE handle) {
    if (handle == 0 || handle > MAX_SESSIONS) return NULL;
    pthread_mutex_lock(&state_lock);
    struct session *s = sessions[handle - 1];
    if (s && !s->open) s = NULL;
    pthread_mutex_unlock(&state_lock);
    return s;
}

/* Takes a session for the length of one call; NULL with *rv set when it cannot. */
static struct session *enter(CK_SESSION_HANDLE handle, CK_RV *rv) {
    if (!ready()) { *rv = CKR_CRYPTOKI_NOT_INITIALIZED; return NULL; }
    struct session *s = session_of(handle);
    if (!s) { *rv = CKR_SESSION_HANDLE_INVALID; return NULL; }
    pthread_mutex_lock(&s->lock);
    if (!s->open) { pthread_mutex_unlock(&s->lock); *rv = CKR_SESSION_HANDLE_INVALID; return NULL; }
    return s;
}

static void leave(struct session *s) { pthread_mutex_unlock(&s->lock); }

static int connected(struct session *s) {
    return s->connection.fd >= 0 || wire_connect(&s->connection) == 0;
}

static struct object *object_of(CK_OBJECT_HANDLE handle) {
    pthread_mutex_lock(&state_lock);
    struct object *o = handle > 0 && handle <= object_count ? objects[handle - 1] : NULL;
    /* A key a later search did not list (locked, deleted) keeps its handle: keychaind says
     * why it cannot be used. A destroyed derived secret is gone. */
    if (o && !o->live && o->session) o = NULL;
    pthread_mutex_unlock(&state_lock);
    return o;
}

/* Adds an object, or finds the one of that class and item already known. Returns its handle,
 * 0 when the table is full. Call with state_lock held. */
/* A token object a listing showed: found again by searches (state_lock held). The highest
 * listing number is kept, so an older listing that ends later cannot hide what a newer one
 * showed. */
static void mark_listed(struct object *o, uint64_t listing) {
    o->live = 1;
    if (o->listed < listing) o->listed = listing;
}

static CK_OBJECT_HANDLE remember(const struct object *o, int *fresh) {
    *fresh = 0;
    if (!o->session) {
        for (size_t i = 0; i < object_count; i++)
            if (!objects[i]->session && objects[i]->class == o->class && memcmp(objects[i]->ref, o->ref, 20) == 0) {
                mark_listed(objects[i], o->listed);
                return i + 1;
            }
    }
    if (object_count == MAX_OBJECTS) return 0;
    struct object *copy = malloc(sizeof *copy);
    if (!copy) return 0;
    *copy = *o;
    copy->live = 1;
    objects[object_count++] = copy;
    *fresh = 1;
    return object_count;
}

/* MARK: certificates: the DER fields PKCS#11 names */

/* One DER element at p (at most n bytes): its content's offset and length, and its total. */
static int der(const uint8_t *p, size_t n, size_t *content, size_t *length, size_t *total) {
    if (n < 2) return -1;
    size_t at = 2, len = p[1];
    if (len & 0x80) {
        size_t bytes = len & 0x7f;
        if (bytes == 0 || bytes > 3 || n < 2 + bytes) return -1;
        len = 0;
        for (size_t i = 0; i < bytes; i++) len = len << 8 | p[2 + i];
        at += bytes;
    }
    if (len > n - at) return -1;
    *content = at;
    *length = len;
    *total = at + len;
    return 0;
}

static int parse_certificate(struct object *o) {
    const uint8_t *p = o->value;
    size_t n = o->value_length, c, l, t;
    if (der(p, n, &c, &l, &t) || p[0] != 0x30) return -1;           /* Certificate */
    size_t at = c;
    if (der(p + at, n - at, &c, &l, &t) || p[at] != 0x30) return -1; /* TBSCertificate */
    size_t end = at + t;
    at += c;
    size_t fields[5][2];
    for (int i = 0; i < 5; i++) {
        if (at >= end || der(p + at, end - at, &c, &l, &t)) return -1;
        if (i == 0 && p[at] == 0xa0) { at += t; i--; continue; }    /* [0] version */
        fields[i][0] = at;
        fields[i][1] = t;
        at += t;
    }
    /* serial, signature algorithm, issuer, validity, subject */
    o->serial_at = fields[0][0]; o->serial_length = fields[0][1];
    o->issuer_at = fields[2][0]; o->issuer_length = fields[2][1];
    o->subject_at = fields[4][0]; o->subject_length = fields[4][1];
    return 0;
}

/* MARK: reading the keychain */

static void copy_label(struct object *o, const struct wire_dict *d) {
    const struct wire_value *v = wire_find(d, "labl");
    if (v && (v->type == VALUE_STRING || v->type == VALUE_DATA)) {
        o->label_length = v->length < sizeof o->label ? v->length : sizeof o->label;
        memcpy(o->label, v->bytes, o->label_length);
    }
}

static int flag(const struct wire_dict *d, const char *key) {
    const struct wire_value *v = wire_find(d, key);
    return v && (v->type == VALUE_INT || v->type == VALUE_BOOL) && v->number == 1;
}

static int public_key(struct session *s, const uint8_t ref[20], uint8_t *out, size_t *length) {
    struct wire_writer w;
    struct wire_answer a;
    wire_begin(&w, OP_KEY_PUBLIC);
    wire_dict_begin(&w);
    wire_data(&w, "v_PersistentRef", ref, 20);
    wire_dict_end(&w);
    int rc = wire_call(&s->connection, &w, &a);
    wire_free(&w);
    const uint8_t *bytes;
    uint32_t n;
    if (rc || a.status != 0 || a.kind != 1 || wire_next_item(&a, &bytes, &n, NULL) != 1 || n > 65) {
        wire_answer_free(&a);
        return -1;
    }
    memcpy(out, bytes, n);
    *length = n;
    wire_answer_free(&a);
    return 0;
}

/* A certificate item of a list answer as an object (its DER copied out of the answer). */
static void add_certificate(const struct wire_dict *d, uint64_t listing) {
    struct object o;
    memset(&o, 0, sizeof o);
    o.listed = listing;
    const struct wire_value *ref = wire_find(d, "v_PersistentRef");
    const struct wire_value *der_value = wire_find(d, "v_Data");
    const struct wire_value *hash = wire_find(d, "pkhh");
    if (!ref || ref->type != VALUE_DATA || ref->length != 20) return;
    if (!der_value || der_value->type != VALUE_DATA || der_value->length == 0) return;
    memcpy(o.ref, ref->bytes, 20);
    o.class = CKO_CERTIFICATE;
    pthread_mutex_lock(&state_lock);
    for (size_t i = 0; i < object_count; i++)
        if (objects[i]->class == CKO_CERTIFICATE && memcmp(objects[i]->ref, o.ref, 20) == 0) {
            mark_listed(objects[i], listing);
            pthread_mutex_unlock(&state_lock);
            return;
        }
    pthread_mutex_unlock(&state_lock);
    copy_label(&o, d);
    if (hash && hash->type == VALUE_DATA && hash->length <= 20) {
        memcpy(o.id, hash->bytes, hash->length);
        o.id_length = hash->length;
    }
    o.value = malloc(der_value->length);
    if (!o.value) return;
    memcpy(o.value, der_value->bytes, der_value->length);
    o.value_length = der_value->length;
    int fresh;
    if (!parse_certificate(&o)) {
        pthread_mutex_lock(&state_lock);
        remember(&o, &fresh);
        pthread_mutex_unlock(&state_lock);
        if (fresh) return;
    }
    free(o.value);
}

/* A private key item of a list answer: marks a known key's objects as listed, or fills `o`
 * for a new one (1), whose public key is read once the answer is complete. */
static int read_key(const struct wire_dict *d, struct object *o, uint64_t listing) {
    memset(o, 0, sizeof *o);
    o->listed = listing;
    const struct wire_value *ref = wire_find(d, "v_PersistentRef");
    const struct wire_value *type = wire_find(d, "type");
    const struct wire_value *klbl = wire_find(d, "klbl");
    if (!ref || ref->type != VALUE_DATA || ref->length != 20) return 0;
    if (!type || type->type != VALUE_INT || !klbl || klbl->type != VALUE_DATA || klbl->length > 20) return 0;
    if (type->number != KEY_P256 && type->number != KEY_ED25519 && type->number != KEY_X25519) return 0;
    int known = 0;
    pthread_mutex_lock(&state_lock);
    for (size_t i = 0; i < object_count; i++)
        if (!objects[i]->session && objects[i]->class != CKO_CERTIFICATE && memcmp(objects[i]->ref, ref->bytes, 20) == 0) {
            mark_listed(objects[i], listing);
            known = 1;
        }
    pthread_mutex_unlock(&state_lock);
    if (known) return 0;
    memcpy(o->ref, ref->bytes, 20);
    copy_label(o, d);
    o->key_type = (int)type->number;
    memcpy(o->id, klbl->bytes, klbl->length);
    o->id_length = klbl->length;
    o->can_sign = flag(d, "sign");
    o->can_derive = flag(d, "drve");
    o->always_sensitive = flag(d, "asen");
    return 1;
}

/* A new key's two objects, once its public key is read. */
static void add_key(struct session *s, struct object *o) {
    if (public_key(s, o->ref, o->public_key, &o->public_length)) return;
    int fresh;
    pthread_mutex_lock(&state_lock);
    o->class = CKO_PRIVATE_KEY;
    remember(o, &fresh);
    o->class = CKO_PUBLIC_KEY;
    remember(o, &fresh);
    pthread_mutex_unlock(&state_lock);
}

/* Lists the caller's private keys or certificates into the object table. A class the lock
 * keeps closed lists nothing: its items appear once the keychain is unlocked. */
static CK_RV list(struct session *s, int certificates) {
    struct wire_writer w;
    struct wire_answer a;
    wire_begin(&w, OP_COPY_MATCHING);
    wire_dict_begin(&w);
    wire_string(&w, "class", certificates ? "cert" : "keys");
    if (!certificates) wire_int(&w, "kcls", 1);
    wire_string(&w, "m_Limit", "m_LimitAll");
    wire_bool(&w, "r_Attributes", 1);
    /* Only a certificate's data: a key's bytes are never asked for, extractable or not. */
    if (certificates) wire_bool(&w, "r_Data", 1);
    wire_bool(&w, "r_PersistentRef", 1);
    wire_dict_end(&w);
    int rc = wire_call(&s->connection, &w, &a);
    wire_free(&w);
    if (rc) return CKR_DEVICE_REMOVED;
    /* Objects are hidden only once the whole listing is in, and only those neither it nor a
     * later one showed: hiding them all first, as this did, let another session's search,
     * run in between, find none of the token's objects. */
    pthread_mutex_lock(&state_lock);
    uint64_t listing = ++listings;
    pthread_mutex_unlock(&state_lock);
    struct wire_dict *d = malloc(sizeof *d);
    if (!d) { wire_answer_free(&a); return CKR_HOST_MEMORY; }
    /* New keys wait for the whole answer: nothing else may be sent while a long answer's
     * pages arrive, and their public keys take a call each. */
    struct object *fresh = NULL;
    size_t fresh_count = 0, fresh_capacity = 0;
    CK_RV rv = CKR_OK;
    for (;;) {
        if (a.status != 0) {
            rv = a.status == ERR_ITEM_NOT_FOUND || a.status == ERR_INTERACTION_NOT_ALLOWED ? CKR_OK : error_of(a.status, CKR_OK);
            break;
        }
        if (a.kind != 2 && a.kind != 3) { rv = CKR_DEVICE_ERROR; break; }
        for (uint32_t i = 0; i < a.items && rv == CKR_OK; i++) {
            const uint8_t *bytes;
            uint32_t n;
            if (wire_next_item(&a, &bytes, &n, d) != 3) { rv = CKR_DEVICE_ERROR; break; }
            if (certificates) { add_certificate(d, listing); continue; }
            if (fresh_count == fresh_capacity) {
                size_t capacity = fresh_capacity ? fresh_capacity * 2 : 8;
                struct object *grown = capacity <= MAX_OBJECTS ? realloc(fresh, capacity * sizeof *fresh) : NULL;
                if (!grown) { rv = CKR_DEVICE_MEMORY; break; }
                fresh = grown;
                fresh_capacity = capacity;
            }
            if (read_key(d, &fresh[fresh_count], listing)) fresh_count++;
        }
        if (rv != CKR_OK || a.kind == 2) break;
        if (wire_read_answer(&s->connection, &a)) { rv = CKR_DEVICE_REMOVED; break; }
    }
    wire_answer_free(&a);
    free(d);
    for (size_t i = 0; rv == CKR_OK && i < fresh_count; i++) add_key(s, &fresh[i]);
    free(fresh);
    if (rv != CKR_OK) return rv;
    /* What this listing does not show is no longer found by searches. */
    pthread_mutex_lock(&state_lock);
    for (size_t i = 0; i < object_count; i++)
        if (!objects[i]->session && (objects[i]->class == CKO_CERTIFICATE) == certificates && objects[i]->listed < listing)
            objects[i]->live = 0;
    pthread_mutex_unlock(&state_lock);
    return rv;
}

/* MARK: attributes */

struct attribute {
    const void *bytes;
    size_t length;
    int sensitive;
};

static const CK_BBOOL yes = CK_TRUE, no = CK_FALSE;

/* The value of `type` on `o`: 0 found, -1 the object has no such attribute. */
static int attribute_of(const struct object *o, CK_ATTRIBUTE_TYPE type, struct attribute *out, void *scratch) {
    memset(out, 0, sizeof *out);
#define VALUE(p, n) do { out->bytes = (p); out->length = (n); return 0; } while (0)
#define ULONG(v) do { CK_ULONG x = (v); memcpy(scratch, &x, sizeof x); VALUE(scratch, sizeof x); } while (0)
#define BOOL(v) VALUE((v) ? &yes : &no, sizeof(CK_BBOOL))
    switch (type) {
    case CKA_CLASS: ULONG(o->class);
    case CKA_TOKEN: BOOL(!o->session);
    case CKA_PRIVATE: BOOL(0);
    case CKA_MODIFIABLE: case CKA_COPYABLE: case CKA_DESTROYABLE: BOOL(o->session != 0);
    case CKA_LABEL: VALUE(o->label, o->label_length);
    case CKA_ID: VALUE(o->id, o->id_length);
    }
    if (o->class == CKO_CERTIFICATE) {
        switch (type) {
        case CKA_CERTIFICATE_TYPE: ULONG(CKC_X_509);
        case CKA_CERTIFICATE_CATEGORY: ULONG(0);
        case CKA_TRUSTED: BOOL(0);
        case CKA_VALUE: VALUE(o->value, o->value_length);
        case CKA_SUBJECT: VALUE(o->value + o->subject_at, o->subject_length);
        case CKA_ISSUER: VALUE(o->value + o->issuer_at, o->issuer_length);
        case CKA_SERIAL_NUMBER: VALUE(o->value + o->serial_at, o->serial_length);
        }
        return -1;
    }
    if (o->class == CKO_SECRET_KEY) {
        switch (type) {
        case CKA_KEY_TYPE: ULONG(CKK_GENERIC_SECRET);
        case CKA_VALUE: VALUE(o->value, o->value_length);
        case CKA_VALUE_LEN: ULONG(o->value_length);
        case CKA_SENSITIVE: case CKA_ALWAYS_SENSITIVE: case CKA_NEVER_EXTRACTABLE: BOOL(0);
        case CKA_EXTRACTABLE: BOOL(1);
        case CKA_LOCAL: BOOL(0);
        case CKA_DERIVE: case CKA_SIGN: case CKA_VERIFY: case CKA_ENCRYPT: case CKA_DECRYPT:
        case CKA_WRAP: case CKA_UNWRAP: BOOL(0);
        }
        return -1;
    }
    /* A key. */
    const uint8_t *oid = o->key_type == KEY_P256 ? OID_P256 : o->key_type == KEY_ED25519 ? OID_ED25519 : OID_X25519;
    size_t oid_length = o->key_type == KEY_P256 ? sizeof OID_P256 : sizeof OID_ED25519;
    switch (type) {
    case CKA_KEY_TYPE: ULONG(o->key_type == KEY_P256 ? CKK_EC : o->key_type == KEY_ED25519 ? CKK_EC_EDWARDS : CKK_EC_MONTGOMERY);
    case CKA_EC_PARAMS: VALUE(oid, oid_length);
    case CKA_LOCAL: BOOL(0);
    case CKA_KEY_GEN_MECHANISM: ULONG(CK_UNAVAILABLE_INFORMATION);
    case CKA_DERIVE: BOOL(o->can_derive);
    case CKA_START_DATE: case CKA_END_DATE: VALUE(NULL, 0);
    case CKA_ENCRYPT: case CKA_DECRYPT: case CKA_WRAP: case CKA_UNWRAP:
    case CKA_SIGN_RECOVER: case CKA_VERIFY_RECOVER: BOOL(0);
    }
    if (o->class == CKO_PUBLIC_KEY) {
        switch (type) {
        case CKA_VERIFY: BOOL(o->can_sign);
        case CKA_TRUSTED: BOOL(0);
        case CKA_EC_POINT: {
            /* DER OCTET STRING of the point, as other modules answer. */
            uint8_t *p = scratch;
            p[0] = 0x04;
            p[1] = (uint8_t)o->public_length;
            memcpy(p + 2, o->public_key, o->public_length);
            VALUE(p, o->public_length + 2);
        }
        }
        return -1;
    }
    switch (type) {
    case CKA_SIGN: BOOL(o->can_sign);
    case CKA_SENSITIVE: BOOL(1);
    case CKA_EXTRACTABLE: BOOL(0);
    case CKA_ALWAYS_SENSITIVE: case CKA_NEVER_EXTRACTABLE: BOOL(o->always_sensitive);
    case CKA_ALWAYS_AUTHENTICATE: case CKA_WRAP_WITH_TRUSTED: BOOL(0);
    case CKA_VALUE: out->sensitive = 1; return 0;
    }
    return -1;
#undef VALUE
#undef ULONG
#undef BOOL
}

static int matches(const struct object *o, CK_ATTRIBUTE *template, CK_ULONG count) {
    uint8_t scratch[80];
    for (CK_ULONG i = 0; i < count; i++) {
        struct attribute a;
        if (attribute_of(o, template[i].type, &a, scratch) || a.sensitive) return 0;
        if (a.length != template[i].ulValueLen) return 0;
        if (a.length && memcmp(a.bytes, template[i].pValue, a.length) != 0) return 0;
    }
    return 1;
}

/* MARK: general */

static void after_fork_in_child(void) {
    /* The child holds a copy of the state its parent had; it is dropped, never used, at its
     * C_Initialize. The lock is made anew: another thread of the parent may have held it. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    state_lock = fresh;
}

static pthread_once_t fork_hook = PTHREAD_ONCE_INIT;
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

static void drop_state(int polite) {
    for (size_t i = 0; i < MAX_SESSIONS; i++) {
        struct session *s = sessions[i];
        if (!s) continue;
        /* A child closes its copies of the parent's sockets without a word on them. */
        wire_close(&s->connection);
        free(s->found);
        wipe_free(s->data, s->data_length);
        if (polite) pthread_mutex_destroy(&s->lock);
        free(s);
        sessions[i] = NULL;
    }
    for (size_t i = 0; i < object_count; i++) {
        if (objects[i]->class == CKO_SECRET_KEY) wipe_free(objects[i]->value, objects[i]->value_length);
        else free(objects[i]->value);
        free(objects[i]);
        objects[i] = NULL;
    }
    object_count = 0;
    logged_in = 0;
}

EXPORT CK_RV C_Initialize(void *init_args) {
    pthread_once(&fork_hook, install_fork_hook);
    CK_C_INITIALIZE_ARGS *args = init_args;
    if (args) {
        if (args->pReserved) return CKR_ARGUMENTS_BAD;
        int some = args->CreateMutex || args->DestroyMutex || args->LockMutex || args->UnlockMutex;
        int all = args->CreateMutex && args->DestroyMutex && args->LockMutex && args->UnlockMutex;
        if (some && !all) return CKR_ARGUMENTS_BAD;
        /* The module locks with pthreads: it can honour OS locking, not the host's callbacks alone. */
        if (all && !(args->flags & CKF_OS_LOCKING_OK)) return CKR_CANT_LOCK;
    }
    pthread_mutex_lock(&state_lock);
    if (initialized && initialized_by == getpid()) {
        pthread_mutex_unlock(&state_lock);
        return CKR_CRYPTOKI_ALREADY_INITIALIZED;
    }
    if (initialized) drop_state(0);   /* a child after fork */
    /* Never connects here: the first slot call does, so a host that loads every registered
     * module pays nothing for this one and never waits on a daemon. */
    initialized = 1;
    initialized_by = getpid();
    pthread_mutex_unlock(&state_lock);
    return CKR_OK;
}

EXPORT CK_RV C_Finalize(void *reserved) {
    if (reserved) return CKR_ARGUMENTS_BAD;
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    pthread_mutex_lock(&state_lock);
    drop_state(1);
    initialized = 0;
    pthread_mutex_unlock(&state_lock);
    return CKR_OK;
}

EXPORT CK_RV C_GetInfo(CK_INFO *info) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!info) return CKR_ARGUMENTS_BAD;
    memset(info, 0, sizeof *info);
    info->cryptokiVersion.major = 2;
    info->cryptokiVersion.minor = 40;
    pad(info->manufacturerID, sizeof info->manufacturerID, "keychaind");
    pad(info->libraryDescription, sizeof info->libraryDescription, "keychaind PKCS#11 module");
    info->libraryVersion.major = 0;
    info->libraryVersion.minor = 1;
    return CKR_OK;
}

/* Whether keychaind answers this process now (a status call on a connection of its own),
 * and whether it says locked. */
static int daemon_answers(int *locked) {
    struct wire_connection c;
    if (wire_connect(&c)) return 0;
    wire_probe(&c);
    struct wire_writer w;
    struct wire_answer a;
    wire_begin(&w, OP_STATUS);
    int rc = wire_call(&c, &w, &a);
    wire_free(&w);
    /* Only a well-formed status answer, with its state, counts as keychaind. */
    int answers = 0;
    struct wire_dict *d = malloc(sizeof *d);
    const uint8_t *b;
    uint32_t n;
    if (d && rc == 0 && a.status == 0 && a.kind == 1 && wire_next_item(&a, &b, &n, d) == 3 && a.offset == a.length) {
        const struct wire_value *state = wire_find(d, "state");
        answers = state && state->type == VALUE_STRING;
        if (answers && locked) *locked = !(state->length == 8 && memcmp(state->bytes, "unlocked", 8) == 0);
    }
    free(d);
    wire_answer_free(&a);
    wire_close(&c);
    return answers;
}

EXPORT CK_RV C_GetSlotList(CK_BBOOL token_present, CK_SLOT_ID *list, CK_ULONG *count) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!count) return CKR_ARGUMENTS_BAD;
    /* No daemon: the slot is empty, and that is not an error for the host. */
    CK_ULONG n = !token_present || daemon_answers(NULL) ? 1 : 0;
    if (list && *count < n) { *count = n; return CKR_BUFFER_TOO_SMALL; }
    if (list && n) list[0] = SLOT_ID;
    *count = n;
    return CKR_OK;
}

EXPORT CK_RV C_GetSlotInfo(CK_SLOT_ID slot, CK_SLOT_INFO *info) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (slot != SLOT_ID) return CKR_SLOT_ID_INVALID;
    if (!info) return CKR_ARGUMENTS_BAD;
    memset(info, 0, sizeof *info);
    pad(info->slotDescription, sizeof info->slotDescription, "keychaind");
    pad(info->manufacturerID, sizeof info->manufacturerID, "keychaind");
    info->flags = CKF_REMOVABLE_DEVICE | (daemon_answers(NULL) ? CKF_TOKEN_PRESENT : 0);
    return CKR_OK;
}

EXPORT CK_RV C_GetTokenInfo(CK_SLOT_ID slot, CK_TOKEN_INFO *info) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (slot != SLOT_ID) return CKR_SLOT_ID_INVALID;
    if (!info) return CKR_ARGUMENTS_BAD;
    if (!daemon_answers(NULL)) return CKR_TOKEN_NOT_PRESENT;
    memset(info, 0, sizeof *info);
    /* Fixed, so that a pkcs11: URI naming the token works for every user and machine: the
     * token is whichever keychain this process's socket names. */
    pad(info->label, sizeof info->label, "keychaind");
    pad(info->manufacturerID, sizeof info->manufacturerID, "keychaind");
    pad(info->model, sizeof info->model, "keychain");
    pad(info->serialNumber, sizeof info->serialNumber, "0000000000000001");
    /* The passcode is asked by keychaind itself (the protected path); no PIN is ever taken. */
    info->flags = CKF_TOKEN_INITIALIZED | CKF_USER_PIN_INITIALIZED | CKF_PROTECTED_AUTHENTICATION_PATH;
    info->ulMaxSessionCount = MAX_SESSIONS;
    info->ulMaxRwSessionCount = MAX_SESSIONS;
    pthread_mutex_lock(&state_lock);
    for (size_t i = 0; i < MAX_SESSIONS; i++)
        if (sessions[i] && sessions[i]->open) {
            info->ulSessionCount++;
            if (sessions[i]->flags & CKF_RW_SESSION) info->ulRwSessionCount++;
        }
    pthread_mutex_unlock(&state_lock);
    info->ulMaxPinLen = 0;
    info->ulMinPinLen = 0;
    info->ulTotalPublicMemory = CK_UNAVAILABLE_INFORMATION;
    info->ulFreePublicMemory = CK_UNAVAILABLE_INFORMATION;
    info->ulTotalPrivateMemory = CK_UNAVAILABLE_INFORMATION;
    info->ulFreePrivateMemory = CK_UNAVAILABLE_INFORMATION;
    return CKR_OK;
}

static const CK_MECHANISM_TYPE mechanisms[] = {
    CKM_ECDSA, CKM_ECDSA_SHA256, CKM_EDDSA, CKM_ECDH1_DERIVE, CKM_EC_KEY_PAIR_GEN, CKM_EC_EDWARDS_KEY_PAIR_GEN,
};

EXPORT CK_RV C_GetMechanismList(CK_SLOT_ID slot, CK_MECHANISM_TYPE *list, CK_ULONG *count) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (slot != SLOT_ID) return CKR_SLOT_ID_INVALID;
    if (!count) return CKR_ARGUMENTS_BAD;
    CK_ULONG n = sizeof mechanisms / sizeof mechanisms[0];
    if (list && *count < n) { *count = n; return CKR_BUFFER_TOO_SMALL; }
    if (list) memcpy(list, mechanisms, sizeof mechanisms);
    *count = n;
    return CKR_OK;
}

EXPORT CK_RV C_GetMechanismInfo(CK_SLOT_ID slot, CK_MECHANISM_TYPE type, CK_MECHANISM_INFO *info) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (slot != SLOT_ID) return CKR_SLOT_ID_INVALID;
    if (!info) return CKR_ARGUMENTS_BAD;
    CK_FLAGS ec = CKF_EC_F_P | CKF_EC_NAMEDCURVE | CKF_EC_UNCOMPRESS;
    info->ulMinKeySize = 256;
    info->ulMaxKeySize = 256;
    switch (type) {
    case CKM_ECDSA: case CKM_ECDSA_SHA256: info->flags = CKF_SIGN | ec; break;
    case CKM_EDDSA: info->flags = CKF_SIGN; break;
    case CKM_ECDH1_DERIVE: info->flags = CKF_DERIVE | ec; break;
    case CKM_EC_KEY_PAIR_GEN: info->flags = CKF_GENERATE_KEY_PAIR | ec; break;
    case CKM_EC_EDWARDS_KEY_PAIR_GEN: info->flags = CKF_GENERATE_KEY_PAIR; break;
    default: return CKR_MECHANISM_INVALID;
    }
    return CKR_OK;
}

/* MARK: sessions */

static void end_signing(struct session *s) {
    s->signing = 0;
    wipe_free(s->data, s->data_length);
    s->data = NULL;
    s->data_length = 0;
}


EXPORT CK_RV C_OpenSession(CK_SLOT_ID slot, CK_FLAGS flags, void *application, CK_NOTIFY notify, CK_SESSION_HANDLE *handle) {
    (void)application; (void)notify;
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (slot != SLOT_ID) return CKR_SLOT_ID_INVALID;
    if (!(flags & CKF_SERIAL_SESSION)) return CKR_SESSION_PARALLEL_NOT_SUPPORTED;
    if (!handle) return CKR_ARGUMENTS_BAD;
    /* Each session has its own connection, so that threads signing in their own sessions
     * run in parallel in keychaind too. */
    struct wire_connection connection;
    if (wire_connect(&connection)) return CKR_TOKEN_NOT_PRESENT;
    pthread_mutex_lock(&state_lock);
    for (size_t i = 0; i < MAX_SESSIONS; i++) {
        struct session *s = sessions[i];
        /* A closed session's memory is used again, never freed before C_Finalize: a thread
         * still holding its old handle finds it closed, not freed. */
        if (s && s->open) continue;
        if (!s) {
            s = calloc(1, sizeof *s);
            if (!s) break;
            pthread_mutex_init(&s->lock, NULL);
            sessions[i] = s;
        }
        pthread_mutex_lock(&s->lock);
        s->connection = connection;
        s->flags = flags;
        s->finding = s->signing = 0;
        s->open = 1;
        pthread_mutex_unlock(&s->lock);
        *handle = i + 1;
        pthread_mutex_unlock(&state_lock);
        return CKR_OK;
    }
    pthread_mutex_unlock(&state_lock);
    wire_close(&connection);
    return CKR_SESSION_COUNT;
}

static void end_session(CK_SESSION_HANDLE handle) {
    pthread_mutex_lock(&state_lock);
    struct session *s = sessions[handle - 1];
    /* Its derived secrets go with it. */
    for (size_t i = 0; i < object_count; i++)
        if (objects[i]->session == handle && objects[i]->live) {
            objects[i]->live = 0;
            wire_wipe(objects[i]->value, objects[i]->value_length);
        }
    int any = 0;
    for (size_t i = 0; i < MAX_SESSIONS; i++) any |= sessions[i] && sessions[i]->open && sessions[i] != s;
    if (!any) logged_in = 0;
    pthread_mutex_unlock(&state_lock);
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->open = 0;
    wire_close(&s->connection);
    free(s->found);
    s->found = NULL;
    s->finding = 0;
    end_signing(s);
    pthread_mutex_unlock(&s->lock);
}

EXPORT CK_RV C_CloseSession(CK_SESSION_HANDLE handle) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!session_of(handle)) return CKR_SESSION_HANDLE_INVALID;
    end_session(handle);
    return CKR_OK;
}

EXPORT CK_RV C_CloseAllSessions(CK_SLOT_ID slot) {
    if (!ready()) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (slot != SLOT_ID) return CKR_SLOT_ID_INVALID;
    for (CK_SESSION_HANDLE h = 1; h <= MAX_SESSIONS; h++)
        if (session_of(h)) end_session(h);
    return CKR_OK;
}

EXPORT CK_RV C_GetSessionInfo(CK_SESSION_HANDLE handle, CK_SESSION_INFO *info) {
    CK_RV rv;
    if (!info) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    info->slotID = SLOT_ID;
    info->flags = s->flags;
    info->ulDeviceError = 0;
    int rw = s->flags & CKF_RW_SESSION;
    info->state = logged_in ? (rw ? CKS_RW_USER_FUNCTIONS : CKS_RO_USER_FUNCTIONS) : (rw ? CKS_RW_PUBLIC_SESSION : CKS_RO_PUBLIC_SESSION);
    leave(s);
    return CKR_OK;
}

/* The PIN is never used as the passcode, nor sent anywhere: the keychain's passcode is asked
 * by keychaind (unlockPrompt) when it is locked, so it never passes through the host. */
EXPORT CK_RV C_Login(CK_SESSION_HANDLE handle, CK_USER_TYPE user, unsigned char *pin, unsigned long pin_length) {
    (void)pin; (void)pin_length;
    CK_RV rv;
    /* No security officer: the keychain's admin calls are keychain's, not the module's. */
    if (user != CKU_USER && user != CKU_CONTEXT_SPECIFIC) return CKR_USER_TYPE_INVALID;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    int locked = 0;
    if (!daemon_answers(&locked)) rv = CKR_DEVICE_REMOVED;
    else if (locked) {
        struct wire_writer w;
        struct wire_answer a;
        wire_begin(&w, OP_UNLOCK_PROMPT);  /* keychaind asks the person itself */
        if (!connected(s)) rv = CKR_DEVICE_REMOVED;
        else {
            wire_await_person(&s->connection, 1);
            rv = wire_call(&s->connection, &w, &a) ? CKR_DEVICE_REMOVED
               : a.status == 0 ? CKR_OK : a.status == -128 ? CKR_FUNCTION_CANCELED
               : a.status == -25293 ? CKR_PIN_INCORRECT : CKR_FUNCTION_NOT_SUPPORTED;
            wire_await_person(&s->connection, 0);
        }
        wire_free(&w);
        wire_answer_free(&a);
    } else rv = CKR_OK;
    leave(s);
    if (rv == CKR_OK) {
        pthread_mutex_lock(&state_lock);
        if (logged_in && user == CKU_USER) rv = CKR_USER_ALREADY_LOGGED_IN;
        logged_in = 1;
        pthread_mutex_unlock(&state_lock);
    }
    return rv;
}

/* Never locks the keychain: other programs use it too. */
EXPORT CK_RV C_Logout(CK_SESSION_HANDLE handle) {
    CK_RV rv;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    leave(s);
    pthread_mutex_lock(&state_lock);
    rv = logged_in ? CKR_OK : CKR_USER_NOT_LOGGED_IN;
    logged_in = 0;
    pthread_mutex_unlock(&state_lock);
    return rv;
}

/* MARK: objects */

EXPORT CK_RV C_FindObjectsInit(CK_SESSION_HANDLE handle, CK_ATTRIBUTE *template, CK_ULONG count) {
    CK_RV rv;
    if (count && !template) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (s->finding || s->signing) { leave(s); return CKR_OPERATION_ACTIVE; }
    if (!connected(s)) { leave(s); return CKR_DEVICE_REMOVED; }
    /* Whatever the template, both lists are read: an object must not vanish from a search
     * because a listing of another class failed. */
    rv = list(s, 0);
    if (rv == CKR_OK) rv = list(s, 1);
    if (rv != CKR_OK) { leave(s); return rv; }
    pthread_mutex_lock(&state_lock);
    free(s->found);
    s->found = malloc((object_count ? object_count : 1) * sizeof *s->found);
    s->found_count = s->found_position = 0;
    for (size_t i = 0; s->found && i < object_count; i++) {
        struct object *o = objects[i];
        if (!o->live || (o->session && o->session != handle)) continue;
        if (matches(o, template, count)) s->found[s->found_count++] = i + 1;
    }
    pthread_mutex_unlock(&state_lock);
    if (!s->found) { leave(s); return CKR_HOST_MEMORY; }
    s->finding = 1;
    leave(s);
    return CKR_OK;
}

EXPORT CK_RV C_FindObjects(CK_SESSION_HANDLE handle, CK_OBJECT_HANDLE *out, CK_ULONG max, CK_ULONG *count) {
    CK_RV rv;
    if (!out || !count) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (!s->finding) { leave(s); return CKR_OPERATION_NOT_INITIALIZED; }
    CK_ULONG n = 0;
    while (n < max && s->found_position < s->found_count) out[n++] = s->found[s->found_position++];
    *count = n;
    leave(s);
    return CKR_OK;
}

EXPORT CK_RV C_FindObjectsFinal(CK_SESSION_HANDLE handle) {
    CK_RV rv;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    rv = s->finding ? CKR_OK : CKR_OPERATION_NOT_INITIALIZED;
    s->finding = 0;
    free(s->found);
    s->found = NULL;
    leave(s);
    return rv;
}

EXPORT CK_RV C_GetAttributeValue(CK_SESSION_HANDLE handle, CK_OBJECT_HANDLE object, CK_ATTRIBUTE *template, CK_ULONG count) {
    CK_RV rv;
    if (count && !template) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    leave(s);
    struct object *o = object_of(object);
    if (!o || (o->session && o->session != handle)) return CKR_OBJECT_HANDLE_INVALID;
    rv = CKR_OK;
    uint8_t scratch[80];
    for (CK_ULONG i = 0; i < count; i++) {
        struct attribute a;
        if (attribute_of(o, template[i].type, &a, scratch)) {
            template[i].ulValueLen = CK_UNAVAILABLE_INFORMATION;
            rv = CKR_ATTRIBUTE_TYPE_INVALID;
        } else if (a.sensitive) {
            template[i].ulValueLen = CK_UNAVAILABLE_INFORMATION;
            if (rv == CKR_OK) rv = CKR_ATTRIBUTE_SENSITIVE;
        } else if (!template[i].pValue) {
            template[i].ulValueLen = a.length;
        } else if (template[i].ulValueLen < a.length) {
            template[i].ulValueLen = CK_UNAVAILABLE_INFORMATION;
            if (rv == CKR_OK) rv = CKR_BUFFER_TOO_SMALL;
        } else {
            if (a.length) memcpy(template[i].pValue, a.bytes, a.length);
            template[i].ulValueLen = a.length;
        }
    }
    return rv;
}

EXPORT CK_RV C_DestroyObject(CK_SESSION_HANDLE handle, CK_OBJECT_HANDLE object) {
    CK_RV rv;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    leave(s);
    pthread_mutex_lock(&state_lock);
    struct object *o = object > 0 && object <= object_count ? objects[object - 1] : NULL;
    if (!o || !o->live || (o->session && o->session != handle)) rv = CKR_OBJECT_HANDLE_INVALID;
    /* Keychain items are deleted with keychain's own tools (docs/pkcs11.md). */
    else if (!o->session) rv = CKR_ACTION_PROHIBITED;
    else {
        o->live = 0;
        wire_wipe(o->value, o->value_length);
        rv = CKR_OK;
    }
    pthread_mutex_unlock(&state_lock);
    return rv;
}

/* MARK: signatures */

static const char *algorithm_of(CK_MECHANISM_TYPE mechanism) {
    switch (mechanism) {
    case CKM_ECDSA: return "algid:sign:ECDSA:digest-X962:SHA256";
    case CKM_ECDSA_SHA256: return "algid:sign:ECDSA:message-X962:SHA256";
    case CKM_EDDSA: return "algid:sign:EdDSA:message-Ed25519";
    default: return NULL;
    }
}

EXPORT CK_RV C_SignInit(CK_SESSION_HANDLE handle, CK_MECHANISM *mechanism, CK_OBJECT_HANDLE key) {
    CK_RV rv;
    if (!mechanism) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (s->signing || s->finding) { leave(s); return CKR_OPERATION_ACTIVE; }
    struct object *o = object_of(key);
    if (!o || o->class != CKO_PRIVATE_KEY) rv = CKR_KEY_HANDLE_INVALID;
    else if (!algorithm_of(mechanism->mechanism)) rv = CKR_MECHANISM_INVALID;
    else if ((mechanism->mechanism == CKM_EDDSA) != (o->key_type == KEY_ED25519) || o->key_type == KEY_X25519)
        rv = CKR_KEY_TYPE_INCONSISTENT;
    /* Ed25519ctx and Ed25519ph (CK_EDDSA_PARAMS) are not offered: pure Ed25519 only. */
    else if (mechanism->mechanism == CKM_EDDSA && mechanism->pParameter) rv = CKR_MECHANISM_PARAM_INVALID;
    else if (!o->can_sign) rv = CKR_KEY_FUNCTION_NOT_PERMITTED;
    else {
        s->signing = 1;
        s->mechanism = mechanism->mechanism;
        s->key = key;
        s->data_length = 0;
        rv = CKR_OK;
    }
    leave(s);
    return rv;
}

/* ECDSA's DER SEQUENCE { r INTEGER, s INTEGER } as PKCS#11's r ‖ s, 32 bytes each. */
static int raw_ecdsa(const uint8_t *p, size_t n, uint8_t out[64]) {
    size_t c, l, t;
    if (der(p, n, &c, &l, &t) || p[0] != 0x30 || t != n) return -1;
    size_t at = c;
    for (int i = 0; i < 2; i++) {
        if (at >= n || der(p + at, n - at, &c, &l, &t) || p[at] != 0x02) return -1;
        const uint8_t *v = p + at + c;
        while (l > 0 && v[0] == 0) { v++; l--; }
        if (l > 32) return -1;
        memset(out + 32 * i, 0, 32);
        memcpy(out + 32 * i + 32 - l, v, l);
        at += t;
    }
    return at == n ? 0 : -1;
}

static CK_RV sign(struct session *s, const uint8_t *data, size_t length, uint8_t *signature, CK_ULONG *signature_length) {
    struct object *o = object_of(s->key);
    if (!o) return CKR_KEY_HANDLE_INVALID;
    uint8_t digest[32];
    if (s->mechanism == CKM_ECDSA) {
        /* ECDSA uses the digest's leftmost 256 bits; a shorter one is the same number padded. */
        if (length == 0) return CKR_DATA_LEN_RANGE;
        memset(digest, 0, sizeof digest);
        if (length >= 32) memcpy(digest, data, 32);
        else memcpy(digest + 32 - length, data, length);
        data = digest;
        length = 32;
    }
    if (!connected(s)) return CKR_DEVICE_REMOVED;
    struct wire_writer w;
    struct wire_answer a;
    wire_begin(&w, OP_KEY_SIGN);
    wire_dict_begin(&w);
    wire_data(&w, "v_PersistentRef", o->ref, 20);
    wire_dict_end(&w);
    wire_dict_begin(&w);
    wire_string(&w, "algorithm", algorithm_of(s->mechanism));
    wire_data(&w, "data", data, length);
    wire_dict_end(&w);
    int rc = wire_call(&s->connection, &w, &a);
    wire_free(&w);
    if (rc) return CKR_DEVICE_REMOVED;
    CK_RV rv = error_of(a.status, CKR_KEY_HANDLE_INVALID);
    const uint8_t *bytes;
    uint32_t n;
    if (rv == CKR_OK) {
        if (a.kind != 1 || wire_next_item(&a, &bytes, &n, NULL) != 1) rv = CKR_DEVICE_ERROR;
        else if (s->mechanism == CKM_EDDSA) {
            if (n != 64) rv = CKR_DEVICE_ERROR;
            else memcpy(signature, bytes, 64);
        } else if (raw_ecdsa(bytes, n, signature)) rv = CKR_DEVICE_ERROR;
    }
    if (rv == CKR_OK) *signature_length = 64;
    wire_answer_free(&a);
    return rv;
}

/* The usual two calls: a NULL buffer asks the length (64 for every mechanism here) and keeps
 * the operation; a short one is CKR_BUFFER_TOO_SMALL and keeps it too. */
static int length_only(uint8_t *signature, CK_ULONG *signature_length, CK_RV *rv) {
    if (!signature) { *signature_length = 64; *rv = CKR_OK; return 1; }
    if (*signature_length < 64) { *signature_length = 64; *rv = CKR_BUFFER_TOO_SMALL; return 1; }
    return 0;
}

EXPORT CK_RV C_Sign(CK_SESSION_HANDLE handle, unsigned char *data, unsigned long length, unsigned char *signature, unsigned long *signature_length) {
    CK_RV rv;
    if (!signature_length || (!data && length)) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (!s->signing) { leave(s); return CKR_OPERATION_NOT_INITIALIZED; }
    if (length_only(signature, signature_length, &rv)) { leave(s); return rv; }
    if (length > MAX_SIGNED_DATA) rv = CKR_DATA_LEN_RANGE;
    else rv = sign(s, data, length, signature, signature_length);
    end_signing(s);
    leave(s);
    return rv;
}

EXPORT CK_RV C_SignUpdate(CK_SESSION_HANDLE handle, unsigned char *part, unsigned long length) {
    CK_RV rv;
    if (!part && length) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (!s->signing) { leave(s); return CKR_OPERATION_NOT_INITIALIZED; }
    if (s->data_length + length > MAX_SIGNED_DATA) { end_signing(s); leave(s); return CKR_DATA_LEN_RANGE; }
    uint8_t *grown = malloc(s->data_length + length + 1);
    if (!grown) { end_signing(s); leave(s); return CKR_HOST_MEMORY; }
    if (s->data) memcpy(grown, s->data, s->data_length);
    if (length) memcpy(grown + s->data_length, part, length);
    wipe_free(s->data, s->data_length);
    s->data = grown;
    s->data_length += length;
    leave(s);
    return CKR_OK;
}

EXPORT CK_RV C_SignFinal(CK_SESSION_HANDLE handle, unsigned char *signature, unsigned long *signature_length) {
    CK_RV rv;
    if (!signature_length) return CKR_ARGUMENTS_BAD;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (!s->signing) { leave(s); return CKR_OPERATION_NOT_INITIALIZED; }
    if (length_only(signature, signature_length, &rv)) { leave(s); return rv; }
    rv = sign(s, s->data, s->data_length, signature, signature_length);
    end_signing(s);
    leave(s);
    return rv;
}

/* MARK: making keys inside keychaind */

static const CK_ATTRIBUTE *find_attribute(const CK_ATTRIBUTE *t, CK_ULONG n, CK_ATTRIBUTE_TYPE type) {
    for (CK_ULONG i = 0; t && i < n; i++) if (t[i].type == type) return &t[i];
    return NULL;
}

static int same(const CK_ATTRIBUTE *a, const uint8_t *bytes, size_t n) {
    return a->ulValueLen == n && memcmp(a->pValue, bytes, n) == 0;
}

EXPORT CK_RV C_GenerateKeyPair(CK_SESSION_HANDLE handle, CK_MECHANISM *mechanism,
                               CK_ATTRIBUTE *public_template, CK_ULONG public_count,
                               CK_ATTRIBUTE *private_template, CK_ULONG private_count,
                               CK_OBJECT_HANDLE *public_key_handle, CK_OBJECT_HANDLE *private_key_handle) {
    CK_RV rv;
    if (!mechanism || !public_key_handle || !private_key_handle) return CKR_ARGUMENTS_BAD;
    const CK_ATTRIBUTE *params = find_attribute(public_template, public_count, CKA_EC_PARAMS);
    int type;
    if (mechanism->mechanism == CKM_EC_KEY_PAIR_GEN) {
        if (!params || !same(params, OID_P256, sizeof OID_P256)) return CKR_CURVE_NOT_SUPPORTED;
        type = KEY_P256;
    } else if (mechanism->mechanism == CKM_EC_EDWARDS_KEY_PAIR_GEN) {
        if (params && !same(params, OID_ED25519, sizeof OID_ED25519) && !same(params, NAME_ED25519, sizeof NAME_ED25519))
            return CKR_CURVE_NOT_SUPPORTED;
        type = KEY_ED25519;
    } else return CKR_MECHANISM_INVALID;
    const CK_ATTRIBUTE *label = find_attribute(private_template, private_count, CKA_LABEL);
    if (!label) label = find_attribute(public_template, public_count, CKA_LABEL);
    if (label && (label->ulValueLen > 255 || (!label->pValue && label->ulValueLen))) return CKR_ATTRIBUTE_VALUE_INVALID;
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    if (!connected(s)) { leave(s); return CKR_DEVICE_REMOVED; }
    char text[256] = "";
    if (label) memcpy(text, label->pValue, label->ulValueLen);
    struct wire_writer w;
    struct wire_answer a;
    wire_begin(&w, OP_KEY_GENERATE);
    wire_dict_begin(&w);
    if (label) wire_data(&w, "labl", text, label->ulValueLen);
    wire_int(&w, "type", type);
    wire_dict_end(&w);
    int rc = wire_call(&s->connection, &w, &a);
    wire_free(&w);
    struct wire_dict *d = malloc(sizeof *d);
    const uint8_t *bytes;
    uint32_t n;
    if (rc) rv = CKR_DEVICE_REMOVED;
    else if (!d) rv = CKR_HOST_MEMORY;
    else if (a.status != 0) rv = a.status == ERR_INTERACTION_NOT_ALLOWED ? CKR_USER_NOT_LOGGED_IN : CKR_FUNCTION_FAILED;
    else if (a.kind != 1 || wire_next_item(&a, &bytes, &n, d) != 3) rv = CKR_DEVICE_ERROR;
    else {
        const struct wire_value *ref = wire_find(d, "v_PersistentRef");
        uint8_t key_ref[20];
        if (!ref || ref->type != VALUE_DATA || ref->length != 20) rv = CKR_DEVICE_ERROR;
        else {
            memcpy(key_ref, ref->bytes, 20);
            wire_answer_free(&a);
            /* The new key read as a listing reads it: one path makes every key object. */
            wire_begin(&w, OP_COPY_MATCHING);
            wire_dict_begin(&w);
            wire_bool(&w, "r_Attributes", 1);
            wire_bool(&w, "r_PersistentRef", 1);
            wire_data(&w, "v_PersistentRef", key_ref, 20);
            wire_dict_end(&w);
            rc = wire_call(&s->connection, &w, &a);
            wire_free(&w);
            if (rc || a.status != 0 || a.kind != 1 || wire_next_item(&a, &bytes, &n, d) != 3) rv = CKR_DEVICE_ERROR;
            else {
                struct object o;
                /* Numbered as a listing of its own, so that a listing begun before the key
                 * existed does not hide it when it ends. */
                pthread_mutex_lock(&state_lock);
                uint64_t listing = ++listings;
                pthread_mutex_unlock(&state_lock);
                if (read_key(d, &o, listing)) add_key(s, &o);
                rv = CKR_DEVICE_ERROR;
                pthread_mutex_lock(&state_lock);
                for (size_t i = 0; i < object_count; i++) {
                    if (objects[i]->session || memcmp(objects[i]->ref, key_ref, 20) != 0) continue;
                    if (objects[i]->class == CKO_PRIVATE_KEY) *private_key_handle = i + 1;
                    if (objects[i]->class == CKO_PUBLIC_KEY) { *public_key_handle = i + 1; rv = CKR_OK; }
                }
                pthread_mutex_unlock(&state_lock);
            }
        }
    }
    free(d);
    wire_answer_free(&a);
    leave(s);
    return rv;
}

/* MARK: ECDH */

EXPORT CK_RV C_DeriveKey(CK_SESSION_HANDLE handle, CK_MECHANISM *mechanism, CK_OBJECT_HANDLE base,
                         CK_ATTRIBUTE *template, CK_ULONG count, CK_OBJECT_HANDLE *key) {
    CK_RV rv;
    if (!mechanism || !key) return CKR_ARGUMENTS_BAD;
    if (mechanism->mechanism != CKM_ECDH1_DERIVE) return CKR_MECHANISM_INVALID;
    CK_ECDH1_DERIVE_PARAMS *params = mechanism->pParameter;
    if (!params || mechanism->ulParameterLen != sizeof *params) return CKR_MECHANISM_PARAM_INVALID;
    /* The raw secret only: the KDFs PKCS#11 names are not keychaind's. */
    if (params->kdf != CKD_NULL || params->ulSharedDataLen) return CKR_MECHANISM_PARAM_INVALID;
    const uint8_t *peer = params->pPublicData;
    size_t peer_length = params->ulPublicDataLen;
    if (!peer) return CKR_MECHANISM_PARAM_INVALID;
    /* Raw, or wrapped in a DER OCTET STRING as CKA_EC_POINT is. */
    if (peer_length >= 2 && peer[0] == 0x04 && peer[1] == peer_length - 2 && (peer_length - 2 == 65 || peer_length - 2 == 32)) {
        peer += 2;
        peer_length -= 2;
    }
    const CK_ATTRIBUTE *wanted = find_attribute(template, count, CKA_VALUE_LEN);
    CK_ULONG value_length = 0;
    if (wanted) {
        if (wanted->ulValueLen != sizeof value_length) return CKR_ATTRIBUTE_VALUE_INVALID;
        memcpy(&value_length, wanted->pValue, sizeof value_length);
    }
    struct session *s = enter(handle, &rv);
    if (!s) return rv;
    struct object *o = object_of(base);
    if (!o || o->class != CKO_PRIVATE_KEY) { leave(s); return CKR_KEY_HANDLE_INVALID; }
    if (o->key_type == KEY_ED25519) { leave(s); return CKR_KEY_TYPE_INCONSISTENT; }
    if (!o->can_derive) { leave(s); return CKR_KEY_FUNCTION_NOT_PERMITTED; }
    if (!connected(s)) { leave(s); return CKR_DEVICE_REMOVED; }
    struct wire_writer w;
    struct wire_answer a;
    wire_begin(&w, OP_KEY_AGREE);
    wire_dict_begin(&w);
    wire_data(&w, "v_PersistentRef", o->ref, 20);
    wire_dict_end(&w);
    wire_dict_begin(&w);
    wire_string(&w, "algorithm", "algid:keyexchange:ECDH");
    wire_data(&w, "peer", peer, peer_length);
    wire_dict_end(&w);
    int rc = wire_call(&s->connection, &w, &a);
    wire_free(&w);
    const uint8_t *bytes;
    uint32_t n;
    if (rc) rv = CKR_DEVICE_REMOVED;
    else if (a.status == ERR_PARAM) rv = CKR_MECHANISM_PARAM_INVALID;  /* a peer off the curve */
    else if (a.status != 0) rv = error_of(a.status, CKR_KEY_HANDLE_INVALID);
    else if (a.kind != 1 || wire_next_item(&a, &bytes, &n, NULL) != 1 || n == 0) rv = CKR_DEVICE_ERROR;
    else if (value_length > n) rv = CKR_TEMPLATE_INCONSISTENT;
    else {
        struct object secret;
        memset(&secret, 0, sizeof secret);
        secret.class = CKO_SECRET_KEY;
        secret.session = handle;
        secret.value_length = value_length ? value_length : n;
        secret.value = malloc(secret.value_length);
        const CK_ATTRIBUTE *label = find_attribute(template, count, CKA_LABEL);
        if (label && label->pValue && label->ulValueLen <= sizeof secret.label) {
            memcpy(secret.label, label->pValue, label->ulValueLen);
            secret.label_length = label->ulValueLen;
        }
        if (!secret.value) rv = CKR_HOST_MEMORY;
        else {
            memcpy(secret.value, bytes, secret.value_length);
            int fresh;
            pthread_mutex_lock(&state_lock);
            *key = remember(&secret, &fresh);
            pthread_mutex_unlock(&state_lock);
            if (*key == 0) { wipe_free(secret.value, secret.value_length); rv = CKR_DEVICE_MEMORY; }
            else rv = CKR_OK;
        }
    }
    wire_answer_free(&a);
    leave(s);
    return rv;
}

/* MARK: what the module does not do */

EXPORT CK_RV C_GetFunctionStatus(CK_SESSION_HANDLE session) { (void)session; return CKR_FUNCTION_NOT_PARALLEL; }
EXPORT CK_RV C_CancelFunction(CK_SESSION_HANDLE session) { (void)session; return CKR_FUNCTION_NOT_PARALLEL; }
#include "unsupported.inc"

/* MARK: the function list */

static CK_FUNCTION_LIST functions = {
    .version = { 2, 40 },
#define F(name) .name = name,
    F(C_Initialize) F(C_Finalize) F(C_GetInfo) F(C_GetFunctionList) F(C_GetSlotList) F(C_GetSlotInfo)
    F(C_GetTokenInfo) F(C_GetMechanismList) F(C_GetMechanismInfo) F(C_InitToken) F(C_InitPIN) F(C_SetPIN)
    F(C_OpenSession) F(C_CloseSession) F(C_CloseAllSessions) F(C_GetSessionInfo) F(C_GetOperationState)
    F(C_SetOperationState) F(C_Login) F(C_Logout) F(C_CreateObject) F(C_CopyObject) F(C_DestroyObject)
    F(C_GetObjectSize) F(C_GetAttributeValue) F(C_SetAttributeValue) F(C_FindObjectsInit) F(C_FindObjects)
    F(C_FindObjectsFinal) F(C_EncryptInit) F(C_Encrypt) F(C_EncryptUpdate) F(C_EncryptFinal) F(C_DecryptInit)
    F(C_Decrypt) F(C_DecryptUpdate) F(C_DecryptFinal) F(C_DigestInit) F(C_Digest) F(C_DigestUpdate)
    F(C_DigestKey) F(C_DigestFinal) F(C_SignInit) F(C_Sign) F(C_SignUpdate) F(C_SignFinal)
    F(C_SignRecoverInit) F(C_SignRecover) F(C_VerifyInit) F(C_Verify) F(C_VerifyUpdate) F(C_VerifyFinal)
    F(C_VerifyRecoverInit) F(C_VerifyRecover) F(C_DigestEncryptUpdate) F(C_DecryptDigestUpdate)
    F(C_SignEncryptUpdate) F(C_DecryptVerifyUpdate) F(C_GenerateKey) F(C_GenerateKeyPair) F(C_WrapKey)
    F(C_UnwrapKey) F(C_DeriveKey) F(C_SeedRandom) F(C_GenerateRandom) F(C_GetFunctionStatus)
    F(C_CancelFunction) F(C_WaitForSlotEvent)
#undef F
};

EXPORT CK_RV C_GetFunctionList(CK_FUNCTION_LIST **list) {
    if (!list) return CKR_ARGUMENTS_BAD;
    *list = &functions;
    return CKR_OK;
}
