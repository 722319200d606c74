/*
 * test_mem_store.c - the in-process store: the same answers as the core
 * called directly with the module's semantics (expiry, peeks, one family per
 * key), binary keys, growth, sweeping, and thread safety.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/mem_store.h"

#define MINUTE_US 60000000LL

static const fg_allocator model_alloc = {realloc, free};

static fg_limiter bucket_limit(int64_t capacity, int64_t emission_ns) {
    fg_limiter l = {.family = FG_LIMITER_BUCKET};
    l.p.bucket.capacity = capacity;
    l.p.bucket.emission_ns = emission_ns;
    return l;
}

static fg_limiter fixed_limit(int64_t limit, int64_t window_us) {
    fg_limiter l = {.family = FG_LIMITER_FIXED};
    l.p.fixed.limit = limit;
    l.p.fixed.window_us = window_us;
    return l;
}

static fg_limiter sliding_limit(int64_t limit, int64_t window_us) {
    fg_limiter l = {.family = FG_LIMITER_SLIDING};
    l.p.sliding.limit = limit;
    l.p.sliding.window_us = window_us;
    return l;
}

static fg_limiter slidelog_limit(int64_t limit, int64_t window_us) {
    fg_limiter l = {.family = FG_LIMITER_SLIDELOG};
    l.p.slidelog.limit = limit;
    l.p.slidelog.window_us = window_us;
    return l;
}

/* A check that must succeed. */
static fg_decision check_ok(fg_mem_store *s, const char *key, const fg_limiter *l, int64_t now,
                            int64_t cost, bool peek) {
    fg_decision d;
    expect_i64(fg_mem_check(s, key, strlen(key), l, now, cost, peek, &d), FG_MEM_OK);
    expect_sane(&d);
    return d;
}

/* What the key holds now, without writing (cost 0). */
static fg_decision peek_ok(fg_mem_store *s, const char *key, const fg_limiter *l, int64_t now) {
    return check_ok(s, key, l, now, 0, true);
}

/* ----------------------------------------------------------------- model */

/* One key as the module keeps it, driven by direct core calls: absent once
 * its expiry has come, written only by a request admitted with cost > 0. */
typedef struct model {
    bool present;
    int64_t expires_us;
    int64_t tat;
    fg_fixed_state fixed;
    fg_sliding_state sliding;
    fg_slog slog;
} model;

static void model_clear(model *m) {
    fg_slog_free(&m->slog, &model_alloc);
    memset(m, 0, sizeof(*m));
}

static fg_status model_check(model *m, const fg_limiter *l, int64_t now, int64_t cost,
                             bool peek, fg_decision *d) {
    if (m->present && m->expires_us <= now) model_clear(m);
    bool commit = !peek && cost > 0;
    fg_status st;
    switch (l->family) {
    case FG_LIMITER_BUCKET: {
        int64_t next;
        st = fg_gcra_decide(m->tat, &l->p.bucket, now, cost, d, &next);
        if (st == FG_OK && commit && d->allowed) {
            m->tat = next;
            m->expires_us = fg_gcra_expires_at_us(next);
            m->present = true;
        }
        break;
    }
    case FG_LIMITER_FIXED: {
        fg_fixed_state next;
        st = fg_fixed_decide(&m->fixed, &l->p.fixed, now, cost, d, &next);
        if (st == FG_OK && commit && d->allowed) {
            m->fixed = next;
            m->expires_us = fg_fixed_expires_at_us(&next, &l->p.fixed);
            m->present = true;
        }
        break;
    }
    case FG_LIMITER_SLIDING: {
        fg_sliding_state next;
        st = fg_sliding_decide(&m->sliding, &l->p.sliding, now, cost, d, &next);
        if (st == FG_OK && commit && d->allowed) {
            m->sliding = next;
            m->expires_us = fg_sliding_expires_at_us(&next, &l->p.sliding);
            m->present = true;
        }
        break;
    }
    default: {
        fg_slog_effect e;
        st = fg_slog_decide(&m->slog, &l->p.slidelog, now, cost, d, &e);
        if (st == FG_OK && commit && d->allowed) {
            assert_int_equal(fg_slog_apply(&m->slog, &e, &model_alloc), FG_OK);
            m->expires_us = fg_slog_expires_at_us(&m->slog, &l->p.slidelog);
            m->present = true;
        }
        break;
    }
    }
    return st;
}

static void expect_same_decision(const fg_decision *a, const fg_decision *b) {
    expect_i64(a->allowed, b->allowed);
    expect_i64(a->limit, b->limit);
    expect_i64(a->remaining, b->remaining);
    expect_i64(a->retry_after_ns, b->retry_after_ns);
    expect_i64(a->reset_after_ns, b->reset_after_ns);
}

/* Random traffic on one key (and a bystander key that must not be
 * disturbed): small steps, bursts at one instant, jumps past the expiry, the
 * clock stepping back, peeks, cost 0 and costs above the limit. */
static void drive_against_model(const fg_limiter *l, int64_t limit, int64_t scale_us,
                                uint64_t seed, int steps) {
    fg_mem_store *s = fg_mem_store_new(4);
    assert_non_null(s);
    test_rng rng = {seed};
    model m = {0};
    int64_t now = T2024_US + rng_range(&rng, 0, 1000000);
    int writes = 0, denials = 0, expiries = 0;
    for (int i = 0; i < steps; i++) {
        int r = (int)rng_range(&rng, 0, 99);
        if (r < 40)
            now += 0;
        else if (r < 85)
            now += rng_range(&rng, 1, scale_us);
        else if (r < 93)
            now += rng_range(&rng, scale_us, 4 * scale_us);
        else if (r < 97)
            now -= rng_range(&rng, 0, scale_us);
        else
            now = m.present ? m.expires_us + rng_range(&rng, -1, 1) : now + 1;
        int64_t cost = rng_range(&rng, 0, 99) < 5 ? limit + 1 : rng_range(&rng, 0, limit / 3 + 1);
        bool peek = rng_range(&rng, 0, 99) < 15;

        bool was_present = m.present;
        fg_decision want, got;
        memset(&want, 0x5a, sizeof(want));
        fg_status st = model_check(&m, l, now, cost, peek, &want);
        assert_int_equal(st, FG_OK);
        expect_i64(fg_mem_check(s, "key", 3, l, now, cost, peek, &got), FG_MEM_OK);
        expect_same_decision(&got, &want);
        expect_i64(fg_mem_size(s), m.present);
        writes += !peek && cost > 0 && want.allowed;
        denials += !want.allowed;
        expiries += was_present && !m.present;
        if (i % 16 == 0) { /* a bystander with its own state */
            fg_decision b;
            expect_i64(fg_mem_check(s, "other", 5, l, now, 0, false, &b), FG_MEM_OK);
        }
    }
    /* The traffic went through every path. */
    assert_true(writes > steps / 10);
    assert_true(denials > steps / 20);
    assert_true(expiries > 0);
    model_clear(&m);
    fg_mem_store_free(s);
}

/* The store answers exactly what direct core calls answer, for every family,
 * over a range of parameters. */
static void test_every_family_matches_the_core(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        test_rng r = {seed * 7919};
        int64_t cap = rng_range(&r, 1, 40);
        int64_t emission_ns = rng_range(&r, 1, 3000000);
        fg_limiter b = bucket_limit(cap, emission_ns);
        drive_against_model(&b, cap, emission_ns * cap / 1000 / 4 + 1, seed, 3000);

        int64_t limit = rng_range(&r, 1, 40), window = rng_range(&r, 1, 5000000);
        fg_limiter f = fixed_limit(limit, window);
        drive_against_model(&f, limit, window / 8 + 1, seed + 100, 3000);
        fg_limiter sl = sliding_limit(limit, window);
        drive_against_model(&sl, limit, window / 8 + 1, seed + 200, 3000);
        fg_limiter lg = slidelog_limit(limit, window);
        drive_against_model(&lg, limit, window / 8 + 1, seed + 300, 3000);
    }
}

/* Exact values through the store, as in the core's own tests. */
static void test_exact_answers_through_the_store(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    assert_non_null(s);
    /* Token bucket of 10, 1 per second. */
    fg_limiter b = bucket_limit(10, SEC);
    expect_decision(check_ok(s, "b", &b, T2024_US, 1, false), true, 10, 9, -1, 1 * SEC);
    expect_decision(check_ok(s, "b", &b, T2024_US, 9, false), true, 10, 0, -1, 10 * SEC);
    expect_decision(check_ok(s, "b", &b, T2024_US, 1, false), false, 10, 0, 1 * SEC, 10 * SEC);
    expect_decision(check_ok(s, "b", &b, T2024_US + 2500000, 2, false), true, 10, 0, -1,
                    9500 * MS);
    /* Fixed window of 10 per minute. */
    fg_limiter f = fixed_limit(10, MINUTE_US);
    expect_decision(check_ok(s, "f", &f, T2024_US + 12500000, 1, false), true, 10, 9, -1,
                    47500 * MS);
    expect_decision(check_ok(s, "f", &f, T2024_US + 12500000, 10, false), false, 10, 9,
                    47500 * MS, 47500 * MS);
    /* Sliding log of 2 per second. */
    fg_limiter lg = slidelog_limit(2, 1000000);
    expect_decision(check_ok(s, "l", &lg, T2024_US, 1, false), true, 2, 1, -1, 1 * SEC);
    expect_decision(check_ok(s, "l", &lg, T2024_US + 400000, 1, false), true, 2, 0, -1, 1 * SEC);
    expect_decision(check_ok(s, "l", &lg, T2024_US + 500000, 1, false), false, 2, 0, 500 * MS,
                    900 * MS);
    expect_decision(check_ok(s, "l", &lg, T2024_US + 1000000, 1, false), true, 2, 0, -1,
                    1 * SEC);
    expect_i64(fg_mem_size(s), 3);
    fg_mem_store_free(s);
}

/* ---------------------------------------------------- writes and expiry */

static void test_peeks_denials_and_cost_zero_write_nothing(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    const fg_limiter limits[] = {bucket_limit(5, SEC), fixed_limit(5, MINUTE_US),
                                   sliding_limit(5, MINUTE_US), slidelog_limit(5, MINUTE_US)};
    for (size_t i = 0; i < 4; i++) {
        const fg_limiter *l = &limits[i];
        fg_decision d = check_ok(s, "k", l, T2024_US, 3, true); /* peek */
        expect_i64(d.allowed, true);
        expect_i64(d.remaining, 2);
        check_ok(s, "k", l, T2024_US, 0, false);  /* cost 0 */
        d = check_ok(s, "k", l, T2024_US, 6, false); /* never fits */
        expect_i64(d.allowed, false);
        expect_i64(d.retry_after_ns, -1);
        expect_i64(fg_mem_size(s), 0);

        check_ok(s, "k", l, T2024_US, 5, false); /* fills it */
        expect_i64(fg_mem_size(s), 1);
        d = check_ok(s, "k", l, T2024_US, 1, false); /* denied, nothing changes */
        expect_i64(d.allowed, false);
        d = check_ok(s, "k", l, T2024_US, 0, false);
        expect_i64(d.allowed, true);
        expect_i64(d.remaining, 0);
        assert_true(fg_mem_reset(s, "k", 1, T2024_US));
        expect_i64(fg_mem_size(s), 0);
    }
    fg_mem_store_free(s);
}

/* A key lives exactly until its state is empty: present one microsecond
 * before fg_*_expires_at_us, absent from it on. */
static void test_key_is_absent_from_its_expiry_on(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    /* Bucket: 3 units of 1.5 us each -> TAT now + 4.5 us, expiry rounded up. */
    fg_limiter b = bucket_limit(10, 1500);
    check_ok(s, "b", &b, T2024_US, 3, false);
    int64_t expiry = fg_gcra_expires_at_us(T2024_US * 1000 + 4500);
    expect_i64(expiry, T2024_US + 5);
    fg_decision d = peek_ok(s, "b", &b, expiry - 1);
    expect_i64(d.remaining, 9); /* 0.5 us still to come back: 9 whole units */
    expect_i64(d.reset_after_ns, 500);
    expect_i64(fg_mem_size(s), 1);
    d = peek_ok(s, "b", &b, expiry);
    expect_i64(d.remaining, 10);
    expect_i64(d.reset_after_ns, 0);
    expect_i64(fg_mem_size(s), 0); /* dropped by the access, even a peek */

    /* Fixed: the end of the window. */
    fg_limiter f = fixed_limit(4, 1000);
    check_ok(s, "f", &f, T2024_US + 250, 4, false);
    expect_i64(peek_ok(s, "f", &f, T2024_US + 999).remaining, 0);
    expect_i64(fg_mem_size(s), 1);
    d = peek_ok(s, "f", &f, T2024_US + 1000);
    expect_i64(d.remaining, 4);
    expect_i64(fg_mem_size(s), 0);

    /* Sliding: two windows after the last admitted one. */
    fg_limiter sl = sliding_limit(4, 1000);
    check_ok(s, "s", &sl, T2024_US + 250, 4, false);
    peek_ok(s, "s", &sl, T2024_US + 1999);
    expect_i64(fg_mem_size(s), 1);
    peek_ok(s, "s", &sl, T2024_US + 2000);
    expect_i64(fg_mem_size(s), 0);

    /* Slidelog: newest entry + window. */
    fg_limiter lg = slidelog_limit(4, 1000);
    check_ok(s, "l", &lg, T2024_US, 1, false);
    check_ok(s, "l", &lg, T2024_US + 600, 1, false);
    expect_i64(peek_ok(s, "l", &lg, T2024_US + 999).remaining, 2);
    expect_i64(peek_ok(s, "l", &lg, T2024_US + 1000).remaining, 3);
    expect_i64(fg_mem_size(s), 1);
    expect_i64(peek_ok(s, "l", &lg, T2024_US + 1600).remaining, 4);
    expect_i64(fg_mem_size(s), 0);
    fg_mem_store_free(s);
}

static void test_reset(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    fg_limiter f = fixed_limit(2, MINUTE_US);
    assert_false(fg_mem_reset(s, "k", 1, T2024_US)); /* absent */
    check_ok(s, "k", &f, T2024_US, 2, false);
    expect_i64(check_ok(s, "k", &f, T2024_US, 1, false).allowed, false);
    assert_true(fg_mem_reset(s, "k", 1, T2024_US));
    expect_i64(check_ok(s, "k", &f, T2024_US, 1, false).remaining, 1);
    /* An expired entry is dropped by reset but was not live. */
    assert_false(fg_mem_reset(s, "k", 1, T2024_US + MINUTE_US));
    expect_i64(fg_mem_size(s), 0);
    assert_false(fg_mem_reset(s, "k", 1, T2024_US));
    fg_mem_store_free(s);
}

/* fg_mem_expire frees exactly the expired entries, resumes where it stopped
 * under a budget, and empties the store once everything has expired. */
/* Regression: a sweep that stopped half way (small budget, early time) left
 * the slots it had passed judged at that early time, so a later "sweep
 * everything" only finished the old round and kept expired entries. */
static void test_full_sweep_after_a_partial_one(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(1);
    fg_limiter f = fixed_limit(10, 1000);
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "key:%d", i);
        check_ok(s, key, &f, T2024_US, 1, false);
    }
    /* Half a round at a time when nothing has expired yet. */
    expect_i64(fg_mem_expire(s, T2024_US, 500), 0);
    /* Everything has expired now, and a full sweep must find all of it. */
    expect_i64(fg_mem_expire(s, T2024_US + 1000, SIZE_MAX), 1000);
    expect_i64(fg_mem_size(s), 0);
    fg_mem_store_free(s);
}

static void test_sweep(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(8);
    fg_limiter early = fixed_limit(10, 1000), late = fixed_limit(10, 1000000);
    fg_limiter log = slidelog_limit(10, 1000);
    char key[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "key:%d", i);
        /* early: windows ending at T + 1000; late: at T + 1 s; logs: T + 1000 */
        const fg_limiter *l = i % 3 == 0 ? &early : i % 3 == 1 ? &late : &log;
        check_ok(s, key, l, T2024_US, 1 + i % 5, false);
    }
    expect_i64(fg_mem_size(s), 3000);
    expect_i64(fg_mem_expire(s, T2024_US + 999, SIZE_MAX), 0);
    expect_i64(fg_mem_size(s), 3000);

    /* Small budgets: every call examines at most 7 entries. */
    size_t removed = 0, calls = 0;
    while (removed < 2000 && calls < 100000) {
        size_t r = fg_mem_expire(s, T2024_US + 1000, 7);
        assert_true(r <= 7);
        removed += r;
        calls++;
    }
    expect_i64(removed, 2000);
    assert_true(calls >= 2000 / 7);
    expect_i64(fg_mem_size(s), 1000);
    expect_i64(fg_mem_expire(s, T2024_US + 1000, SIZE_MAX), 0);
    /* The late keys kept their state. */
    for (int i = 1; i < 3000; i += 3) {
        snprintf(key, sizeof(key), "key:%d", i);
        expect_i64(peek_ok(s, key, &late, T2024_US + 2000).remaining, 10 - (1 + i % 5));
    }
    expect_i64(fg_mem_expire(s, T2024_US + 1000000, SIZE_MAX), 1000);
    expect_i64(fg_mem_size(s), 0);
    expect_i64(fg_mem_expire(s, T2024_US + 1000000, SIZE_MAX), 0);
    /* The store is usable after its tables were given back. */
    check_ok(s, "again", &late, T2024_US, 1, false);
    expect_i64(fg_mem_size(s), 1);
    fg_mem_store_free(s);
}

/* --------------------------------------------------------------- families */

static void test_wrongtype_across_families(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    const fg_limiter limits[] = {bucket_limit(5, SEC), fixed_limit(5, MINUTE_US),
                                   sliding_limit(5, MINUTE_US), slidelog_limit(5, MINUTE_US)};
    for (size_t held = 0; held < 4; held++) {
        check_ok(s, "k", &limits[held], T2024_US, 2, false);
        for (size_t other = 0; other < 4; other++) {
            if (other == held) continue;
            fg_decision d = {.limit = 12345};
            expect_i64(fg_mem_check(s, "k", 1, &limits[other], T2024_US, 1, false, &d),
                       FG_MEM_WRONGTYPE);
            expect_i64(d.limit, 12345); /* untouched */
            expect_i64(fg_mem_check(s, "k", 1, &limits[other], T2024_US, 1, true, &d),
                       FG_MEM_WRONGTYPE);
            expect_i64(fg_mem_check(s, "k", 1, &limits[other], T2024_US, 0, false, &d),
                       FG_MEM_WRONGTYPE);
        }
        /* Parameters out of range answer INVALID first, as the module's
         * argument parsing does. */
        fg_limiter bad = limits[(held + 1) % 4];
        bad.p.fixed.limit = 0; /* both fields of every family's parameters */
        bad.p.fixed.window_us = 0;
        fg_decision d;
        expect_i64(fg_mem_check(s, "k", 1, &bad, T2024_US, 1, false, &d), FG_MEM_INVALID);
        /* The held state is intact. */
        expect_i64(peek_ok(s, "k", &limits[held], T2024_US).remaining, 3);
        /* Once expired, the key may take another family. */
        int64_t later = T2024_US + 3 * MINUTE_US;
        check_ok(s, "k", &limits[(held + 1) % 4], later, 1, false);
        assert_true(fg_mem_reset(s, "k", 1, later));
    }
    fg_mem_store_free(s);
}

/* FG.TOKEN, FG.LEAKY and FG.GCRA are the same state: a token bucket of 10
 * refilled 2/s, a funnel of 10 leaking 2/s and GCRA 10 / 1 per 500 ms. */
static void test_token_leaky_and_gcra_share_one_bucket(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    fg_limiter token = bucket_limit(10, SEC / 2), leaky = bucket_limit(10, SEC / 2),
                 gcra = bucket_limit(10, 500 * MS);
    expect_decision(check_ok(s, "u", &token, T2024_US, 4, false), true, 10, 6, -1, 2 * SEC);
    expect_decision(check_ok(s, "u", &leaky, T2024_US, 4, false), true, 10, 2, -1, 4 * SEC);
    expect_decision(check_ok(s, "u", &gcra, T2024_US, 3, false), false, 10, 2, 500 * MS,
                    4 * SEC);
    expect_decision(check_ok(s, "u", &gcra, T2024_US + 500000, 3, false), true, 10, 0, -1,
                    5 * SEC);
    /* A bucket with other parameters reads the same TAT. */
    fg_limiter big = bucket_limit(100, SEC / 2);
    expect_decision(peek_ok(s, "u", &big, T2024_US + 500000), true, 100, 90, -1, 5 * SEC);
    expect_i64(fg_mem_size(s), 1);
    fg_mem_store_free(s);
}

/* ------------------------------------------------------------------- keys */

static void test_binary_keys(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(2);
    fg_limiter f = fixed_limit(100, MINUTE_US);
    static const unsigned char k1[] = {'a', 0, 'b'}, k2[] = {'a', 0, 'c'}, k3[] = {'a', 0},
                               k4[] = {0}, k5[] = {0, 0}, k6[] = {'a'};
    const struct {
        const void *p;
        size_t n;
    } keys[] = {{k1, 3}, {k2, 3}, {k3, 2}, {k4, 1}, {k5, 2}, {k6, 1}, {"", 0}, {NULL, 0}};
    fg_decision d;
    /* Key i takes i + 1 units; {NULL, 0} is the empty key again. */
    for (size_t i = 0; i < 7; i++) {
        expect_i64(fg_mem_check(s, keys[i].p, keys[i].n, &f, T2024_US, (int64_t)i + 1, false, &d),
                   FG_MEM_OK);
        expect_i64(d.remaining, 100 - (int64_t)i - 1);
    }
    expect_i64(fg_mem_size(s), 7);
    for (size_t i = 0; i < 8; i++) {
        size_t owner = i == 7 ? 6 : i;
        expect_i64(fg_mem_check(s, keys[i].p, keys[i].n, &f, T2024_US, 0, false, &d), FG_MEM_OK);
        expect_i64(d.remaining, 100 - (int64_t)owner - 1);
    }
    /* Resets find binary keys too. */
    assert_true(fg_mem_reset(s, k1, 3, T2024_US));
    assert_false(fg_mem_reset(s, k1, 3, T2024_US));
    assert_true(fg_mem_reset(s, "", 0, T2024_US));
    expect_i64(fg_mem_check(s, k2, 3, &f, T2024_US, 0, false, &d), FG_MEM_OK);
    expect_i64(d.remaining, 98);
    fg_mem_store_free(s);

    /* Keys that differ only in one byte, or only in their length (all
     * zeros), at every length across the hash's 4-, 8- and 16-byte steps. */
    s = fg_mem_store_new(2);
    unsigned char buf[80];
    memset(buf, 0, sizeof(buf));
    for (size_t n = 1; n <= 70; n++) {
        fg_limiter one = fixed_limit(1, MINUTE_US);
        for (size_t pos = 0; pos < n; pos++) {
            buf[pos] = 1;
            expect_i64(fg_mem_check(s, buf, n, &one, T2024_US, 1, false, &d), FG_MEM_OK);
            expect_i64(d.allowed, true); /* a new key each time */
            buf[pos] = 0;
        }
        expect_i64(fg_mem_check(s, buf, n, &one, T2024_US, 1, false, &d), FG_MEM_OK);
        expect_i64(d.allowed, true); /* all zeros, length n: new */
        expect_i64(fg_mem_check(s, buf, n, &one, T2024_US, 1, false, &d), FG_MEM_OK);
        expect_i64(d.allowed, false); /* the same key again */
    }
    expect_i64(fg_mem_size(s), 70 * 71 / 2 + 70);
    fg_mem_store_free(s);
}

/* Growth by rehash to 100k keys (and on a single shard), every state kept,
 * then deletion of half and shrinking back to nothing. */
static void grow_and_shrink(unsigned shards) {
    fg_mem_store *s = fg_mem_store_new(shards);
    assert_non_null(s);
    fg_limiter f = fixed_limit(1000, MINUTE_US);
    fg_limiter b = bucket_limit(1000, MS);
    char key[32];
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        int len = snprintf(key, sizeof(key), "user:%08d", i);
        fg_decision d;
        const fg_limiter *l = i % 2 ? &f : &b;
        expect_i64(fg_mem_check(s, key, (size_t)len, l, T2024_US, 1 + i % 7, false, &d),
                   FG_MEM_OK);
    }
    expect_i64(fg_mem_size(s), n);
    for (int i = 0; i < n; i++) {
        int len = snprintf(key, sizeof(key), "user:%08d", i);
        fg_decision d;
        const fg_limiter *l = i % 2 ? &f : &b;
        expect_i64(fg_mem_check(s, key, (size_t)len, l, T2024_US, 0, false, &d), FG_MEM_OK);
        expect_i64(d.remaining, 1000 - 1 - i % 7);
    }
    for (int i = 0; i < n; i += 2) {
        int len = snprintf(key, sizeof(key), "user:%08d", i);
        assert_true(fg_mem_reset(s, key, (size_t)len, T2024_US));
    }
    expect_i64(fg_mem_size(s), n / 2);
    for (int i = 1; i < n; i += 2) {
        int len = snprintf(key, sizeof(key), "user:%08d", i);
        fg_decision d;
        expect_i64(fg_mem_check(s, key, (size_t)len, &f, T2024_US, 0, false, &d), FG_MEM_OK);
        expect_i64(d.remaining, 1000 - 1 - i % 7);
    }
    expect_i64(fg_mem_expire(s, T2024_US + MINUTE_US, SIZE_MAX), n / 2);
    expect_i64(fg_mem_size(s), 0);
    fg_mem_store_free(s);
}

static void test_growth_to_100k_keys(void **state) {
    (void)state;
    grow_and_shrink(0);
    grow_and_shrink(1);
}

/* Keys left in the store, sliding logs included, are freed with it (the
 * sanitized build checks for leaks). */
static void test_free_with_live_keys(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(3); /* rounded up to 4 */
    fg_limiter lg = slidelog_limit(1000, MINUTE_US);
    char key[16];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof(key), "log%d", i);
        for (int j = 0; j < 10; j++) check_ok(s, key, &lg, T2024_US + j, 1 + j, false);
    }
    expect_i64(fg_mem_size(s), 500);
    fg_mem_store_free(s);
    fg_mem_store_free(NULL);
    s = fg_mem_store_new(1000000); /* capped */
    assert_non_null(s);
    fg_mem_store_free(s);
}

/* ----------------------------------------------------------------- errors */

static void test_errors_change_nothing(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(0);
    fg_decision d = {.limit = 777};
    fg_limiter ok = bucket_limit(10, SEC);
    fg_limiter zero_cap = bucket_limit(0, SEC), zero_rate = bucket_limit(10, 0);
    fg_limiter huge_log = slidelog_limit(FG_SLOG_MAX_LIMIT + 1, 1000);
    fg_limiter zero_window = fixed_limit(10, 0);
    fg_limiter overflow = bucket_limit(INT64_MAX / 2, 3); /* T * capacity */
    fg_limiter bad_family = ok;
    bad_family.family = (fg_limiter_family)7;
    expect_i64(fg_mem_check(s, "k", 1, &zero_cap, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &zero_rate, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &huge_log, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &zero_window, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &bad_family, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &ok, T2024_US, -1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &ok, -1, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, NULL, 1, &ok, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, NULL, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &ok, T2024_US, 1, false, NULL), FG_MEM_INVALID);
    expect_i64(fg_mem_check(NULL, "k", 1, &ok, T2024_US, 1, false, &d), FG_MEM_INVALID);
    expect_i64(fg_mem_check(s, "k", 1, &overflow, T2024_US, 1, false, &d), FG_MEM_OVERFLOW);
    expect_i64(d.limit, 777);
    expect_i64(fg_mem_size(s), 0);
    /* A now too large for nanoseconds overflows in the bucket. */
    expect_i64(fg_mem_check(s, "k", 1, &ok, INT64_MAX / 10, 1, false, &d), FG_MEM_OVERFLOW);
    expect_i64(fg_mem_size(s), 0);
    assert_false(fg_mem_reset(NULL, "k", 1, T2024_US));
    expect_i64(fg_mem_expire(NULL, T2024_US, 10), 0);
    expect_i64(fg_mem_size(NULL), 0);
    fg_mem_store_free(s);
}

/* ---------------------------------------------------------------- threads */

#define THREADS 4
#define MANY 1000
#define HOT_LIMIT 1000
#define MANY_LIMIT 20

typedef struct hammer {
    fg_mem_store *s;
    fg_limiter hot, many;
    int64_t now;
    atomic_llong hot_units;
    atomic_llong units[MANY];
    atomic_llong errors;
} hammer;

typedef struct hammer_thread {
    hammer *h;
    uint64_t seed;
} hammer_thread;

static void many_key(char *buf, size_t n, int i) { snprintf(buf, n, "many:%d", i); }

static void *hammer_run(void *arg) {
    hammer_thread *t = arg;
    hammer *h = t->h;
    test_rng rng = {t->seed};
    char key[32];
    for (int i = 0; i < 10000; i++) {
        int64_t cost = rng_range(&rng, 1, 3);
        bool hot = rng_range(&rng, 0, 1) == 0;
        int k = (int)rng_range(&rng, 0, MANY - 1);
        fg_decision d;
        fg_mem_status st;
        if (hot) {
            st = fg_mem_check(h->s, "hot", 3, &h->hot, h->now, cost, false, &d);
            if (st == FG_MEM_OK && d.allowed) atomic_fetch_add(&h->hot_units, cost);
        } else {
            many_key(key, sizeof(key), k);
            st = fg_mem_check(h->s, key, strlen(key), &h->many, h->now, cost, false, &d);
            if (st == FG_MEM_OK && d.allowed) atomic_fetch_add(&h->units[k], cost);
        }
        if (st != FG_MEM_OK) atomic_fetch_add(&h->errors, 1);
    }
    return NULL;
}

/* After the storm, each key's admitted units are exactly what its state
 * says (remaining = limit - admitted), hence never above the limit, and the
 * saturated hot key is full to within one request. */
static void hammer_family(fg_limiter hot, fg_limiter many) {
    hammer *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    h->s = fg_mem_store_new(4); /* few shards: many keys contend too */
    h->hot = hot;
    h->many = many;
    h->now = T2024_US + 123456;
    pthread_t th[THREADS];
    hammer_thread args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (hammer_thread){h, 1000 + (uint64_t)i};
        assert_int_equal(pthread_create(&th[i], NULL, hammer_run, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    expect_i64(atomic_load(&h->errors), 0);

    int64_t hot_units = atomic_load(&h->hot_units);
    assert_true(hot_units <= HOT_LIMIT);
    assert_true(hot_units >= HOT_LIMIT - 2);
    expect_i64(peek_ok(h->s, "hot", &h->hot, h->now).remaining, HOT_LIMIT - hot_units);
    char key[32];
    for (int k = 0; k < MANY; k++) {
        int64_t units = atomic_load(&h->units[k]);
        assert_true(units <= MANY_LIMIT);
        many_key(key, sizeof(key), k);
        fg_decision d;
        expect_i64(fg_mem_check(h->s, key, strlen(key), &h->many, h->now, 0, false, &d), FG_MEM_OK);
        expect_i64(d.remaining, MANY_LIMIT - units);
    }
    fg_mem_store_free(h->s);
    free(h);
}

static void test_threads_never_admit_more_than_the_limit(void **state) {
    (void)state;
    hammer_family(bucket_limit(HOT_LIMIT, SEC), bucket_limit(MANY_LIMIT, SEC));
    hammer_family(fixed_limit(HOT_LIMIT, MINUTE_US), fixed_limit(MANY_LIMIT, MINUTE_US));
    hammer_family(sliding_limit(HOT_LIMIT, MINUTE_US), sliding_limit(MANY_LIMIT, MINUTE_US));
    hammer_family(slidelog_limit(HOT_LIMIT, MINUTE_US), slidelog_limit(MANY_LIMIT, MINUTE_US));
}

/* Checks with moving clocks, resets, sweeps and size queries all at once:
 * tables grow, shrink and lose entries under the feet of the others. */
typedef struct churn_thread {
    fg_mem_store *s;
    int role; /* 0, 1: checks; 2: resets and sizes; 3: sweeps */
    atomic_int *done;
    long long errors;
} churn_thread;

static void *churn_run(void *arg) {
    churn_thread *t = arg;
    test_rng rng = {77 + (uint64_t)t->role};
    fg_limiter limits[] = {bucket_limit(5, 100 * US), fixed_limit(5, 200),
                             sliding_limit(5, 200), slidelog_limit(5, 200)};
    char key[32];
    int64_t now = T2024_US;
    if (t->role >= 2) {
        while (!atomic_load(t->done)) {
            now += 3;
            if (t->role == 2) {
                int k = (int)rng_range(&rng, 0, 4999);
                snprintf(key, sizeof(key), "c%d", k);
                fg_mem_reset(t->s, key, strlen(key), now);
                (void)fg_mem_size(t->s);
            } else {
                fg_mem_expire(t->s, now, 50);
            }
        }
        return NULL;
    }
    for (int i = 0; i < 40000; i++) {
        now += rng_range(&rng, 0, 2);
        int k = (int)rng_range(&rng, 0, 4999);
        snprintf(key, sizeof(key), "c%d", k);
        fg_decision d;
        fg_mem_status st =
            fg_mem_check(t->s, key, strlen(key), &limits[k % 4], now, rng_range(&rng, 0, 3),
                         rng_range(&rng, 0, 9) == 0, &d);
        if (st != FG_MEM_OK) t->errors++;
    }
    return NULL;
}

static void test_threads_with_resets_and_sweeps(void **state) {
    (void)state;
    fg_mem_store *s = fg_mem_store_new(2);
    atomic_int done = 0;
    pthread_t th[4];
    churn_thread args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (churn_thread){s, i, &done, 0};
        assert_int_equal(pthread_create(&th[i], NULL, churn_run, &args[i]), 0);
    }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    atomic_store(&done, 1);
    pthread_join(th[2], NULL);
    pthread_join(th[3], NULL);
    expect_i64(args[0].errors + args[1].errors, 0);
    /* Far in the future everything has expired. */
    fg_mem_expire(s, T2024_US + MINUTE_US, SIZE_MAX);
    expect_i64(fg_mem_size(s), 0);
    fg_mem_store_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_answers_through_the_store),
        cmocka_unit_test(test_every_family_matches_the_core),
        cmocka_unit_test(test_peeks_denials_and_cost_zero_write_nothing),
        cmocka_unit_test(test_key_is_absent_from_its_expiry_on),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_full_sweep_after_a_partial_one),
        cmocka_unit_test(test_wrongtype_across_families),
        cmocka_unit_test(test_token_leaky_and_gcra_share_one_bucket),
        cmocka_unit_test(test_binary_keys),
        cmocka_unit_test(test_growth_to_100k_keys),
        cmocka_unit_test(test_free_with_live_keys),
        cmocka_unit_test(test_errors_change_nothing),
        cmocka_unit_test(test_threads_never_admit_more_than_the_limit),
        cmocka_unit_test(test_threads_with_resets_and_sweeps),
    };
    return cmocka_run_group_tests_name("mem_store", tests, NULL, NULL);
}
