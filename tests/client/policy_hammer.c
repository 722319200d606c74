/*
 * policy_hammer.c - threads hammering the keys of one policy through
 * libfloodgate (fg_policy_check, fg_policy_acquire), logging what the test
 * needs to judge atomicity: tests/integration/test_policy_concurrency.py.
 *
 *   policy_hammer URL NAME SECONDS CHECKERS WAITERS WAIT_MS ALIGN_MS RULE...
 *
 * RULE is token:CAPACITY:RATE, fixed:LIMIT:WINDOW_MS or sliding:LIMIT:
 * WINDOW_MS. The policy NAME is set with the rules, then CHECKERS threads
 * call fg_policy_check and WAITERS threads fg_policy_acquire (timeout
 * WAIT_MS) until SECONDS have passed (waiters: SECONDS - WAIT_MS), each on
 * one of three keys (NAME:0, NAME:1, NAME:2) at random with a cost of 1
 * to 3. All threads share one client, as an application's threads would.
 *
 * Time. Each call is bracketed by two reads of the client's clock, before
 * and after: its decision was taken at some instant between them, which is
 * all the test assumes. On mem: the client's clock (opts.clock_us) is the
 * wall clock moved back to the last multiple of ALIGN_MS at the start, so
 * that every run begins at the same phase of the policy's windows; on a
 * server it is the wall clock itself, the clock the server decides with
 * (same machine), and ALIGN_MS is ignored.
 *
 * After the threads have ended, the state of each key is read back through
 * the documented API only: the policy is replaced by one in which limit i
 * keeps its numbers and every other limit gets a huge capacity (same
 * algorithm, same rate or window, so the state carries over unchanged and
 * the used units stay used, docs/policies.md), and a peek (cost 0) of each
 * key answers limit i's remaining units; so for i = 1, 2, ...
 *
 * Output, one line each:
 *
 *   admit KEY COST LO HI WAITER       every allowed request (KEY 0..2)
 *   waitdeny KEY COST LO HI RETRY_MS  every denied fg_policy_acquire
 *   deciders N...                     denials decided by each limit
 *   replies ALLOWED DENIED WAITERS    answers, and how many were to waiters
 *   counters ALLOWED DENIED WAITED SHADOW_DENIED BANNED   (fg_policy_get)
 *   peek LIMIT KEY LO HI REMAINING    the read-back (LIMIT 1-based)
 *
 * Exit 1 with "error ..." on any call that fails.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"
#include "mem/mem_policy.h" /* fg_policy_get: the policy's counters */

#define KEYS       3
#define MAX_COST   3
#define HUGE_LIMIT 1000000000 /* a capacity no run comes near */
#define PAUSE_US   50         /* between two checks of a thread */

typedef struct admit {
    int key;
    int64_t cost, lo, hi, retry_ms;
    bool allowed, waited;
} admit;

typedef struct worker {
    pthread_t thread;
    uint64_t rng;
    bool waits;
    admit *log; /* allowed requests; for a waiter, its denials too */
    size_t n, cap;
    long long allowed, denied, deciders[FG_MAX_POLICY_LIMITS];
} worker;

static fg_client *client;
static const char *name;
static char keys[KEYS][80];
static fg_policy_def def;
static int64_t wait_ms, clock_offset_us, deadline_us;

static int64_t wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The client's clock, and the one every bracket is read from. */
static int64_t client_clock(void *arg) {
    (void)arg;
    return wall_us() + clock_offset_us;
}

static uint64_t next_random(uint64_t *s) { /* xorshift64 */
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fail(const char *what, const fg_error *err) {
    printf("error %s: %s\n", what, err->message);
    exit(1);
}

static void remember(worker *w, const admit *a) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->log = realloc(w->log, w->cap * sizeof(*w->log));
        if (w->log == NULL) {
            puts("error out of memory");
            exit(1);
        }
    }
    w->log[w->n++] = *a;
}

/* One request: decided, bracketed, counted, logged when it matters. */
static void request(worker *w) {
    admit a = {.key = (int)(next_random(&w->rng) % KEYS),
               .cost = 1 + (int64_t)(next_random(&w->rng) % MAX_COST)};
    fg_policy_result r;
    fg_error err;
    a.lo = client_clock(NULL);
    fg_code rc = w->waits
                     ? fg_policy_acquire(client, name, keys[a.key], NULL, a.cost, wait_ms, &r, &err)
                     : fg_policy_check(client, name, keys[a.key], NULL, a.cost, &r, &err);
    a.hi = client_clock(NULL);
    if (rc != FG_CODE_OK) fail("check", &err);
    a.allowed = r.result.allowed;
    a.waited = w->waits;
    a.retry_ms = r.result.retry_after_ms;
    if (a.allowed) {
        w->allowed++;
        remember(w, &a);
        return;
    }
    w->denied++;
    if (r.decided_by == FG_BY_LIMIT) w->deciders[r.limit_index]++;
    if (w->waits) remember(w, &a);
}

/* A waiter starts its last request WAIT_MS before the end, so that every
 * request has been answered when the checkers stop and the read-back
 * follows the last admissions closely. */
static void *run(void *arg) {
    worker *w = arg;
    const struct timespec pause = {0, PAUSE_US * 1000};
    int64_t last_start = w->waits ? deadline_us - wait_ms * 1000 : deadline_us;
    while (client_clock(NULL) < last_start) {
        request(w);
        if (!w->waits) nanosleep(&pause, NULL);
    }
    return NULL;
}

/* ------------------------------------------------------------- the rules */

static bool parse_rule(const char *word, fg_limit *l) {
    char algo[16];
    long long n;
    double x;
    if (sscanf(word, "%15[a-z]:%lld:%lf", algo, &n, &x) != 3) return false;
    if (strcmp(algo, "token") == 0)
        *l = fg_token_bucket(n, x);
    else if (strcmp(algo, "fixed") == 0)
        *l = fg_fixed_window(n, x);
    else if (strcmp(algo, "sliding") == 0)
        *l = fg_sliding_window(n, x);
    else
        return false;
    return true;
}

/* The policy with limit `keep` as given and the others made huge. */
static fg_policy_def isolating(size_t keep) {
    fg_policy_def d = def;
    for (size_t i = 0; i < d.nlimits; i++)
        if (i != keep) d.limits[i].limit = HUGE_LIMIT;
    return d;
}

/* ------------------------------------------------------------- reporting */

static void report(worker *ws, int n, const fg_policy_info *info) {
    long long allowed = 0, denied = 0, waiters = 0, deciders[FG_MAX_POLICY_LIMITS] = {0};
    for (int t = 0; t < n; t++) {
        worker *w = &ws[t];
        allowed += w->allowed;
        denied += w->denied;
        if (w->waits) waiters += w->allowed + w->denied;
        for (size_t i = 0; i < def.nlimits; i++)
            deciders[i] += w->deciders[i];
        for (size_t i = 0; i < w->n; i++) {
            const admit *a = &w->log[i];
            if (a->allowed)
                printf("admit %d %lld %lld %lld %d\n", a->key, (long long)a->cost, (long long)a->lo,
                       (long long)a->hi, a->waited);
            else
                printf("waitdeny %d %lld %lld %lld %lld\n", a->key, (long long)a->cost,
                       (long long)a->lo, (long long)a->hi, (long long)a->retry_ms);
        }
    }
    printf("deciders");
    for (size_t i = 0; i < def.nlimits; i++)
        printf(" %lld", deciders[i]);
    printf("\nreplies %lld %lld %lld\n", allowed, denied, waiters);
    printf("counters %lld %lld %lld %lld %lld\n", (long long)info->allowed, (long long)info->denied,
           (long long)info->waited, (long long)info->shadow_denied, (long long)info->banned);
}

static void read_back(void) {
    for (size_t i = 0; i < def.nlimits; i++) {
        fg_policy_def d = isolating(i);
        fg_error err;
        if (fg_policy_set(client, name, &d, &err) != FG_CODE_OK) fail("set", &err);
        for (int k = 0; k < KEYS; k++) {
            fg_policy_result r;
            int64_t lo = client_clock(NULL);
            if (fg_policy_check(client, name, keys[k], NULL, 0, &r, &err) != FG_CODE_OK)
                fail("peek", &err);
            int64_t hi = client_clock(NULL);
            printf("peek %zu %d %lld %lld %lld\n", i + 1, k, (long long)lo, (long long)hi,
                   (long long)r.result.remaining);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: policy_hammer URL NAME SECONDS CHECKERS WAITERS WAIT_MS "
                        "ALIGN_MS RULE...\n");
        return 2;
    }
    const char *url = argv[1];
    name = argv[2];
    double seconds = atof(argv[3]);
    int checkers = atoi(argv[4]), waiters = atoi(argv[5]), n = checkers + waiters;
    wait_ms = atoll(argv[6]);
    int64_t align_us = atoll(argv[7]) * 1000;

    fg_policy_def_init(&def);
    for (int i = 8; i < argc; i++) {
        if (def.nlimits == FG_MAX_POLICY_LIMITS || !parse_rule(argv[i], &def.limits[def.nlimits])) {
            fprintf(stderr, "bad rule %s\n", argv[i]);
            return 2;
        }
        def.nlimits++;
    }
    for (int k = 0; k < KEYS; k++)
        snprintf(keys[k], sizeof(keys[k]), "%s:%d", name, k);

    if (strncmp(url, "mem:", 4) == 0 && align_us > 0) clock_offset_us = -(wall_us() % align_us);
    fg_options opts;
    fg_options_init(&opts);
    opts.command_timeout_ms = 10000; /* a loaded machine is not a failure */
    opts.clock_us = client_clock;
    fg_error err;
    client = fg_open(url, &opts, &err);
    if (client == NULL) fail("open", &err);
    if (fg_policy_set(client, name, &def, &err) != FG_CODE_OK) fail("set", &err);

    worker *ws = calloc((size_t)n, sizeof(*ws));
    if (ws == NULL) return 1;
    deadline_us = client_clock(NULL) + (int64_t)(seconds * 1e6);
    for (int t = 0; t < n; t++) {
        ws[t].rng = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
        ws[t].waits = t >= checkers;
        if (pthread_create(&ws[t].thread, NULL, run, &ws[t]) != 0) return 1;
    }
    for (int t = 0; t < n; t++)
        pthread_join(ws[t].thread, NULL);

    /* the counters before the read-back's peeks, which count too */
    fg_policy_info info;
    if (fg_policy_get(client, name, &info, &err) != FG_CODE_OK) fail("get", &err);
    read_back();
    report(ws, n, &info);
    for (int t = 0; t < n; t++)
        free(ws[t].log);
    free(ws);
    fg_close(client);
    return 0;
}
