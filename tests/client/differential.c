/*
 * differential.c - mem: and redis: must give the same answers.
 *
 *   differential PORT SEED ITERATIONS
 *
 * Opens "mem:" and "redis://127.0.0.1:PORT" with one injected clock and
 * send_clock (the server needs floodgate.explicit-time yes), feeds both the
 * same random checks, peeks, batches and resets (every algorithm, a small
 * pool of keys, costs including 0 and more than the limit, a few invalid
 * limits, a clock that advances and sometimes steps back), and requires
 * identical codes and results (all fields but the source). Exit 0 when all
 * agree, 1 at the first difference, printed.
 *
 * The injected clock runs a day ahead of the real one and faster, so the
 * server's keys (whose TTLs it counts on its own clock) live at least as
 * long as their states; mem: drops a state the moment it is empty. A key
 * that may have expired is therefore reset on both sides before it is used
 * again, and before the clock steps back, so that no answer depends on
 * whether an empty state is still stored. "May have expired" is by either
 * clock: the injected one (mem:'s state is empty), and the real one, for
 * the server's TTL of the last write (counted from the time of the write,
 * which is after the call began): on a loaded machine the real clock can
 * outrun the injected one, and the server would drop a state mem: still
 * holds. Within a batch the injected clock stands still, the real one does
 * not: a batch that reads a key again after writing it is not compared
 * when it took longer than that write's state lives (a server stalled
 * between the two commands may have dropped it); its keys are reset. Nor is
 * a call compared when a key it names had a state the server may have
 * dropped before the call ended (the settle's margin is a guess: a machine
 * loaded enough stalls longer, as two suites of 4 xdist workers each on 2
 * CPUs did); its keys are reset too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"

#define KEYS 8
#define DAY_US 86400000000LL

static int64_t clock_now;
static int64_t expiry[KEYS]; /* upper bound of each key's expiry; 0 = none */
/* the earliest real time (us) at which the server may drop each key */
static int64_t wall_expiry[KEYS];
#define WALL_MARGIN_US 1000000LL /* from the settle to the server's reading of the key */

static long undecided; /* calls not compared: see the top */

static int64_t wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
static long ops;

static int64_t injected_clock(void *arg) {
    (void)arg;
    return clock_now;
}

static const fg_limit *random_limit(void) {
    static fg_limit limits[15];
    limits[0] = fg_fixed_window(5, 1000);
    limits[1] = fg_fixed_window(3, 250.5);
    limits[2] = fg_sliding_window(5, 1000);
    limits[3] = fg_sliding_window(10, 333.3);
    limits[4] = fg_sliding_log(4, 500);
    limits[5] = fg_sliding_log(20, 2000);
    limits[6] = fg_token_bucket(5, 2);
    limits[7] = fg_token_bucket(3, 0.7);
    limits[8] = fg_leaky_bucket(6, 3.3);
    limits[9] = fg_gcra(5, 10, 1000);
    limits[10] = fg_gcra(2, 3, 100.7);
    limits[11] = fg_gcra(4, 1e6, 0.5); /* 0.5 ns: rounds to 1 ns */
    limits[12] = fg_token_bucket(1000000, 1.5); /* 666666666.7 ns: rounding shows */
    limits[13] = fg_fixed_window(2, 0.0004);   /* invalid: 0 us */
    limits[14] = fg_sliding_log(0, 100);       /* invalid */
    int r = rand() % 100;
    return &limits[r < 96 ? r % 13 : 13 + r % 2];
}

static int64_t random_cost(void) {
    int r = rand() % 20;
    return r == 0 ? 0 : r == 1 ? 25 : r == 2 ? 100000 : r < 12 ? 1 : r % 4;
}

static const char *key_name(int k) {
    static char names[KEYS][8];
    snprintf(names[k], sizeof(names[k]), "d%d", k);
    return names[k];
}

static void forget(fg_client *a, fg_client *b, int k) {
    fg_reset(a, key_name(k), NULL, NULL);
    fg_reset(b, key_name(k), NULL, NULL);
    expiry[k] = 0;
}

/* A key whose state may be empty by now, or which the server may have
 * dropped by now, is reset on both sides. */
static void settle(fg_client *a, fg_client *b, int k) {
    if (expiry[k] != 0 &&
        (expiry[k] <= clock_now + 1000 || wall_expiry[k] <= wall_us() + WALL_MARGIN_US))
        forget(a, b, k);
}

/* Whether the server may have dropped key k's state, by the real clock,
 * before a call that ended at end_us read it: the call's answers then tell
 * nothing, and are not compared. Before note_expiry. */
static bool maybe_dropped(int k, int64_t end_us) {
    return expiry[k] != 0 && wall_expiry[k] <= end_us;
}

/* Only a write sets a key's expiry, to when its new state is empty under the
 * limit of that write (another limit of the same family may judge the same
 * state differently, but does not change the expiry); the server counts it
 * from the write, which came after sent_us. */
static void note_expiry(int k, fg_code rc, const fg_result *r, int64_t cost, bool peek,
                        int64_t sent_us) {
    if (rc == FG_CODE_OK && r->allowed && cost > 0 && !peek) {
        expiry[k] = clock_now + r->reset_after_ms * 1000;
        wall_expiry[k] = sent_us + r->reset_after_ms * 1000;
    }
}

static int compare(const char *what, int k, const fg_limit *l, int64_t cost, fg_code ca,
                   const fg_result *ra, const fg_error *ea, fg_code cb, const fg_result *rb,
                   const fg_error *eb) {
    bool same = ca == cb;
    if (same && ca == FG_CODE_OK)
        same = ra->allowed == rb->allowed && ra->limit == rb->limit &&
               ra->remaining == rb->remaining && ra->retry_after_ms == rb->retry_after_ms &&
               ra->reset_after_ms == rb->reset_after_ms;
    if (same) return 0;
    printf("MISMATCH after %ld ops: %s key %s algorithm %d limit %lld window %.17g rate %.17g "
           "cost %lld at %lld\n",
           ops, what, key_name(k), (int)l->algorithm, (long long)l->limit, l->window_ms, l->rate,
           (long long)cost, (long long)clock_now);
    printf("  mem:   %s %d %lld %lld %lld %lld %s\n", fg_code_name(ca), ra->allowed,
           (long long)ra->limit, (long long)ra->remaining, (long long)ra->retry_after_ms,
           (long long)ra->reset_after_ms, ca == FG_CODE_OK ? "" : ea->message);
    printf("  redis: %s %d %lld %lld %lld %lld %s\n", fg_code_name(cb), rb->allowed,
           (long long)rb->limit, (long long)rb->remaining, (long long)rb->retry_after_ms,
           (long long)rb->reset_after_ms, cb == FG_CODE_OK ? "" : eb->message);
    return 1;
}

static int one_check(fg_client *a, fg_client *b, bool peek) {
    int k = rand() % KEYS;
    const fg_limit *l = random_limit();
    int64_t cost = random_cost();
    fg_result ra = {0}, rb = {0};
    fg_error ea = {0}, eb = {0};
    settle(a, b, k);
    int64_t sent_us = wall_us();
    fg_code ca = peek ? fg_peek(a, key_name(k), l, cost, &ra, &ea)
                      : fg_check(a, key_name(k), l, cost, &ra, &ea);
    fg_code cb = peek ? fg_peek(b, key_name(k), l, cost, &rb, &eb)
                      : fg_check(b, key_name(k), l, cost, &rb, &eb);
    if (maybe_dropped(k, wall_us())) {
        forget(a, b, k);
        undecided++;
        return 0;
    }
    note_expiry(k, ca, &ra, cost, peek, sent_us);
    return compare(peek ? "peek" : "check", k, l, cost, ca, &ra, &ea, cb, &rb, &eb);
}

static int one_batch(fg_client *a, fg_client *b) {
    fg_request ra[6], rb[6];
    int keys[6];
    size_t n = 1 + (size_t)(rand() % 6);
    for (size_t i = 0; i < n; i++) {
        keys[i] = rand() % KEYS;
        settle(a, b, keys[i]);
        ra[i] = (fg_request){.key = key_name(keys[i]), .limit = random_limit(),
                             .cost = random_cost(), .peek = rand() % 4 == 0};
        rb[i] = ra[i];
    }
    int64_t sent_us = wall_us();
    fg_code ca = fg_check_batch(a, ra, n, NULL), cb = fg_check_batch(b, rb, n, NULL);
    int64_t took_us = wall_us() - sent_us;
    for (size_t i = 0; i < n; i++) {
        if (!maybe_dropped(keys[i], sent_us + took_us)) continue;
        for (size_t m = 0; m < n; m++)
            forget(a, b, keys[m]);
        undecided++;
        return 0;
    }
    for (size_t i = 0; ca == FG_CODE_OK && cb == FG_CODE_OK && i < n; i++) {
        const fg_request *w = &ra[i];
        if (w->code != FG_CODE_OK || !w->result.allowed || w->cost <= 0 || w->peek ||
            w->result.reset_after_ms * 1000 > took_us + 1000)
            continue;
        for (size_t j = i + 1; j < n; j++) {
            if (keys[j] != keys[i]) continue;
            for (size_t m = 0; m < n; m++)
                forget(a, b, keys[m]);
            undecided++;
            return 0;
        }
    }
    if (ca != cb) {
        printf("MISMATCH after %ld ops: batch codes %s %s\n", ops, fg_code_name(ca),
               fg_code_name(cb));
        return 1;
    }
    fg_error none = {0};
    for (size_t i = 0; i < n; i++) {
        note_expiry(keys[i], ra[i].code, &ra[i].result, ra[i].cost, ra[i].peek, sent_us);
        if (compare("batch", keys[i], ra[i].limit, ra[i].cost, ra[i].code, &ra[i].result, &none,
                    rb[i].code, &rb[i].result, &none))
            return 1;
    }
    return 0;
}

static int one_reset(fg_client *a, fg_client *b) {
    int k = rand() % KEYS;
    bool ea = false, eb = false;
    settle(a, b, k);
    fg_code ca = fg_reset(a, key_name(k), &ea, NULL), cb = fg_reset(b, key_name(k), &eb, NULL);
    bool dropped = maybe_dropped(k, wall_us());
    expiry[k] = 0;
    if (dropped) {
        undecided++;
        return 0;
    }
    if (ca == cb && ea == eb) return 0;
    printf("MISMATCH after %ld ops: reset %s: mem %s %d, redis %s %d\n", ops, key_name(k),
           fg_code_name(ca), ea, fg_code_name(cb), eb);
    return 1;
}

/* Mostly forward, up to 300 ms; sometimes back, up to 200 ms. */
static void move_clock(fg_client *a, fg_client *b) {
    int r = rand() % 20;
    if (r == 0) {
        for (int k = 0; k < KEYS; k++)
            settle(a, b, k);
        clock_now -= rand() % 200000;
    } else if (r < 12) {
        clock_now += rand() % 300000;
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT SEED ITERATIONS\n", argv[0]);
        return 2;
    }
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%s", argv[1]);
    srand((unsigned)atoi(argv[2]));
    long iterations = atol(argv[3]);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    clock_now = (int64_t)ts.tv_sec * 1000000 + DAY_US;

    fg_options o;
    fg_options_init(&o);
    o.clock_us = injected_clock;
    o.send_clock = true;
    fg_error err;
    fg_client *mem = fg_open("mem:", &o, &err);
    fg_client *redis = fg_open(url, &o, &err);
    if (mem == NULL || redis == NULL) {
        printf("open: %s\n", err.message);
        return 2;
    }
    for (int k = 0; k < KEYS; k++)
        forget(mem, redis, k); /* left by an earlier run */
    int failed = 0;
    for (ops = 0; ops < iterations && !failed; ops++) {
        int r = rand() % 100;
        if (r < 70)
            failed = one_check(mem, redis, false);
        else if (r < 85)
            failed = one_check(mem, redis, true);
        else if (r < 95)
            failed = one_batch(mem, redis);
        else
            failed = one_reset(mem, redis);
        move_clock(mem, redis);
    }
    fg_stats st;
    fg_get_stats(redis, &st);
    if (!failed)
        printf("OK %ld operations, %llu decisions, %llu round trips, %ld calls not compared\n",
               ops, (unsigned long long)st.decisions, (unsigned long long)st.round_trips,
               undecided);
    fg_close(mem);
    fg_close(redis);
    return failed;
}
