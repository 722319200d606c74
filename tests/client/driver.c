/*
 * driver.c - libfloodgate driven line by line, for tests/integration.
 *
 *   driver URL [policy=error|open|closed|fallback] [cache] [timeout_ms=N]
 *              [lease=UNITS] [lease_ms=N]
 *
 * Reads commands on stdin and answers one line each on stdout (flushed):
 *
 *   check KEY ALGO LIMIT X [Y] [COST]   ok ALLOWED LIMIT REMAINING RETRY RESET SOURCE | err CODE MSG
 *   peek  KEY ALGO LIMIT X [Y] [COST]   the same, without taking anything
 *   batch N KEY ALGO LIMIT X [Y]        N checks of cost 1 in one call: ok ALLOWED_COUNT SOURCE
 *   mbatch N PREFIX ALGO LIMIT X [Y]    the same over the keys PREFIX0 ... PREFIX<N-1>
 *   reset KEY                           ok 0|1
 *   inspect KEY                         ok TEXT
 *   stats                               ok DECISIONS ROUND_TRIPS CACHED FAILURES RECONNECTS
 *                                          LEASE_HITS
 *   sleep MS                            ok
 *
 * ALGO is fixed, sliding, slidelog (X = window_ms), token, leaky (X = rate)
 * or gcra (X = count, Y = period_ms). The time is the wall clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"
#include "limit_text.h"

static void do_check(fg_client *c, bool peek) {
    const char *key = strtok(NULL, " \n");
    fg_limit l;
    if (key == NULL || parse_limit(&l) < 0) {
        printf("err usage\n");
        return;
    }
    const char *cost = strtok(NULL, " \n");
    fg_result r;
    fg_error err;
    fg_code rc = peek ? fg_peek(c, key, &l, cost ? atoll(cost) : 1, &r, &err)
                      : fg_check(c, key, &l, cost ? atoll(cost) : 1, &r, &err);
    print_result(rc, &r, &err);
}

/* batch: N times one key; mbatch: N keys of one prefix. */
static void do_batch(fg_client *c, bool many) {
    const char *count = strtok(NULL, " \n");
    const char *key = strtok(NULL, " \n");
    fg_limit l;
    if (count == NULL || key == NULL || parse_limit(&l) < 0) {
        printf("err usage\n");
        return;
    }
    size_t n = (size_t)atol(count);
    fg_request *reqs = calloc(n, sizeof(*reqs));
    char (*keys)[128] = calloc(n, sizeof(*keys));
    for (size_t i = 0; i < n; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s%zu", key, i);
        reqs[i] = (fg_request){.key = many ? keys[i] : key, .limit = &l, .cost = 1};
    }
    fg_error err;
    fg_code rc = fg_check_batch(c, reqs, n, &err);
    if (rc != FG_CODE_OK) {
        printf("err %s %s\n", fg_code_name(rc), err.message);
    } else {
        size_t allowed = 0;
        for (size_t i = 0; i < n; i++)
            allowed += reqs[i].code == FG_CODE_OK && reqs[i].result.allowed;
        printf("ok %zu %s\n", allowed, n ? source_names[reqs[0].result.source] : "-");
    }
    free(reqs);
    free(keys);
}

static void do_line(fg_client *c, char *line) {
    const char *cmd = strtok(line, " \n");
    fg_error err;
    if (cmd == NULL) return;
    if (strcmp(cmd, "check") == 0 || strcmp(cmd, "peek") == 0) {
        do_check(c, strcmp(cmd, "peek") == 0);
    } else if (strcmp(cmd, "batch") == 0 || strcmp(cmd, "mbatch") == 0) {
        do_batch(c, strcmp(cmd, "mbatch") == 0);
    } else if (strcmp(cmd, "reset") == 0) {
        bool existed;
        fg_code rc = fg_reset(c, strtok(NULL, " \n"), &existed, &err);
        if (rc == FG_CODE_OK) printf("ok %d\n", existed);
        else printf("err %s %s\n", fg_code_name(rc), err.message);
    } else if (strcmp(cmd, "inspect") == 0) {
        char buf[4096];
        fg_code rc = fg_inspect(c, strtok(NULL, " \n"), buf, sizeof(buf), &err);
        if (rc == FG_CODE_OK) printf("ok %s\n", buf);
        else printf("err %s %s\n", fg_code_name(rc), err.message);
    } else if (strcmp(cmd, "stats") == 0) {
        fg_stats s;
        fg_get_stats(c, &s);
        printf("ok %llu %llu %llu %llu %llu %llu\n", (unsigned long long)s.decisions,
               (unsigned long long)s.round_trips, (unsigned long long)s.denials_cached,
               (unsigned long long)s.failures, (unsigned long long)s.reconnects,
               (unsigned long long)s.lease_hits);
    } else if (strcmp(cmd, "sleep") == 0) {
        long ms = atol(strtok(NULL, " \n"));
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        printf("ok\n");
    } else {
        printf("err usage unknown command %s\n", cmd);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [policy=...] [cache] [timeout_ms=N] [lease=N] [lease_ms=N]\n", argv[0]);
        return 2;
    }
    fg_options o;
    parse_options(argc, argv, &o);
    fg_error err;
    fg_client *c = fg_open(argv[1], &o, &err);
    if (c == NULL) {
        printf("open err %s %s\n", fg_code_name(err.code), err.message);
        return 1;
    }
    printf("open ok\n");
    fflush(stdout);
    char line[1024];
    while (fgets(line, sizeof(line), stdin)) {
        do_line(c, line);
        fflush(stdout);
    }
    fg_close(c);
    return 0;
}
