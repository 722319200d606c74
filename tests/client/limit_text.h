/*
 * limit_text.h - options, limits and answers as the test drivers read and
 * write them (driver.c, async_client.c), so that the tests speak one
 * language to both clients. Reads the fields with strtok.
 */
#ifndef FG_TEST_LIMIT_TEXT_H
#define FG_TEST_LIMIT_TEXT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floodgate.h"

/* The drivers' options after the URL: policy=error|open|closed|fallback,
 * cache, timeout_ms=N, lease=UNITS, lease_ms=N. */
static void parse_options(int argc, char **argv, fg_options *o) {
    fg_options_init(o);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "policy=open") == 0) o->on_failure = FG_ON_FAILURE_OPEN;
        else if (strcmp(argv[i], "policy=closed") == 0) o->on_failure = FG_ON_FAILURE_CLOSED;
        else if (strcmp(argv[i], "policy=fallback") == 0) o->on_failure = FG_ON_FAILURE_FALLBACK;
        else if (strcmp(argv[i], "cache") == 0) o->cache_denials = true;
        else if (strncmp(argv[i], "timeout_ms=", 11) == 0)
            o->command_timeout_ms = o->connect_timeout_ms = atoi(argv[i] + 11);
        else if (strncmp(argv[i], "lease=", 6) == 0) o->lease_units = atoll(argv[i] + 6);
        else if (strncmp(argv[i], "lease_ms=", 9) == 0) o->lease_ms = atoi(argv[i] + 9);
    }
}

static const char *source_names[] = {"server", "memory", "denial_cache", "failed_open",
                                     "failed_closed", "fallback", "lease"};

/* Parses "ALGO LIMIT X [Y]" from strtok; returns the number of fields used
 * after ALGO LIMIT X (0 or 1 for Y), -1 on error. */
static int parse_limit(fg_limit *l) {
    const char *algo = strtok(NULL, " \n");
    const char *limit = strtok(NULL, " \n");
    const char *x = strtok(NULL, " \n");
    if (algo == NULL || limit == NULL || x == NULL) return -1;
    int64_t n = atoll(limit);
    double xv = atof(x);
    if (strcmp(algo, "fixed") == 0) *l = fg_fixed_window(n, xv);
    else if (strcmp(algo, "sliding") == 0) *l = fg_sliding_window(n, xv);
    else if (strcmp(algo, "slidelog") == 0) *l = fg_sliding_log(n, xv);
    else if (strcmp(algo, "token") == 0) *l = fg_token_bucket(n, xv);
    else if (strcmp(algo, "leaky") == 0) *l = fg_leaky_bucket(n, xv);
    else if (strcmp(algo, "gcra") == 0) {
        const char *y = strtok(NULL, " \n");
        if (y == NULL) return -1;
        *l = fg_gcra(n, xv, atof(y));
    } else {
        return -1;
    }
    return 0;
}

static void print_result(fg_code rc, const fg_result *r, const fg_error *err) {
    if (rc != FG_CODE_OK)
        printf("err %s %s\n", fg_code_name(rc), err->message);
    else
        printf("ok %d %lld %lld %lld %lld %s\n", r->allowed, (long long)r->limit,
               (long long)r->remaining, (long long)r->retry_after_ms,
               (long long)r->reset_after_ms, source_names[r->source]);
}

#endif
