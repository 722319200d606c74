/*
 * test_mem_policy.c - policies on mem: (mem_policy.c through the public
 * API), with an injected clock: exact answers of multi-limit policies,
 * lists, the penalty box, shadow mode, replacement with carried-over
 * state, the loader, the checks' messages, and waiting with threads: FIFO
 * order, a waiter that times out, one answered at once, one whose policy
 * is deleted, and many threads checking at once (run under TSan too).
 */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "floodgate.h"
#include "mem/mem_policy.h"

#define MS_US 1000LL
#define T0    1700000000000000LL /* a whole second */

static _Atomic int64_t fake_now;

static int64_t fake_clock(void *arg) {
    (void)arg;
    return atomic_load(&fake_now);
}

static void advance_ms(int64_t ms) {
    atomic_fetch_add(&fake_now, ms * MS_US);
}

static fg_client *open_mem(void) {
    fg_options o;
    fg_options_init(&o);
    o.clock_us = fake_clock;
    atomic_store(&fake_now, T0);
    fg_error err;
    fg_client *c = fg_open("mem:", &o, &err);
    assert_non_null(c);
    return c;
}

static void set(fg_client *c, const char *name, const fg_policy_def *def) {
    fg_error err;
    fg_code rc = fg_policy_set(c, name, def, &err);
    if (rc != FG_CODE_OK) print_error("fg_policy_set: %s\n", err.message);
    assert_int_equal(rc, FG_CODE_OK);
}

static fg_policy_def def_of(fg_limit a, fg_limit b) {
    fg_policy_def def;
    fg_policy_def_init(&def);
    def.limits[def.nlimits++] = a;
    if (b.limit > 0) def.limits[def.nlimits++] = b;
    return def;
}

static const fg_limit NONE = {FG_FIXED_WINDOW, 0, 0, 0};

static fg_policy_result check(fg_client *c, const char *name, const char *key, const char *id,
                              int64_t cost) {
    fg_policy_result r;
    fg_error err;
    fg_code rc = fg_policy_check(c, name, key, id, cost, &r, &err);
    if (rc != FG_CODE_OK) print_error("fg_policy_check: %s\n", err.message);
    assert_int_equal(rc, FG_CODE_OK);
    expect_i64(r.result.source, FG_SOURCE_MEMORY);
    return r;
}

/* `r` is evaluated once. */
#define expect_policy(r, allowed_, limit_, remaining_, retry_, reset_, by_, index_, shadow_)       \
    do {                                                                                           \
        fg_policy_result r_ = (r);                                                                 \
        expect_i64(r_.result.allowed, (allowed_));                                                 \
        expect_i64(r_.result.limit, (limit_));                                                     \
        expect_i64(r_.result.remaining, (remaining_));                                             \
        expect_i64(r_.result.retry_after_ms, (retry_));                                            \
        expect_i64(r_.result.reset_after_ms, (reset_));                                            \
        expect_i64(r_.decided_by, (by_));                                                          \
        expect_i64(r_.limit_index, (index_));                                                      \
        expect_i64(r_.shadow_denied, (shadow_));                                                   \
    } while (0)

static void expect_refusal(fg_code rc, const fg_error *err, fg_code code, const char *msg) {
    if (rc != code || strcmp(err->message, msg) != 0)
        print_error("got %s \"%s\", expected \"%s\"\n", fg_code_name(rc), err->message, msg);
    assert_int_equal(rc, code);
    assert_string_equal(err->message, msg);
}

/* ------------------------------------------------------------ deciding */

/* All or nothing: a request the second limit denies takes nothing from
 * the first; the answer names the deciding limit. */
static void test_limits_decide_together(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(10, 10), fg_fixed_window(3, 1000));
    set(c, "api", &def);
    expect_policy(check(c, "api", "u", NULL, 1), 1, 3, 2, -1, 1000, FG_BY_LIMIT, 1, 0);
    expect_policy(check(c, "api", "u", NULL, 2), 1, 3, 0, -1, 1000, FG_BY_LIMIT, 1, 0);
    expect_policy(check(c, "api", "u", NULL, 1), 0, 3, 0, 1000, 1000, FG_BY_LIMIT, 1, 0);
    advance_ms(1000); /* a new window; the bucket has refilled */
    expect_policy(check(c, "api", "u", NULL, 0), 1, 3, 3, -1, 0, FG_BY_LIMIT, 1, 0);
    expect_policy(check(c, "api", "u", NULL, 11), 0, 10, 3, -1, 0, FG_BY_LIMIT, 0, 0);
    fg_close(c);
}

static void test_lists_come_first(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_fixed_window(1, 1000), NONE);
    def.denylist = (fg_list_spec){FG_LIST_BLOOM, 0.001, 100};
    set(c, "l", &def);
    const void *items[] = {"vip", "bad", "vip"};
    size_t lens[] = {3, 3, 3};
    int64_t added = -1;
    fg_error err;
    assert_int_equal(fg_policy_list_add(c, "l", false, items, lens, 3, &added, &err), FG_CODE_OK);
    expect_i64(added, 2);
    assert_int_equal(fg_policy_list_add(c, "l", true, items + 1, lens, 1, &added, &err),
                     FG_CODE_OK);
    expect_i64(added, 1);
    for (int i = 0; i < 3; i++) /* the allow list charges nothing */
        expect_policy(check(c, "l", "k", "vip", 1), 1, 0, 0, -1, 0, FG_BY_ALLOWLIST, 0, 0);
    expect_policy(check(c, "l", "k", NULL, 1), 1, 1, 0, -1, 1000, FG_BY_LIMIT, 0, 0);
    /* listed on both: the deny list wins */
    expect_policy(check(c, "l", "bad", NULL, 1), 0, 0, 0, -1, 0, FG_BY_DENYLIST, 0, 0);
    expect_policy(check(c, "l", "k2", "bad", 0), 0, 0, 0, -1, 0, FG_BY_DENYLIST, 0, 0);
    fg_policy_info info;
    assert_int_equal(fg_policy_get(c, "l", &info, &err), FG_CODE_OK);
    expect_i64(info.allow_entries, 2);
    expect_i64(info.deny_entries, 1);
    expect_i64(info.allowed, 4);
    expect_i64(info.denied, 2);
    fg_close(c);
}

static void test_penalty_box(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_fixed_window(1, 1000), NONE);
    def.ban_ms = 5000;
    def.ban_after = 2;
    def.ban_within_ms = 3000;
    set(c, "p", &def);
    expect_policy(check(c, "p", "k", NULL, 1), 1, 1, 0, -1, 1000, FG_BY_LIMIT, 0, 0);
    expect_policy(check(c, "p", "k", NULL, 1), 0, 1, 0, 1000, 1000, FG_BY_LIMIT, 0, 0);
    /* the second denial within 3 s bans the key for 5 s */
    expect_policy(check(c, "p", "k", NULL, 1), 0, 1, 0, 5000, 5000, FG_BY_LIMIT, 0, 0);
    advance_ms(2000);
    expect_policy(check(c, "p", "k", NULL, 1), 0, 0, 0, 3000, 3000, FG_BY_PENALTY, 0, 0);
    advance_ms(3000);
    expect_policy(check(c, "p", "k", NULL, 1), 1, 1, 0, -1, 1000, FG_BY_LIMIT, 0, 0);
    fg_policy_info info;
    fg_error err;
    assert_int_equal(fg_policy_get(c, "p", &info, &err), FG_CODE_OK);
    expect_i64(info.banned, 1);
    assert_true(info.def.ban_within_ms == 3000);
    fg_close(c);
}

static void test_shadow_mode_counts_and_never_denies(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(2, 1), NONE);
    def.shadow = true;
    set(c, "s", &def);
    expect_policy(check(c, "s", "k", NULL, 2), 1, 2, 0, -1, 2000, FG_BY_LIMIT, 0, 0);
    expect_policy(check(c, "s", "k", NULL, 1), 1, 2, 0, -1, 2000, FG_BY_LIMIT, 0, 1);
    fg_policy_info info;
    fg_error err;
    assert_int_equal(fg_policy_get(c, "s", &info, &err), FG_CODE_OK);
    expect_i64(info.allowed, 2);
    expect_i64(info.shadow_denied, 1);
    fg_close(c);
}

/* A bucket that used 7 of 10 has 93 left when the capacity becomes 100
 * (docs/policies.md); the key stays the policy's, and a reset forgets it. */
static void test_replacing_carries_state_over(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(10, 1), NONE);
    set(c, "r", &def);
    expect_policy(check(c, "r", "k", NULL, 7), 1, 10, 3, -1, 7000, FG_BY_LIMIT, 0, 0);
    def.limits[0] = fg_token_bucket(100, 1);
    set(c, "r", &def);
    expect_policy(check(c, "r", "k", NULL, 0), 1, 100, 93, -1, 7000, FG_BY_LIMIT, 0, 0);
    set(c, "other", &def);
    fg_policy_result r;
    fg_error err;
    expect_refusal(fg_policy_check(c, "other", "k", NULL, 1, &r, &err), &err, FG_CODE_INVALID,
                   "ERR key holds the state of policy 'r'");
    bool existed = false;
    assert_int_equal(fg_reset(c, "k", &existed, &err), FG_CODE_OK);
    assert_true(existed);
    expect_policy(check(c, "other", "k", NULL, 1), 1, 100, 99, -1, 1000, FG_BY_LIMIT, 0, 0);
    bool deleted = false;
    assert_int_equal(fg_policy_delete(c, "r", &deleted, &err), FG_CODE_OK);
    assert_true(deleted);
    assert_int_equal(fg_policy_delete(c, "r", &deleted, &err), FG_CODE_OK);
    assert_false(deleted);
    expect_refusal(fg_policy_check(c, "r", "k", NULL, 1, &r, &err), &err, FG_CODE_INVALID,
                   "ERR no such policy 'r'");
    char **names;
    size_t n;
    assert_int_equal(fg_policy_names(c, &names, &n, &err), FG_CODE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(names[0], "other");
    fg_policy_names_free(names, n);
    fg_close(c);
}

static int loads;

static bool loader(const char *name, fg_policy_def *def, void *arg) {
    (void)arg;
    loads++;
    if (strcmp(name, "bad") == 0) return true; /* no limits: refused by the set */
    if (strcmp(name, "known") != 0) return false;
    def->limits[def->nlimits++] = fg_token_bucket(5, 1);
    return true;
}

static void test_the_loader_fills_a_miss_once(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_set_policy_loader(c, loader, NULL);
    expect_policy(check(c, "known", "k", NULL, 1), 1, 5, 4, -1, 1000, FG_BY_LIMIT, 0, 0);
    expect_policy(check(c, "known", "k", NULL, 1), 1, 5, 3, -1, 2000, FG_BY_LIMIT, 0, 0);
    assert_int_equal(loads, 1);
    fg_policy_result r;
    fg_error err;
    expect_refusal(fg_policy_check(c, "unknown", "k", NULL, 1, &r, &err), &err, FG_CODE_INVALID,
                   "ERR no such policy 'unknown'");
    assert_int_equal(loads, 2);
    expect_refusal(fg_policy_check(c, "bad", "k", NULL, 1, &r, &err), &err, FG_CODE_INVALID,
                   "ERR a policy needs 1 to 8 LIMIT rules");
    fg_set_policy_loader(c, NULL, NULL);
    expect_refusal(fg_policy_check(c, "unknown2", "k", NULL, 1, &r, &err), &err, FG_CODE_INVALID,
                   "ERR no such policy 'unknown2'");
    assert_int_equal(loads, 3);
    fg_close(c);
}

/* The module's messages, without a server. */
static void test_refusals(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(5, 1), NONE), bad;
    fg_error err;
    fg_policy_result r;
    expect_refusal(fg_policy_set(c, "a:b", &def, &err), &err, FG_CODE_INVALID,
                   "ERR policy name must be 1 to 64 letters, digits, '_', '-', '.' or '/'");
    char long_name[66];
    memset(long_name, 'n', 65);
    long_name[65] = '\0';
    expect_refusal(fg_policy_set(c, long_name, &def, &err), &err, FG_CODE_INVALID,
                   "ERR policy name must be 1 to 64 letters, digits, '_', '-', '.' or '/'");
    long_name[64] = '\0';
    assert_int_equal(fg_policy_set(c, long_name, &def, &err), FG_CODE_OK);
    bad = def;
    bad.nlimits = 9;
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR a policy needs 1 to 8 LIMIT rules");
    bad = def_of(fg_sliding_log(5, 1000), NONE);
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR unknown algorithm 'SLIDELOG' (TOKEN, LEAKY, GCRA, FIXED, SLIDING)");
    bad = def_of(fg_token_bucket(5, 0), NONE);
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR refill_per_sec must be greater than 0 and at most 1e+09");
    bad = def;
    bad.ban_ms = -1;
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR ban_ms must be greater than 0 and at most 1e+12");
    bad.ban_ms = 10;
    bad.ban_after = 0;
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR AFTER must be between 1 and 1000000");
    bad.ban_after = 1000001;
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR AFTER must be between 1 and 1000000");
    bad.ban_after = 1;
    bad.ban_within_ms = 1e13;
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR WITHIN must be greater than 0 and at most 1e+12");
    bad = def;
    bad.allowlist = (fg_list_spec){FG_LIST_BLOOM, 0, 10};
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR error must be at least 1e-09 and less than 1");
    bad.allowlist = (fg_list_spec){FG_LIST_BLOOM, 0.01, 0};
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR capacity must be between 1 and 1099511627776");
    bad.allowlist = (fg_list_spec){(fg_list_kind)7, 0.01, 10};
    expect_refusal(fg_policy_set(c, "p", &bad, &err), &err, FG_CODE_INVALID,
                   "ERR ALLOWLIST takes EXACT or BLOOM error capacity");
    set(c, "p", &def);
    expect_refusal(fg_policy_check(c, "p", "k", NULL, -1, &r, &err), &err, FG_CODE_INVALID,
                   "ERR COST must be between 0 and 9223372036854775807");
    expect_refusal(fg_policy_acquire(c, "p", "k", NULL, 1, 0, &r, &err), &err, FG_CODE_INVALID,
                   "ERR WAIT must be between 1 and 86400000");
    const void *none[] = {NULL};
    size_t zero[] = {0};
    expect_refusal(fg_policy_list_add(c, "p", true, none, zero, 0, NULL, &err), &err,
                   FG_CODE_INVALID, "ERR wrong number of arguments for 'FG.POLICY|DENY' command");
    expect_refusal(fg_policy_list_add(c, "q", true, none, zero, 1, NULL, &err), &err,
                   FG_CODE_INVALID, "ERR no such policy 'q'");
    fg_close(c);
}

/* ------------------------------------------------------------- waiting */

typedef struct waiter_thread {
    fg_client *c;
    const char *name, *key;
    int64_t cost, timeout_ms;
    pthread_t thread;
    fg_code rc;
    fg_error err;
    fg_policy_result r;
    atomic_int order; /* 0 until answered, then 1, 2, ... */
} waiter_thread;

static atomic_int answers;

static void *waiting(void *arg) {
    waiter_thread *w = arg;
    w->rc = fg_policy_acquire(w->c, w->name, w->key, NULL, w->cost, w->timeout_ms, &w->r, &w->err);
    atomic_store(&w->order, atomic_fetch_add(&answers, 1) + 1);
    return NULL;
}

static void start(waiter_thread *w) {
    assert_int_equal(pthread_create(&w->thread, NULL, waiting, w), 0);
}

static void pause_ms(long ms) {
    struct timespec ts = {0, ms * 1000000};
    nanosleep(&ts, NULL);
}

/* Until the policy counts n requests that waited. */
static void until_waited(fg_client *c, const char *name, int64_t n) {
    for (int i = 0; i < 10000; i++) {
        fg_policy_info info;
        fg_error err;
        assert_int_equal(fg_policy_get(c, name, &info, &err), FG_CODE_OK);
        if (info.waited >= n) return;
        pause_ms(1);
    }
    fail_msg("no waiter after 10 s");
}

static void until_answered(const waiter_thread *w) {
    for (int i = 0; i < 10000 && atomic_load(&w->order) == 0; i++)
        pause_ms(1);
    assert_true(atomic_load(&w->order) > 0);
}

/* Moves the clock, and wakes the key's head with a peek (a clock moved by
 * hand is seen at the next call on the key). */
static void tick(fg_client *c, const char *name, const char *key, int64_t ms) {
    advance_ms(ms);
    check(c, name, key, NULL, 0);
}

/* A large request is not overtaken by a small one behind it. */
static void test_waiters_are_served_in_order(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(2, 1), NONE);
    set(c, "w", &def);
    check(c, "w", "k", NULL, 2); /* empty */
    waiter_thread a = {.c = c, .name = "w", .key = "k", .cost = 2, .timeout_ms = 60000};
    waiter_thread b = {.c = c, .name = "w", .key = "k", .cost = 1, .timeout_ms = 60000};
    start(&a);
    until_waited(c, "w", 1);
    start(&b);
    until_waited(c, "w", 2);
    tick(c, "w", "k", 1000); /* one unit: b's, were it alone */
    pause_ms(20);
    assert_int_equal(atomic_load(&a.order) + atomic_load(&b.order), 0);
    tick(c, "w", "k", 1000);
    until_answered(&a);
    assert_int_equal(atomic_load(&b.order), 0); /* nothing left for it yet */
    tick(c, "w", "k", 1000);
    until_answered(&b);
    pthread_join(a.thread, NULL);
    pthread_join(b.thread, NULL);
    assert_int_equal(a.rc, FG_CODE_OK);
    assert_int_equal(b.rc, FG_CODE_OK);
    assert_int_equal(atomic_load(&a.order) + 1, atomic_load(&b.order));
    expect_policy(a.r, 1, 2, 0, -1, 2000, FG_BY_LIMIT, 0, 0);
    expect_policy(b.r, 1, 2, 0, -1, 2000, FG_BY_LIMIT, 0, 0);
    fg_close(c);
}

/* At its deadline, a waiter whose unit is there but that has a waiter
 * ahead is denied with retry 0 and takes nothing; one that can never fit
 * or would wait beyond its timeout is answered at once. */
static void test_deadlines_and_immediate_answers(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(2, 1), NONE);
    set(c, "d", &def);
    check(c, "d", "k", NULL, 2);
    waiter_thread big = {.c = c, .name = "d", .key = "k", .cost = 2, .timeout_ms = 60000};
    waiter_thread late = {.c = c, .name = "d", .key = "k", .cost = 1, .timeout_ms = 1200};
    start(&big);
    until_waited(c, "d", 1);
    start(&late);
    until_waited(c, "d", 2);
    tick(c, "d", "k", 1000);
    until_answered(&late); /* after 1.2 s of real time */
    assert_int_equal(late.rc, FG_CODE_OK);
    expect_policy(late.r, 0, 2, 0, 0, 2000, FG_BY_LIMIT, 0, 0);
    expect_policy(check(c, "d", "k", NULL, 0), 1, 2, 1, -1, 1000, FG_BY_LIMIT, 0, 0);
    assert_int_equal(atomic_load(&big.order), 0);

    fg_policy_result r;
    fg_error err;
    assert_int_equal(fg_policy_acquire(c, "d", "k", NULL, 3, 60000, &r, &err), FG_CODE_OK);
    expect_policy(r, 0, 2, 1, -1, 1000, FG_BY_LIMIT, 0, 0);
    tick(c, "d", "k", 1000);
    until_answered(&big);
    expect_policy(big.r, 1, 2, 0, -1, 2000, FG_BY_LIMIT, 0, 0);
    assert_int_equal(fg_policy_acquire(c, "d", "k", NULL, 1, 999, &r, &err), FG_CODE_OK);
    expect_policy(r, 0, 2, 0, 1000, 2000, FG_BY_LIMIT, 0, 0);
    pthread_join(big.thread, NULL);
    pthread_join(late.thread, NULL);
    fg_policy_info info;
    assert_int_equal(fg_policy_get(c, "d", &info, &err), FG_CODE_OK);
    expect_i64(info.waited, 2);
    fg_close(c);
}

/* A denial that would ban does not ban a waiter: it waits for its limits,
 * as on a server (mem: once answered at once, with the ban). */
static void test_a_waiter_is_not_banned_by_its_first_denial(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_token_bucket(1, 10), NONE);
    def.ban_ms = 60000;
    set(c, "b", &def);
    check(c, "b", "k", NULL, 1);
    waiter_thread w = {.c = c, .name = "b", .key = "k", .cost = 1, .timeout_ms = 2000};
    start(&w);
    until_waited(c, "b", 1);
    advance_ms(100);
    until_answered(&w);
    pthread_join(w.thread, NULL);
    assert_int_equal(w.rc, FG_CODE_OK);
    expect_policy(w.r, 1, 1, 0, -1, 100, FG_BY_LIMIT, 0, 0);
    fg_policy_info info;
    fg_error err;
    assert_int_equal(fg_policy_get(c, "b", &info, &err), FG_CODE_OK);
    expect_i64(info.banned, 0);
    fg_close(c);
}

static void test_a_deleted_policy_answers_its_waiters(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_fixed_window(1, 10000), NONE);
    set(c, "gone", &def);
    check(c, "gone", "k", NULL, 1);
    waiter_thread w = {.c = c, .name = "gone", .key = "k", .cost = 1, .timeout_ms = 60000};
    start(&w);
    until_waited(c, "gone", 1);
    fg_error err;
    assert_int_equal(fg_policy_delete(c, "gone", NULL, &err), FG_CODE_OK);
    pthread_join(w.thread, NULL);
    expect_refusal(w.rc, &w.err, FG_CODE_INVALID, "ERR no such policy 'gone'");
    fg_close(c);
}

/* Many threads on a few keys: every unit is taken once. */
typedef struct hammer {
    fg_client *c;
    int allowed;
} hammer;

static void *hammering(void *arg) {
    hammer *h = arg;
    for (int i = 0; i < 2000; i++) {
        fg_policy_result r;
        fg_error err;
        char key[16];
        snprintf(key, sizeof(key), "k%d", i % 4);
        if (fg_policy_check(h->c, "h", key, NULL, 1, &r, &err) == FG_CODE_OK && r.result.allowed)
            h->allowed++;
    }
    return NULL;
}

static void test_threads_share_the_table(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_policy_def def = def_of(fg_fixed_window(1000, 60000), fg_token_bucket(100000, 1));
    set(c, "h", &def);
    hammer hs[4] = {{c, 0}, {c, 0}, {c, 0}, {c, 0}};
    pthread_t ts[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&ts[i], NULL, hammering, &hs[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(ts[i], NULL);
    assert_int_equal(hs[0].allowed + hs[1].allowed + hs[2].allowed + hs[3].allowed, 4000);
    fg_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_decide_together),
        cmocka_unit_test(test_lists_come_first),
        cmocka_unit_test(test_penalty_box),
        cmocka_unit_test(test_shadow_mode_counts_and_never_denies),
        cmocka_unit_test(test_replacing_carries_state_over),
        cmocka_unit_test(test_the_loader_fills_a_miss_once),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_waiters_are_served_in_order),
        cmocka_unit_test(test_deadlines_and_immediate_answers),
        cmocka_unit_test(test_a_waiter_is_not_banned_by_its_first_denial),
        cmocka_unit_test(test_a_deleted_policy_answers_its_waiters),
        cmocka_unit_test(test_threads_share_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
