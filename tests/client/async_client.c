/*
 * async_client.c - floodgate_async.h on a libevent loop, driven line by
 * line, for tests/integration/test_async.py.
 *
 *   async_client URL [policy=error|open|closed|fallback] [cache] [timeout_ms=N]
 *                [lease=UNITS]
 *
 * Reads commands on stdin; the loop runs only inside `wait` and `sleep`,
 * so that every answer comes from the loop, never from inside a call:
 *
 *   check ID KEY ALGO LIMIT X [Y] [COST]   starts a check: nothing, or
 *                                          "ID err CODE MSG" when refused
 *   peek ID KEY ALGO LIMIT X [Y]           the same, a peek
 *   burst N ID KEY ALGO LIMIT X [Y]        N checks of cost 1, started at once
 *   acquire ID KEY CAPACITY OWNER PERMITS LEASE_MS   a semaphore's acquire:
 *                                          "ID ok ACQUIRED TOKEN TTL HOLDS"
 *   release ID KEY OWNER PERMITS           "ID ok LEFT"
 *   extend ID KEY OWNER LEASE_MS           "ID ok 0|1"
 *   refund ID KEY ALGO LIMIT X [Y] UNITS   fg_async_refund: "ID ok GIVEN_BACK"
 *   policy ID NAME KEY [COST]              FG.CHECK: "ID ok ALLOWED REMAINING
 *                                          RETRY DECIDED_BY LIMIT_INDEX"
 *   cancel ID                              fg_async_cancel on the handle of
 *                                          the call ID, answered or not (also
 *                                          after close): ID answers nothing
 *   cancels ID TARGET                      the callback of ID cancels TARGET
 *                                          (ID itself, an answered call, or one
 *                                          still waiting), after printing
 *   wait                                   runs the loop until every call
 *                                          answered (30 s at most, so that a
 *                                          lost answer fails, not hangs),
 *                                          printing each answer as "ID ok ..."
 *                                          or "ID err ..." (as driver.c prints
 *                                          them), then "done MS" (how long it
 *                                          waited)
 *   sleep MS                               runs the loop MS ms: "ok"
 *   stats                                  ok DECISIONS ROUND_TRIPS CACHED
 *                                          FAILURES RECONNECTS
 *   close                                  fg_async_close: answers, then "closed"
 *
 * ALGO and the answers are limit_text.h's. An answer that came inside a
 * call is a bug, printed as "ID inside".
 *
 * Each call's handle is kept in its slot of calls[], as nginx keeps it in
 * its request: the library sets it to NULL when the call is answered or
 * cancelled, and a slot is reused, oldest first, only once its call is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate_libevent.h"
#include "limit_text.h"

#define CALLS_MAX 4096
#define WAIT_MAX_S 30

typedef struct pending {
    char id[64];
    fg_async_call *call;
    bool waiting;
    char cancels[64]; /* the call its callback cancels; "" none */
} pending;

static struct event_base *base;
static struct event *wait_cap;
static fg_async *client;
static pending calls[CALLS_MAX];
static unsigned next_call;
static int waiting;
static bool in_call;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Cancels every call named id, answered or not. */
static void cancel(const char *id) {
    for (int i = 0; i < CALLS_MAX; i++)
        if (strcmp(calls[i].id, id) == 0) {
            fg_async_cancel(calls[i].call);
            if (calls[i].waiting) waiting--;
            calls[i].waiting = false;
        }
}

static void answered_done(pending *p) {
    p->waiting = false;
    waiting--;
    if (p->cancels[0] != '\0') cancel(p->cancels);
    if (waiting == 0) event_base_loopbreak(base);
}

static void answered(fg_code rc, const fg_result *r, const fg_error *err, void *arg) {
    pending *p = arg;
    printf("%s ", p->id);
    if (in_call) printf("inside ");
    print_result(rc, r, err);
    answered_done(p);
}

/* A slot for the call id: the oldest whose call is not waiting. */
static pending *new_pending(const char *id) {
    for (int tries = 0; tries < CALLS_MAX; tries++) {
        pending *p = &calls[next_call++ % CALLS_MAX];
        if (p->waiting) continue;
        *p = (pending){0};
        snprintf(p->id, sizeof(p->id), "%s", id);
        return p;
    }
    printf("%s err driver too many calls\n", id);
    return NULL;
}

/* A call just made for p: its refusal printed, or p waiting for it. */
static void started(pending *p, const char *id, fg_code rc, const fg_error *err) {
    if (rc != FG_CODE_OK) {
        printf("%s err %s %s\n", id, fg_code_name(rc), err->message);
        return;
    }
    p->waiting = true;
    waiting++;
}

static void start(const char *id, const char *key, const fg_limit *l, int64_t cost, bool peek) {
    pending *p = new_pending(id);
    if (p == NULL) return;
    fg_error err;
    in_call = true;
    fg_code rc = peek ? fg_async_peek(client, key, l, answered, p, &p->call, &err)
                      : fg_async_check(client, key, l, cost, answered, p, &p->call, &err);
    in_call = false;
    started(p, id, rc, &err);
}

static void granted(fg_code rc, const fg_lock_grant *g, const fg_error *err, void *arg) {
    pending *p = arg;
    printf("%s %s", p->id, in_call ? "inside " : "");
    if (rc != FG_CODE_OK)
        printf("err %s %s\n", fg_code_name(rc), err->message);
    else
        printf("ok %d %llu %lld %lld\n", g->acquired, (unsigned long long)g->token,
               (long long)g->ttl_ms, (long long)g->holds);
    answered_done(p);
}

static void counted(fg_code rc, int64_t value, const fg_error *err, void *arg) {
    pending *p = arg;
    printf("%s %s", p->id, in_call ? "inside " : "");
    if (rc != FG_CODE_OK)
        printf("err %s %s\n", fg_code_name(rc), err->message);
    else
        printf("ok %lld\n", (long long)value);
    answered_done(p);
}

static const char *decider_names[] = {"limit", "penalty", "denylist", "allowlist"};

static void checked(fg_code rc, const fg_policy_result *r, const fg_error *err, void *arg) {
    pending *p = arg;
    printf("%s %s", p->id, in_call ? "inside " : "");
    if (rc != FG_CODE_OK)
        printf("err %s %s\n", fg_code_name(rc), err->message);
    else
        printf("ok %d %lld %lld %s %d\n", r->result.allowed, (long long)r->result.remaining,
               (long long)r->result.retry_after_ms, decider_names[r->decided_by], r->limit_index);
    answered_done(p);
}

static void do_policy(void) {
    const char *id = strtok(NULL, " \n"), *name = strtok(NULL, " \n"), *key = strtok(NULL, " \n");
    const char *cost = strtok(NULL, " \n");
    if (id == NULL || name == NULL || key == NULL) {
        printf("err usage\n");
        return;
    }
    pending *p = new_pending(id);
    if (p == NULL) return;
    fg_error err;
    in_call = true;
    fg_code rc = fg_async_policy_check(client, name, key, NULL, cost != NULL ? atoll(cost) : 1,
                                       checked, p, &p->call, &err);
    in_call = false;
    started(p, id, rc, &err);
}

/* acquire, release, extend: the call is started, or its refusal printed. */
static void do_lock_call(const char *cmd) {
    const char *f[6];
    int need = strcmp(cmd, "acquire") == 0 ? 6 : 4;
    for (int i = 0; i < need; i++)
        if ((f[i] = strtok(NULL, " \n")) == NULL) {
            printf("err usage\n");
            return;
        }
    pending *p = new_pending(f[0]);
    if (p == NULL) return;
    fg_error err;
    fg_code rc;
    in_call = true;
    if (strcmp(cmd, "acquire") == 0)
        rc = fg_async_semaphore_acquire(client, f[1], atoll(f[2]), f[3], atoll(f[4]), atoll(f[5]),
                                        granted, p, &p->call, &err);
    else if (strcmp(cmd, "release") == 0)
        rc = fg_async_semaphore_release(client, f[1], f[2], atoll(f[3]), counted, p, &err);
    else
        rc = fg_async_extend(client, f[1], f[2], atoll(f[3]), counted, p, &p->call, &err);
    in_call = false;
    started(p, f[0], rc, &err);
}

static void do_start(bool peek) {
    const char *id = strtok(NULL, " \n");
    const char *key = strtok(NULL, " \n");
    fg_limit l;
    if (id == NULL || key == NULL || parse_limit(&l) < 0) {
        printf("err usage\n");
        return;
    }
    const char *cost = strtok(NULL, " \n");
    start(id, key, &l, cost != NULL ? atoll(cost) : 1, peek);
}

static void do_refund(void) {
    const char *id = strtok(NULL, " \n");
    const char *key = strtok(NULL, " \n");
    fg_limit l;
    const char *units = NULL;
    if (id == NULL || key == NULL || parse_limit(&l) < 0 || (units = strtok(NULL, " \n")) == NULL) {
        printf("err usage\n");
        return;
    }
    pending *p = new_pending(id);
    if (p == NULL) return;
    fg_error err;
    in_call = true;
    fg_code rc = fg_async_refund(client, key, &l, atoll(units), counted, p, &p->call, &err);
    in_call = false;
    started(p, id, rc, &err);
}

static void do_burst(void) {
    const char *n = strtok(NULL, " \n");
    const char *id = strtok(NULL, " \n");
    const char *key = strtok(NULL, " \n");
    fg_limit l;
    if (n == NULL || id == NULL || key == NULL || parse_limit(&l) < 0) {
        printf("err usage\n");
        return;
    }
    for (int i = 0; i < atoi(n); i++) {
        char each[64];
        snprintf(each, sizeof(each), "%s.%d", id, i);
        start(each, key, &l, 1, false);
    }
}

static void do_cancels(void) {
    const char *id = strtok(NULL, " \n"), *target = strtok(NULL, " \n");
    for (int i = 0; id != NULL && target != NULL && i < CALLS_MAX; i++)
        if (strcmp(calls[i].id, id) == 0)
            snprintf(calls[i].cancels, sizeof(calls[i].cancels), "%s", target);
}

static void wait_too_long(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what, (void)arg;
    event_base_loopbreak(base);
}

static void do_wait(void) {
    double t0 = now_ms();
    struct timeval cap = {WAIT_MAX_S, 0};
    evtimer_add(wait_cap, &cap);
    if (waiting > 0) event_base_dispatch(base);
    evtimer_del(wait_cap);
    printf("done %.1f\n", now_ms() - t0);
}

static void run_for(double ms) {
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((long)ms % 1000) * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: async_client URL [policy=...] [cache] [timeout_ms=N]\n");
        return 2;
    }
    fg_options o;
    parse_options(argc, argv, &o);
    base = event_base_new();
    wait_cap = evtimer_new(base, wait_too_long, NULL);
    fg_loop loop = fg_libevent_loop(base);
    fg_error err;
    client = fg_async_open(argv[1], &o, &loop, &err);
    printf(client != NULL ? "open ok\n" : "open err %s %s\n", fg_code_name(err.code), err.message);
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        const char *cmd = strtok(line, " \n");
        if (cmd == NULL) continue;
        if (strcmp(cmd, "cancel") == 0) {
            const char *id = strtok(NULL, " \n");
            if (id != NULL) cancel(id);
        } else if (client == NULL) {
            printf("err no client\n");
        } else if (strcmp(cmd, "check") == 0 || strcmp(cmd, "peek") == 0) {
            do_start(strcmp(cmd, "peek") == 0);
        } else if (strcmp(cmd, "acquire") == 0 || strcmp(cmd, "release") == 0 ||
                   strcmp(cmd, "extend") == 0) {
            do_lock_call(cmd);
        } else if (strcmp(cmd, "refund") == 0) {
            do_refund();
        } else if (strcmp(cmd, "policy") == 0) {
            do_policy();
        } else if (strcmp(cmd, "burst") == 0) {
            do_burst();
        } else if (strcmp(cmd, "cancels") == 0) {
            do_cancels();
        } else if (strcmp(cmd, "wait") == 0) {
            do_wait();
        } else if (strcmp(cmd, "sleep") == 0) {
            const char *ms = strtok(NULL, " \n");
            run_for(ms != NULL ? atof(ms) : 0);
            printf("ok\n");
        } else if (strcmp(cmd, "stats") == 0) {
            fg_stats s;
            fg_async_get_stats(client, &s);
            printf("ok %llu %llu %llu %llu %llu\n", (unsigned long long)s.decisions,
                   (unsigned long long)s.round_trips, (unsigned long long)s.denials_cached,
                   (unsigned long long)s.failures, (unsigned long long)s.reconnects);
        } else if (strcmp(cmd, "close") == 0) {
            fg_async_close(client);
            client = NULL;
            printf("closed\n");
        } else {
            printf("err unknown command\n");
        }
        fflush(stdout);
    }
    fg_async_close(client);
    event_free(wait_cap);
    event_base_free(base);
    return 0;
}
