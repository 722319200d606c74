/*
 * test_client_mem.c - libfloodgate's public API on mem:, with an injected
 * clock: URL parsing, the module's parameter conversion and ranges, exact
 * answers of every algorithm, peeks, resets, families, batches, and many
 * threads on one client.
 */
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "floodgate.h"
#include "url.h"


#define MS_US 1000LL /* one millisecond in us (test_util.h has MS in ns) */
/* A whole number of seconds, so clock-aligned windows start here. */
#define T0 1700000000000000LL

static int64_t fake_now;

static int64_t fake_clock(void *arg) {
    (void)arg;
    return fake_now;
}

static fg_client *open_mem(void) {
    fg_options o;
    fg_options_init(&o);
    o.clock_us = fake_clock;
    fake_now = T0;
    fg_error err;
    fg_client *c = fg_open("mem:", &o, &err);
    assert_non_null(c);
    return c;
}

/* `r` is evaluated once, so it may be a call that takes units. */
#define expect_result(r, allowed_, limit_, remaining_, retry_, reset_) \
    do {                                                               \
        fg_result r_ = (r);                                            \
        expect_i64(r_.allowed, (allowed_));                            \
        expect_i64(r_.limit, (limit_));                                \
        expect_i64(r_.remaining, (remaining_));                        \
        expect_i64(r_.retry_after_ms, (retry_));                       \
        expect_i64(r_.reset_after_ms, (reset_));                       \
    } while (0)

/* fg_check that must succeed; answers the result. */
static fg_result check(fg_client *c, const char *key, fg_limit l, int64_t cost) {
    fg_result r;
    fg_error err;
    fg_code rc = fg_check(c, key, &l, cost, &r, &err);
    if (rc != FG_CODE_OK) print_error("fg_check: %s\n", err.message);
    expect_i64(rc, FG_CODE_OK);
    expect_i64(r.source, FG_SOURCE_MEMORY);
    return r;
}

static fg_result peek(fg_client *c, const char *key, fg_limit l, int64_t cost) {
    fg_result r;
    expect_i64(fg_peek(c, key, &l, cost, &r, NULL), FG_CODE_OK);
    return r;
}

static fg_code check_code(fg_client *c, const char *key, fg_limit l, int64_t cost) {
    fg_result r;
    return fg_check(c, key, &l, cost, &r, NULL);
}

/* ------------------------------------------------------------------ URLs */

static void test_url_valid(void **state) {
    (void)state;
    fg_url u;
    expect_i64(fg_url_parse(NULL, &u, NULL), FG_CODE_OK);
    expect_i64(u.kind, FG_URL_MEM);
    expect_i64(fg_url_parse("", &u, NULL), FG_CODE_OK);
    expect_i64(u.kind, FG_URL_MEM);

    expect_i64(fg_url_parse("redis://localhost", &u, NULL), FG_CODE_OK);
    expect_i64(u.kind, FG_URL_TCP);
    assert_string_equal(u.host, "localhost");
    expect_i64(u.port, 6379);
    expect_i64(u.db, 0);
    assert_false(u.has_password);

    expect_i64(fg_url_parse("redis://alice:p%40ss@10.0.0.1:7000/3", &u, NULL), FG_CODE_OK);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.password, "p@ss");
    assert_true(u.has_password);
    assert_string_equal(u.host, "10.0.0.1");
    expect_i64(u.port, 7000);
    expect_i64(u.db, 3);

    expect_i64(fg_url_parse("redis://:secret@[::1]:6380/", &u, NULL), FG_CODE_OK);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "secret");
    assert_string_equal(u.host, "::1");
    expect_i64(u.port, 6380);

    expect_i64(fg_url_parse("unix:///run/redis.sock?db=2", &u, NULL), FG_CODE_OK);
    expect_i64(u.kind, FG_URL_UNIX);
    assert_string_equal(u.path, "/run/redis.sock");
    expect_i64(u.db, 2);
}

static void test_url_invalid(void **state) {
    (void)state;
    static const char *bad[] = {
        "mem:x", "http://host", "redis://", "redis://:6379", "redis://host:0",
        "redis://host:65536", "redis://host:12x", "redis://host/x", "redis://host/-1",
        "redis://user@host", "redis://u:p%4@host", "redis://[::1", "unix://", "unix://relative",
        "unix:///tmp/s?database=1", "unix:///tmp/s?db=x", "localhost:6379",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fg_error err = {FG_CODE_OK, ""};
        fg_client *c = fg_open(bad[i], NULL, &err);
        if (c != NULL) print_error("accepted %s\n", bad[i]);
        assert_null(c);
        expect_i64(err.code, FG_CODE_INVALID);
        assert_non_null(strstr(err.message, "invalid URL"));
    }
}

static void test_open_defaults(void **state) {
    (void)state;
    fg_options o;
    fg_options_init(&o);
    expect_i64(o.connect_timeout_ms, 1000);
    expect_i64(o.command_timeout_ms, 1000);
    expect_i64(o.on_failure, FG_ON_FAILURE_ERROR);
    assert_false(o.cache_denials);
    assert_false(o.send_clock);
    assert_null(o.clock_us);
    const char *urls[] = {NULL, "", "mem:"};
    for (int i = 0; i < 3; i++) {
        fg_client *c = fg_open(urls[i], NULL, NULL);
        assert_non_null(c);
        fg_limit l = fg_token_bucket(5, 1); /* the wall clock */
        fg_result r;
        expect_i64(fg_check(c, "k", &l, 1, &r, NULL), FG_CODE_OK);
        expect_result(r, true, 5, 4, -1, 1000);
        fg_close(c);
    }
    assert_string_equal(fg_code_name(FG_CODE_IO), "io");
    assert_string_equal(fg_code_name(FG_CODE_WRONGTYPE), "wrongtype");
    assert_string_equal(fg_code_name(FG_CODE_INVALID), "invalid");
}

/* ----------------------------------------------------------- algorithms */

static void test_token_bucket(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit l = fg_token_bucket(10, 1); /* a token per second */
    expect_result(check(c, "t", l, 1), true, 10, 9, -1, 1000);
    expect_result(check(c, "t", l, 8), true, 10, 1, -1, 9000);
    /* Two tokens wanted, one left: the second comes back in a second. */
    expect_result(check(c, "t", l, 2), false, 10, 1, 1000, 9000);
    /* More than the capacity never fits. */
    expect_result(check(c, "t", l, 11), false, 10, 1, -1, 9000);
    fake_now += 1500 * MS_US;
    expect_result(check(c, "t", l, 2), true, 10, 0, -1, 9500);
    /* The same state seen as a leaky bucket: same family, shared. */
    expect_result(check(c, "t", fg_leaky_bucket(10, 1), 1), false, 10, 0, 500, 9500);
    fg_close(c);
}

static void test_rates_rounded_like_the_module(void **state) {
    (void)state;
    fg_client *c = open_mem();
    /* 1e9 / 3 ns = 333333333.3 -> 333333333 ns: 333.33 ms rounds up to 334. */
    expect_result(check(c, "r3", fg_token_bucket(1, 3), 1), true, 1, 0, -1, 334);
    expect_result(check(c, "r3", fg_token_bucket(1, 3), 1), false, 1, 0, 334, 334);
    fake_now += 333333; /* 333333 us: the TAT (333333333 ns) not reached */
    expect_result(check(c, "r3", fg_token_bucket(1, 3), 1), false, 1, 0, 1, 1);
    fake_now += 1;
    expect_result(check(c, "r3", fg_token_bucket(1, 3), 1), true, 1, 0, -1, 334);
    /* 1e9 / 1.5 = 666666666.7 ns rounds to 666666667 ns, and 2 ms / 3 =
     * 666666.7 ns to 666667 ns: a million units make the rounding visible. */
    expect_result(check(c, "big", fg_token_bucket(1000000, 1.5), 1000000), true, 1000000, 0, -1,
                  666666667);
    expect_result(check(c, "big2", fg_gcra(1000000, 3, 2), 1000000), true, 1000000, 0, -1,
                  666667);
    /* GCRA: 5 per 100 ms = 20 ms each, a burst of 2. */
    fg_limit g = fg_gcra(2, 5, 100);
    expect_result(check(c, "g", g, 1), true, 2, 1, -1, 20);
    expect_result(check(c, "g", g, 1), true, 2, 0, -1, 40);
    expect_result(check(c, "g", g, 1), false, 2, 0, 20, 40);
    /* A window of 0.0014 ms is 1 us: the next microsecond is a new window. */
    fg_limit f = fg_fixed_window(1, 0.0014);
    expect_result(check(c, "f", f, 1), true, 1, 0, -1, 1);
    expect_result(check(c, "f", f, 1), false, 1, 0, 1, 1);
    fake_now += 1;
    expect_result(check(c, "f", f, 1), true, 1, 0, -1, 1);
    fg_close(c);
}

static void test_fixed_window(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit l = fg_fixed_window(3, 1000);
    fake_now = T0 + 200 * MS_US;
    expect_result(check(c, "f", l, 2), true, 3, 1, -1, 800);
    expect_result(check(c, "f", l, 1), true, 3, 0, -1, 800);
    fake_now = T0 + 600 * MS_US;
    expect_result(check(c, "f", l, 1), false, 3, 0, 400, 400);
    fake_now = T0 + 1000 * MS_US; /* a new window */
    expect_result(check(c, "f", l, 3), true, 3, 0, -1, 1000);
    expect_result(check(c, "f", l, 4), false, 3, 0, -1, 1000);
    fg_close(c);
}

static void test_sliding_window(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit l = fg_sliding_window(10, 1000);
    expect_result(check(c, "s", l, 8), true, 10, 2, -1, 2000);
    /* Half-way through the next window the previous one weighs 8 * 0.5. */
    fake_now = T0 + 1500 * MS_US;
    expect_result(check(c, "s", l, 6), true, 10, 0, -1, 1500);
    /* 4 + 6 = 10: one more needs the previous window's weight to drop by one
     * unit, 1/8 of its 1000 ms: 125 ms. */
    expect_result(check(c, "s", l, 1), false, 10, 0, 125, 1500);
    fg_close(c);
}

static void test_sliding_log(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit l = fg_sliding_log(3, 1000);
    expect_result(check(c, "l", l, 1), true, 3, 2, -1, 1000);
    fake_now += 100 * MS_US;
    expect_result(check(c, "l", l, 2), true, 3, 0, -1, 1000);
    fake_now += 100 * MS_US;
    /* The oldest unit leaves at T0 + 1000 ms, 800 ms from now; two units
     * need the entries of T0 + 100 ms to leave too. */
    expect_result(check(c, "l", l, 1), false, 3, 0, 800, 900);
    expect_result(check(c, "l", l, 2), false, 3, 0, 900, 900);
    fake_now = T0 + 1000 * MS_US;
    expect_result(check(c, "l", l, 1), true, 3, 0, -1, 1000);
    fg_close(c);
}

/* ------------------------------------------------------------- behaviour */

static void test_peek_writes_nothing(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit limits[] = {fg_fixed_window(5, 1000), fg_sliding_window(5, 1000),
                         fg_sliding_log(5, 1000), fg_token_bucket(5, 1), fg_gcra(5, 5, 1000)};
    for (size_t i = 0; i < 5; i++) {
        char key[8];
        snprintf(key, sizeof(key), "p%zu", i);
        fg_result first = peek(c, key, limits[i], 2);
        expect_i64(first.allowed, true);
        expect_i64(first.remaining, 3);
        for (int j = 0; j < 3; j++)
            expect_result(peek(c, key, limits[i], 2), true, 5, 3, -1, first.reset_after_ms);
        expect_i64(peek(c, key, limits[i], 0).remaining, 5);
        /* cost 0 on fg_check is a peek too. */
        expect_i64(check(c, key, limits[i], 0).remaining, 5);
        expect_i64(check(c, key, limits[i], 5).remaining, 0);
        fg_result r = peek(c, key, limits[i], 1);
        assert_false(r.allowed);
        assert_true(r.retry_after_ms > 0);
    }
    fg_close(c);
}

static void test_reset_and_expiry(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit l = fg_token_bucket(2, 1);
    bool existed = true;
    expect_i64(fg_reset(c, "x", &existed, NULL), FG_CODE_OK);
    assert_false(existed);
    check(c, "x", l, 2);
    assert_false(check(c, "x", l, 1).allowed);
    expect_i64(fg_reset(c, "x", &existed, NULL), FG_CODE_OK);
    assert_true(existed);
    expect_result(check(c, "x", l, 2), true, 2, 0, -1, 2000);
    /* Once its state is empty again (2 s) a key is gone. */
    fake_now += 2000 * MS_US;
    expect_i64(fg_reset(c, "x", &existed, NULL), FG_CODE_OK);
    assert_false(existed);
    expect_i64(fg_reset(c, "x", NULL, NULL), FG_CODE_OK);
    fg_close(c);
}

static void test_wrongtype_across_families(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit fixed = fg_fixed_window(5, 1000), sliding = fg_sliding_window(5, 1000),
             slog = fg_sliding_log(5, 1000), bucket = fg_token_bucket(5, 1);
    check(c, "fixed", fixed, 1);
    check(c, "sliding", sliding, 1);
    check(c, "slog", slog, 1);
    check(c, "bucket", bucket, 1);
    fg_error err;
    fg_result r;
    expect_i64(fg_check(c, "fixed", &sliding, 1, &r, &err), FG_CODE_WRONGTYPE);
    assert_non_null(strstr(err.message, "WRONGTYPE"));
    expect_i64(check_code(c, "fixed", slog, 1), FG_CODE_WRONGTYPE);
    expect_i64(check_code(c, "fixed", bucket, 1), FG_CODE_WRONGTYPE);
    expect_i64(check_code(c, "sliding", fixed, 1), FG_CODE_WRONGTYPE);
    expect_i64(check_code(c, "slog", sliding, 1), FG_CODE_WRONGTYPE);
    expect_i64(check_code(c, "bucket", fixed, 0), FG_CODE_WRONGTYPE);
    expect_i64(fg_peek(c, "bucket", &slog, 1, &r, NULL), FG_CODE_WRONGTYPE);
    /* The bucket family shares its state among token, leaky and GCRA. */
    expect_i64(check(c, "bucket", fg_leaky_bucket(5, 1), 1).remaining, 3);
    expect_i64(check(c, "bucket", fg_gcra(5, 1, 1000), 1).remaining, 2);
    /* Bad parameters answer INVALID before the key is looked at. */
    expect_i64(check_code(c, "fixed", fg_sliding_window(0, 1000), 1), FG_CODE_INVALID);
    fg_close(c);
}

static void test_bad_inputs(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit bad[] = {
        fg_fixed_window(0, 1000),          fg_fixed_window(-1, 1000),
        fg_fixed_window(1, 0),             fg_fixed_window(1, -5),
        fg_fixed_window(1, 0.0004),        fg_fixed_window(1, 1e12 + 1),
        fg_fixed_window(1, NAN),           fg_sliding_window(1, INFINITY),
        fg_sliding_log(100001, 1000),      fg_token_bucket(0, 1),
        fg_token_bucket(1, 0),             fg_token_bucket(1, 1e9 + 1),
        fg_token_bucket(1, 1e-10),         fg_leaky_bucket(1, -1),
        fg_gcra(1, 0, 1000),               fg_gcra(1, 1e18 + 1e3 * 1e18, 1),
        fg_gcra(1, 3, 0.000001),           fg_gcra(1, 1, 0),
        fg_gcra(1, 1e-18, 1e12),           fg_token_bucket(INT64_MAX, 1e-9),
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fg_error err = {FG_CODE_OK, ""};
        fg_result r;
        fg_code rc = fg_check(c, "bad", &bad[i], 1, &r, &err);
        if (rc != FG_CODE_INVALID) print_error("limit %zu accepted\n", i);
        expect_i64(rc, FG_CODE_INVALID);
        expect_i64(err.code, FG_CODE_INVALID);
        assert_true(strncmp(err.message, "ERR ", 4) == 0);
        expect_i64(fg_peek(c, "bad", &bad[i], 1, &r, NULL), FG_CODE_INVALID);
    }
    fg_limit ok = fg_token_bucket(1, 1);
    expect_i64(check_code(c, "bad", ok, -1), FG_CODE_INVALID);
    expect_i64(fg_check(c, "bad", NULL, 1, &(fg_result){0}, NULL), FG_CODE_INVALID);
    expect_i64(fg_check(c, NULL, &ok, 1, &(fg_result){0}, NULL), FG_CODE_INVALID);
    fg_limit unknown = ok;
    unknown.algorithm = (fg_algorithm)42;
    expect_i64(check_code(c, "bad", unknown, 1), FG_CODE_INVALID);
    /* The edges that are valid. */
    expect_i64(check_code(c, "e1", fg_sliding_log(100000, 1), 1), FG_CODE_OK);
    expect_i64(check_code(c, "e2", fg_fixed_window(1, 0.001), 1), FG_CODE_OK);
    expect_i64(check_code(c, "e3", fg_gcra(1, 2, 0.000001), 1), FG_CODE_OK);
    expect_i64(check_code(c, "e4", fg_token_bucket(1, 1e9), 1), FG_CODE_OK);
    /* Nothing was written by the failures. */
    bool existed;
    fg_reset(c, "bad", &existed, NULL);
    assert_false(existed);
    fg_close(c);
}

static void test_batch(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_limit l = fg_fixed_window(2, 1000), bad = fg_fixed_window(0, 1000),
             other = fg_token_bucket(1, 1);
    fg_request reqs[] = {
        {.key = "b", .limit = &l, .cost = 1},
        {.key = "b", .limit = &l, .cost = 1, .peek = true},
        {.key = "b", .limit = &bad, .cost = 1},
        {.key = "b", .limit = &l, .cost = 1},
        {.key = "b", .limit = &l, .cost = 1},
        {.key = "b", .limit = &other, .cost = 1},
        {.key = NULL, .limit = &l, .cost = 1},
    };
    expect_i64(fg_check_batch(c, reqs, 7, NULL), FG_CODE_OK);
    expect_i64(reqs[0].code, FG_CODE_OK);
    expect_result(reqs[0].result, true, 2, 1, -1, 1000);
    expect_result(reqs[1].result, true, 2, 0, -1, 1000);
    expect_i64(reqs[2].code, FG_CODE_INVALID);
    expect_result(reqs[3].result, true, 2, 0, -1, 1000);
    expect_result(reqs[4].result, false, 2, 0, 1000, 1000);
    expect_i64(reqs[4].result.source, FG_SOURCE_MEMORY);
    expect_i64(reqs[5].code, FG_CODE_WRONGTYPE);
    expect_i64(reqs[6].code, FG_CODE_INVALID);
    fg_stats st;
    fg_get_stats(c, &st);
    expect_i64(st.decisions, 4);
    expect_i64(st.round_trips, 0);
    expect_i64(fg_check_batch(c, NULL, 0, NULL), FG_CODE_OK);
    fg_close(c);
}

static void test_stats(void **state) {
    (void)state;
    fg_client *c = open_mem();
    for (int i = 0; i < 5; i++)
        check(c, "s", fg_token_bucket(3, 1), 1);
    check_code(c, "s", fg_token_bucket(0, 1), 1);
    fg_stats st;
    fg_get_stats(c, &st);
    expect_i64(st.decisions, 5);
    expect_i64(st.round_trips + st.denials_cached + st.failures + st.reconnects, 0);
    fg_close(c);
}

/* --------------------------------------------------------------- threads */

#define THREADS 8
#define CALLS 2000

typedef struct worker {
    fg_client *c;
    fg_limit limit;
    atomic_llong *admitted;
} worker;

static void *hammer(void *arg) {
    worker *w = arg;
    char key[8];
    for (int i = 0; i < CALLS; i++) {
        fg_result r;
        snprintf(key, sizeof(key), "k%d", i % 4);
        if (fg_check(w->c, key, &w->limit, 1 + i % 3, &r, NULL) == FG_CODE_OK && r.allowed)
            atomic_fetch_add(&w->admitted[i % 4], 1 + i % 3);
    }
    return NULL;
}

static void run_hammer(fg_limit limit, int64_t capacity) {
    fg_client *c = open_mem();
    atomic_llong admitted[4] = {0};
    pthread_t t[THREADS];
    worker w = {c, limit, admitted};
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &w), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int k = 0; k < 4; k++) {
        assert_true(admitted[k] <= capacity);
        /* Costs of 1 are always tried, so the capacity is used up. */
        assert_true(admitted[k] >= capacity - 2);
    }
    fg_stats st;
    fg_get_stats(c, &st);
    expect_i64(st.decisions, THREADS * CALLS);
    fg_close(c);
}

static void test_threads(void **state) {
    (void)state;
    /* The clock stands still: nothing refills while the threads run. */
    run_hammer(fg_fixed_window(500, 60000), 500);
    run_hammer(fg_token_bucket(300, 1), 300);
    run_hammer(fg_sliding_log(700, 60000), 700);
}

/* fg_inspect on mem: gives the text a server gives for the same state. */
static void test_inspect_matches_the_server_format(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    fg_result r;
    char buf[256];
    fg_limit bucket = fg_token_bucket(10, 2), fixed = fg_fixed_window(5, 1000);
    fg_limit sliding = fg_sliding_window(5, 1000), log = fg_sliding_log(5, 1000);
    assert_int_equal(fg_check(c, "b", &bucket, 2, &r, &err), FG_CODE_OK);
    assert_int_equal(fg_check(c, "f", &fixed, 2, &r, &err), FG_CODE_OK);
    assert_int_equal(fg_check(c, "s", &sliding, 2, &r, &err), FG_CODE_OK);
    assert_int_equal(fg_check(c, "l", &log, 2, &r, &err), FG_CODE_OK);
    fake_now += 5;
    assert_int_equal(fg_check(c, "l", &log, 1, &r, &err), FG_CODE_OK);
    assert_int_equal(fg_inspect(c, "b", buf, sizeof(buf), &err), FG_CODE_OK);
    assert_string_equal(buf, "type=bucket tat_ns=1700000001000000000 pttl=1000");
    assert_int_equal(fg_inspect(c, "f", buf, sizeof(buf), &err), FG_CODE_OK);
    assert_string_equal(buf, "type=fixed window_start_us=1700000000000000 count=2 pttl=1000");
    assert_int_equal(fg_inspect(c, "s", buf, sizeof(buf), &err), FG_CODE_OK);
    assert_string_equal(buf, "type=sliding window_start_us=1700000000000000 count=2 "
                             "prev_count=0 pttl=2000");
    assert_int_equal(fg_inspect(c, "l", buf, sizeof(buf), &err), FG_CODE_OK);
    assert_string_equal(buf, "type=slidelog entries=1700000000000000,2,1700000000000005,1 "
                             "pttl=1000");
    assert_int_equal(fg_inspect(c, "none", buf, sizeof(buf), &err), FG_CODE_OK);
    assert_string_equal(buf, "");
    /* Regression: no state is "" even in a buffer too small for any state. */
    assert_int_equal(fg_inspect(c, "none", buf, 3, &err), FG_CODE_OK);
    assert_string_equal(buf, "");
    assert_int_equal(fg_inspect(c, "b", buf, 10, &err), FG_CODE_INVALID);
    assert_string_equal(buf, "");
    fake_now += 2000000; /* everything has expired */
    assert_int_equal(fg_inspect(c, "s", buf, sizeof(buf), &err), FG_CODE_OK);
    assert_string_equal(buf, "");
    fg_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_valid),
        cmocka_unit_test(test_inspect_matches_the_server_format),
        cmocka_unit_test(test_url_invalid),
        cmocka_unit_test(test_open_defaults),
        cmocka_unit_test(test_token_bucket),
        cmocka_unit_test(test_rates_rounded_like_the_module),
        cmocka_unit_test(test_fixed_window),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_sliding_log),
        cmocka_unit_test(test_peek_writes_nothing),
        cmocka_unit_test(test_reset_and_expiry),
        cmocka_unit_test(test_wrongtype_across_families),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
