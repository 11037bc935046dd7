/* keychaind's wire protocol (docs/protocol.md), the part the PKCS#11 module speaks: a request
 * writer, a bounded reader of answers, and one connection to the daemon. */
#ifndef KEYCHAIND_PKCS11_WIRE_H
#define KEYCHAIND_PKCS11_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum {
    OP_COPY_MATCHING = 2, OP_STATUS = 5, OP_KEY_GENERATE = 24, OP_KEY_PUBLIC = 25,
    OP_KEY_SIGN = 26, OP_KEY_AGREE = 28, OP_UNLOCK_PROMPT = 53,
};

enum { VALUE_STRING = 1, VALUE_DATA = 2, VALUE_INT = 3, VALUE_BOOL = 4, VALUE_DATE = 5 };

/* OSStatus codes the module maps (docs/protocol.md, section 4). */
enum {
    ERR_PARAM = -50, ERR_INTERACTION_NOT_ALLOWED = -25308, ERR_ITEM_NOT_FOUND = -25300,
    ERR_MISSING_ENTITLEMENT = -34018, ERR_SERVICE_NOT_AVAILABLE = -67585, ERR_USER_CANCELED = -128,
};

/* The largest answer frame the daemon sends; anything longer is a hostile or broken peer. */
#define WIRE_MAX_RESPONSE 1376256u
#define WIRE_MAX_ENTRIES 128u

/* A request being written: a growing buffer whose first 4 bytes become the frame length. */
struct wire_writer {
    uint8_t *bytes;
    size_t length, capacity;
    int failed;
    /* Entries of the dictionary being written, and where its count goes. */
    size_t count_at;
    uint32_t entries;
};

void wire_begin(struct wire_writer *w, uint8_t op);
void wire_dict_begin(struct wire_writer *w);
void wire_dict_end(struct wire_writer *w);
/* Keys must be given in bytewise order (the canonical encoding). */
void wire_string(struct wire_writer *w, const char *key, const char *value);
void wire_data(struct wire_writer *w, const char *key, const void *value, size_t length);
void wire_int(struct wire_writer *w, const char *key, int64_t value);
void wire_bool(struct wire_writer *w, const char *key, int value);
/* Wipes and frees the buffer (a request may hold a peer key or data to sign). */
void wire_free(struct wire_writer *w);

/* One decoded value of an answer's dictionary; pointers into the answer's buffer. */
struct wire_value {
    char key[65];
    uint8_t type;
    const uint8_t *bytes;
    uint32_t length;
    int64_t number;
};

struct wire_dict {
    struct wire_value entries[WIRE_MAX_ENTRIES];
    uint32_t count;
};

const struct wire_value *wire_find(const struct wire_dict *d, const char *key);

/* An answer frame, read whole and bounded. */
struct wire_answer {
    uint8_t *bytes;
    size_t length, offset;
    int32_t status;
    uint8_t kind;    /* 0 none, 1 single, 2 list, 3 list continued */
    uint32_t items;  /* list: number of items in this frame */
};

/* Reads the next item result: 1 data (bytes/length), 3 attributes (dict). Returns the item
 * kind, or -1 when the answer is malformed. */
int wire_next_item(struct wire_answer *a, const uint8_t **data, uint32_t *length, struct wire_dict *dict);
void wire_answer_free(struct wire_answer *a);

/* A connection to keychaind, as the calling process. fd -1: not connected. */
struct wire_connection {
    int fd;
    /* How long an answer may take to start arriving before the daemon counts as gone. */
    int timeout_ms;
};

/* The socket path clients use (docs/protocol.md, "Transport"); 0 when none is safe. */
int wire_socket_path(char *path, size_t size);
/* Connects with a short timeout and checks who serves (SO_PEERCRED); 0 on success. */
int wire_connect(struct wire_connection *c);
/* Gives the connection the short timeout of a probe. */
void wire_probe(struct wire_connection *c);
/* 1: the next answers wait for a person at keychaind's prompt (op 53), which keychaind ends
 * after 120 s; 0: back to the daemon's own timeout. */
void wire_await_person(struct wire_connection *c, int awaiting);
void wire_close(struct wire_connection *c);
/* Sends the request and reads one answer frame. 0 on success (the answer's status may still
 * be an error); -1 when the connection failed (it is then closed). */
int wire_call(struct wire_connection *c, struct wire_writer *w, struct wire_answer *a);
/* Reads one more frame of a long list answer (kind 3 before it). */
int wire_read_answer(struct wire_connection *c, struct wire_answer *a);

void wire_wipe(void *p, size_t n);

#endif
