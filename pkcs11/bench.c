/* keychain-pkcs11-bench MODULE [PIN] [SIGNATURES]: signatures through a PKCS#11 module, one
 * thread and eight (each in its own session), for P-256 (CKM_ECDSA over a SHA-256 digest) and
 * Ed25519 (CKM_EDDSA over 64 bytes). Run against libkeychaind-pkcs11.so and SoftHSM2 in the
 * same run (keychain-bench, scripts/pkcs11-bench): SoftHSM2 signs in-process, the floor a
 * daemon can approach (issue 30, "Speed"). Keys are made with C_GenerateKeyPair and left on the
 * token. Each type prints a line for people, then one for keychain-bench:
 * "figures TYPE RATE1 MEDIAN1_US RATE8" (one thread's rate and median time per signature, eight
 * threads' rate). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <p11-kit/pkcs11.h>

static CK_FUNCTION_LIST *p11;
static const char *pin;
static long signatures = 2000;

static const CK_BYTE P256[] = { 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07 };
static const CK_BYTE ED25519[] = { 0x06, 0x03, 0x2b, 0x65, 0x70 };

struct job {
    CK_MECHANISM_TYPE mechanism;
    CK_OBJECT_HANDLE key;
    long done;
    /* Each signature's time (C_SignInit and C_Sign), when not NULL. */
    double *times;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static CK_SESSION_HANDLE session(void) {
    CK_SLOT_ID slots[16], slot = 0;
    CK_ULONG count = 16;
    CK_SESSION_HANDLE s;
    int found = 0;
    if (p11->C_GetSlotList(CK_TRUE, slots, &count) != CKR_OK) count = 0;
    /* The first initialized token (SoftHSM2 also shows an empty one for the next token). */
    for (CK_ULONG i = 0; i < count && !found; i++) {
        CK_TOKEN_INFO info;
        if (p11->C_GetTokenInfo(slots[i], &info) == CKR_OK && (info.flags & CKF_TOKEN_INITIALIZED)) { slot = slots[i]; found = 1; }
    }
    if (!found) { fprintf(stderr, "no token\n"); exit(1); }
    if (p11->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s) != CKR_OK) { fprintf(stderr, "no session\n"); exit(1); }
    if (pin) p11->C_Login(s, CKU_USER, (CK_UTF8CHAR *)pin, strlen(pin));  /* already logged in is fine */
    return s;
}

static void *sign_loop(void *argument) {
    struct job *job = argument;
    CK_SESSION_HANDLE s = session();
    CK_BYTE data[64], signature[64];
    memset(data, 0x5a, sizeof data);
    CK_MECHANISM mechanism = { job->mechanism, NULL, 0 };
    for (long i = 0; i < signatures; i++) {
        CK_ULONG length = sizeof signature;
        double start = job->times ? now() : 0;
        if (p11->C_SignInit(s, &mechanism, job->key) != CKR_OK ||
            p11->C_Sign(s, data, job->mechanism == CKM_ECDSA ? 32 : 64, signature, &length) != CKR_OK) break;
        if (job->times) job->times[i] = now() - start;
        job->done++;
    }
    p11->C_CloseSession(s);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The rate of `threads` signing at once; with `times`, one thread's signatures are timed. */
static double run(CK_MECHANISM_TYPE mechanism, CK_OBJECT_HANDLE key, int threads, double *times) {
    pthread_t ids[8];
    struct job jobs[8];
    double start = now();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){ mechanism, key, 0, i == 0 ? times : NULL };
        pthread_create(&ids[i], NULL, sign_loop, &jobs[i]);
    }
    long done = 0;
    for (int i = 0; i < threads; i++) { pthread_join(ids[i], NULL); done += jobs[i].done; }
    if (done != signatures * threads) { fprintf(stderr, "only %ld of %ld signatures\n", done, signatures * threads); exit(1); }
    return done / (now() - start);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: keychain-pkcs11-bench MODULE [PIN] [SIGNATURES]\n"); return 64; }
    pin = argc > 2 && *argv[2] ? argv[2] : NULL;
    if (argc > 3) signatures = atol(argv[3]);
    if (signatures < 1) signatures = 1;
    void *module = dlopen(argv[1], RTLD_NOW);
    CK_C_GetFunctionList get;
    if (!module || !(get = (CK_C_GetFunctionList)dlsym(module, "C_GetFunctionList")) || get(&p11) != CKR_OK) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    CK_C_INITIALIZE_ARGS args = { .flags = CKF_OS_LOCKING_OK };
    if (p11->C_Initialize(&args) != CKR_OK) { fprintf(stderr, "C_Initialize failed\n"); return 1; }
    CK_SESSION_HANDLE s = session();
    const char *name = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    struct { const char *type; CK_MECHANISM_TYPE generate, sign; const CK_BYTE *curve; CK_ULONG curve_length; } kinds[] = {
        { "p256", CKM_EC_KEY_PAIR_GEN, CKM_ECDSA, P256, sizeof P256 },
        { "ed25519", CKM_EC_EDWARDS_KEY_PAIR_GEN, CKM_EDDSA, ED25519, sizeof ED25519 },
    };
    for (int k = 0; k < 2; k++) {
        CK_BBOOL yes = CK_TRUE;
        char label[] = "pkcs11-bench";
        CK_ATTRIBUTE public_template[] = {
            { CKA_EC_PARAMS, (void *)kinds[k].curve, kinds[k].curve_length }, { CKA_TOKEN, &yes, sizeof yes },
            { CKA_VERIFY, &yes, sizeof yes }, { CKA_LABEL, label, sizeof label - 1 },
        };
        CK_ATTRIBUTE private_template[] = {
            { CKA_TOKEN, &yes, sizeof yes }, { CKA_SIGN, &yes, sizeof yes }, { CKA_SENSITIVE, &yes, sizeof yes },
            { CKA_PRIVATE, &yes, sizeof yes }, { CKA_LABEL, label, sizeof label - 1 },
        };
        CK_MECHANISM generate = { kinds[k].generate, NULL, 0 };
        CK_OBJECT_HANDLE public_key, private_key;
        CK_RV rv = p11->C_GenerateKeyPair(s, &generate, public_template, 4, private_template, 5, &public_key, &private_key);
        if (rv != CKR_OK) { fprintf(stderr, "%s: C_GenerateKeyPair %s failed: 0x%lx\n", name, kinds[k].type, rv); return 1; }
        double *times = calloc(signatures, sizeof *times);
        if (!times) return 1;
        double one = run(kinds[k].sign, private_key, 1, times);
        double eight = run(kinds[k].sign, private_key, 8, NULL);
        qsort(times, signatures, sizeof *times, by_value);
        double median = times[signatures / 2] * 1e6;
        free(times);
        printf("pkcs11 %-24s %-8s t=1 ops/s=%8.0f  median=%7.1fus   t=8 ops/s=%8.0f   8 threads / 1: %.2fx\n",
               name, kinds[k].type, one, median, eight, eight / one);
        printf("figures %s %.1f %.2f %.1f\n", kinds[k].type, one, median, eight);
        fflush(stdout);
    }
    p11->C_CloseSession(s);
    p11->C_Finalize(NULL);
    return 0;
}
