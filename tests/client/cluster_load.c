/*
 * cluster_load.c - traffic on a cluster while tests/integration reshards it.
 *
 *   cluster_load URL N
 *
 * Keys "{mig}:0".."{mig}:<N-1>" (one slot, the one the test moves) and
 * "spread:0".."spread:<N-1>" (all over the cluster) each have a token bucket
 * of 5 that refills one token in 1000 s. The program checks them in turns,
 * one fg_check per key and then one fg_check_batch of all keys, and prints
 * "ready" once every key is used up. It stops when stdin closes, and prints
 *
 *   done CHECKS ERRORS ROUND_TRIPS
 *   KEY ALLOWED                  one line per key: how many checks it allowed
 *
 * A key whose state survives the move allows exactly 5 in the whole run.
 * The first errors are written to stderr.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "floodgate.h"

#define CAPACITY 5

typedef struct load {
    fg_client *client;
    fg_limit limit;
    size_t nkeys;
    char (*keys)[32];
    long *allowed;
    long checks, errors;
} load;

static void record(load *ld, size_t i, fg_code rc, const fg_result *r, const char *msg) {
    ld->checks++;
    if (rc == FG_CODE_OK && r->source == FG_SOURCE_SERVER) {
        ld->allowed[i] += r->allowed;
        return;
    }
    if (ld->errors++ < 5)
        fprintf(stderr, "%s: %s %s (source %d)\n", ld->keys[i], fg_code_name(rc), msg,
                rc == FG_CODE_OK ? (int)r->source : -1);
}

static void singles(load *ld) {
    for (size_t i = 0; i < ld->nkeys; i++) {
        fg_result r;
        fg_error err = {0};
        fg_code rc = fg_check(ld->client, ld->keys[i], &ld->limit, 1, &r, &err);
        record(ld, i, rc, &r, err.message);
    }
}

static void batch(load *ld, fg_request *reqs) {
    fg_error err = {0};
    for (size_t i = 0; i < ld->nkeys; i++)
        reqs[i] = (fg_request){.key = ld->keys[i], .limit = &ld->limit, .cost = 1};
    fg_code rc = fg_check_batch(ld->client, reqs, ld->nkeys, &err);
    for (size_t i = 0; i < ld->nkeys; i++)
        record(ld, i, rc == FG_CODE_OK ? reqs[i].code : rc, &reqs[i].result,
               rc == FG_CODE_OK ? "in a batch" : err.message);
}

static bool used_up(const load *ld) {
    for (size_t i = 0; i < ld->nkeys; i++)
        if (ld->allowed[i] < CAPACITY) return false;
    return true;
}

static bool stdin_closed(void) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    char buf[64];
    return poll(&p, 1, 0) > 0 && read(0, buf, sizeof(buf)) <= 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL N\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)atol(argv[2]);
    load ld = {.limit = fg_token_bucket(CAPACITY, 0.001), .nkeys = 2 * n};
    ld.keys = calloc(ld.nkeys, sizeof(*ld.keys));
    ld.allowed = calloc(ld.nkeys, sizeof(*ld.allowed));
    fg_request *reqs = calloc(ld.nkeys, sizeof(*reqs));
    for (size_t i = 0; i < n; i++) {
        snprintf(ld.keys[i], sizeof(ld.keys[i]), "{mig}:%zu", i);
        snprintf(ld.keys[n + i], sizeof(ld.keys[n + i]), "spread:%zu", i);
    }
    fg_error err;
    if ((ld.client = fg_open(argv[1], NULL, &err)) == NULL) {
        printf("open err %s\n", err.message);
        return 1;
    }
    bool ready = false;
    while (!stdin_closed()) {
        singles(&ld);
        batch(&ld, reqs);
        if (!ready && used_up(&ld)) {
            printf("ready\n");
            fflush(stdout);
            ready = true;
        }
    }
    fg_stats st;
    fg_get_stats(ld.client, &st);
    printf("done %ld %ld %llu\n", ld.checks, ld.errors, (unsigned long long)st.round_trips);
    for (size_t i = 0; i < ld.nkeys; i++)
        printf("%s %ld\n", ld.keys[i], ld.allowed[i]);
    fg_close(ld.client);
    free(reqs);
    free(ld.allowed);
    free(ld.keys);
    return 0;
}
