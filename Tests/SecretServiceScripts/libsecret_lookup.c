/* One libsecret client for keychain-bench --secret-service (issue 28's "libsecret lookup
 * from C"): on the session bus of its environment, it reads lines "K" from stdin and answers
 * each with one secret_password_lookup_sync({n: K}) timed from call to return, in
 * microseconds, then the secret's length ("MICROSECONDS LENGTH"; -1 when nothing was found).
 * The driver keeps one of these per server and takes turns between them, so that both see the
 * same machine load. The first line is a warm-up the driver does not count: libsecret
 * connects to the bus and opens its session there, once per process, as any app does.
 * Never prints a secret. */
#include <libsecret/secret.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const SecretSchema bench_schema = {
    "org.freedesktop.Secret.Generic", SECRET_SCHEMA_DONT_MATCH_NAME,
    {{"n", SECRET_SCHEMA_ATTRIBUTE_STRING}, {NULL, 0}},
    0, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void) {
    char line[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        GError *error = NULL;
        double start = now_us();
        gchar *secret = secret_password_lookup_sync(&bench_schema, NULL, &error, "n", line, NULL);
        double elapsed = now_us() - start;
        if (error) {
            fprintf(stderr, "libsecret_lookup: %s\n", error->message);
            g_error_free(error);
            return 1;
        }
        printf("%.1f %ld\n", elapsed, secret ? (long)strlen(secret) : -1L);
        secret_password_free(secret);
    }
    return 0;
}
