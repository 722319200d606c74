/*
 * reconnect_reason.c - a failed connect's reason, heard by another thread:
 * fg_open tries at once and fails; a check from a second thread within
 * FG_RECONNECT_DELAY_MS is not retried, and must still say why
 * (tests/integration/test_cli.py).
 *
 *   reconnect_reason URL
 *
 * Prints "<code name>: <message>" of that check, then "after_ms=<n>", the
 * time from fg_open to its answer (the test needs it within the delay).
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "floodgate.h"

static fg_client *client;
static fg_error check_err;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void *check_once(void *arg) {
    fg_limit l = fg_token_bucket(1, 1);
    fg_result r;
    (void)arg;
    if (fg_check(client, "k", &l, 1, &r, &check_err) == FG_CODE_OK)
        snprintf(check_err.message, sizeof(check_err.message), "allowed");
    return NULL;
}

int main(int argc, char **argv) {
    fg_error err;
    pthread_t t;
    if (argc != 2) return fprintf(stderr, "usage: reconnect_reason URL\n"), 2;
    long long opened = now_ms();
    if ((client = fg_open(argv[1], NULL, &err)) == NULL)
        return fprintf(stderr, "fg_open: %s\n", err.message), 2;
    pthread_create(&t, NULL, check_once, NULL);
    pthread_join(t, NULL);
    printf("%s: %s\nafter_ms=%lld\n", fg_code_name(check_err.code), check_err.message,
           now_ms() - opened);
    fg_close(client);
    return 0;
}
