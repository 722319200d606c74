/*
 * test_gcra.c - the virtual-scheduling meter (GCRA, token and leaky bucket,
 * CL.THROTTLE), against exact values.
 */
#include "test_util.h"

#include "checked.h"
#include "gcra.h"

/* Decides and stores the new state, as the binding would. */
static fg_decision take(int64_t *tat, int64_t emission_ns, int64_t capacity, int64_t now_us,
                        int64_t cost) {
    fg_gcra_params p = {emission_ns, capacity};
    fg_decision d;
    int64_t next = -42;
    expect_status(fg_gcra_decide(*tat, &p, now_us, cost, &d, &next), FG_OK);
    expect_sane(&d);
    if (!d.allowed || cost == 0) expect_i64(next, *tat);
    *tat = next;
    return d;
}

/* Decides without storing anything. */
static fg_decision peek(int64_t tat, int64_t emission_ns, int64_t capacity, int64_t now_us,
                        int64_t cost) {
    return take(&tat, emission_ns, capacity, now_us, cost);
}

/* ------------------------------------------------- redis-cell vectors */

/* CL.THROTTLE key 15 30 60: max_burst 15 (capacity 16), 30 per 60 s. */
static void test_redis_cell_30_per_minute(void **state) {
    (void)state;
    const int64_t T = 2 * SEC, cap = 16, now = T2024_US + 123457;
    int64_t tat = 0;

    fg_decision d = take(&tat, T, cap, now, 1);
    expect_decision(d, true, 16, 15, -1, 2 * SEC);
    expect_i64(tat, now * US + 2 * SEC);

    for (int64_t i = 2; i <= 16; i++) {
        d = take(&tat, T, cap, now, 1);
        expect_decision(d, true, 16, 16 - i, -1, i * 2 * SEC);
    }
    d = take(&tat, T, cap, now, 1);
    expect_decision(d, false, 16, 0, 2 * SEC, 32 * SEC);
    expect_i64(tat, now * US + 32 * SEC);

    /* One microsecond short of the retry: still refused. */
    d = take(&tat, T, cap, now + 2000000 - 1, 1);
    expect_decision(d, false, 16, 0, 1 * US, 32 * SEC - 2 * SEC + 1 * US);

    d = take(&tat, T, cap, now + 2000000, 1);
    expect_decision(d, true, 16, 0, -1, 32 * SEC);
    expect_i64(tat, now * US + 34 * SEC);
}

/* redis-cell's own test table (limit 5, one per second), case by case. */
static void test_redis_cell_own_table(void **state) {
    (void)state;
    const int64_t T = SEC, cap = 5, start = T2024_US + 777;
    static const struct {
        int64_t at_ms, cost, remaining, reset_ms, retry_ms;
        bool allowed;
    } cases[] = {
        {0, 6, 5, 0, -1, false},       {0, 1, 4, 1000, -1, true},
        {0, 1, 3, 2000, -1, true},     {0, 1, 2, 3000, -1, true},
        {0, 1, 1, 4000, -1, true},     {0, 1, 0, 5000, -1, true},
        {0, 1, 0, 5000, 1000, false},  {3000, 1, 2, 3000, -1, true},
        {3100, 1, 1, 3900, -1, true},  {4000, 1, 1, 4000, -1, true},
        {8000, 1, 4, 1000, -1, true},  {9500, 1, 4, 1000, -1, true},
        {9500, 0, 4, 1000, -1, true},  {9500, 2, 2, 3000, -1, true},
        {9500, 5, 2, 3000, 3000, false},
    };
    int64_t tat = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fg_decision d = take(&tat, T, cap, start + cases[i].at_ms * 1000, cases[i].cost);
        int64_t retry = cases[i].retry_ms < 0 ? -1 : cases[i].retry_ms * MS;
        expect_decision(d, cases[i].allowed, 5, cases[i].remaining, retry,
                        cases[i].reset_ms * MS);
    }
}

/* ------------------------------------------------------ empty and full */

static void test_first_request_on_empty_state(void **state) {
    (void)state;
    int64_t tat = 0;
    fg_decision d = take(&tat, 100 * MS, 10, T2024_US, 1);
    expect_decision(d, true, 10, 9, -1, 100 * MS);
    expect_i64(tat, T2024_US * US + 100 * MS);
}

static void test_cost_equal_to_capacity_empties_the_bucket(void **state) {
    (void)state;
    int64_t tat = 0;
    fg_decision d = take(&tat, 100 * MS, 10, T2024_US, 10);
    expect_decision(d, true, 10, 0, -1, SEC);
    d = take(&tat, 100 * MS, 10, T2024_US, 1);
    expect_decision(d, false, 10, 0, 100 * MS, SEC);
}

static void test_cost_larger_than_capacity_never_fits(void **state) {
    (void)state;
    int64_t tat = 0;
    fg_decision d = take(&tat, 100 * MS, 10, T2024_US, 11);
    expect_decision(d, false, 10, 10, -1, 0);
    expect_i64(tat, 0);

    take(&tat, 100 * MS, 10, T2024_US, 3);
    int64_t before = tat;
    d = take(&tat, 100 * MS, 10, T2024_US, 1000000);
    expect_decision(d, false, 10, 7, -1, 300 * MS);
    expect_i64(tat, before);
}

static void test_cost_zero_on_empty_state_is_a_full_peek(void **state) {
    (void)state;
    int64_t tat = 0;
    fg_decision d = take(&tat, 100 * MS, 10, T2024_US, 0);
    expect_decision(d, true, 10, 10, -1, 0);
    expect_i64(tat, 0);
}

static void test_cost_zero_peeks_without_writing(void **state) {
    (void)state;
    int64_t tat = 0;
    take(&tat, 100 * MS, 10, T2024_US, 4);
    int64_t before = tat;
    fg_decision d = take(&tat, 100 * MS, 10, T2024_US + 50000, 0);
    expect_decision(d, true, 10, 6, -1, 350 * MS);
    expect_i64(tat, before);
}

static void test_cost_zero_on_full_bucket_is_allowed(void **state) {
    (void)state;
    int64_t tat = 0;
    take(&tat, 100 * MS, 10, T2024_US, 10);
    fg_decision d = take(&tat, 100 * MS, 10, T2024_US, 0);
    expect_decision(d, true, 10, 0, -1, SEC);
}

static void test_remaining_rounds_down_between_emissions(void **state) {
    (void)state;
    int64_t tat = 0;
    take(&tat, 100 * MS, 10, T2024_US, 10);
    /* 150 ms later one and a half units came back: 1 whole unit. */
    fg_decision d = peek(tat, 100 * MS, 10, T2024_US + 150000, 0);
    expect_decision(d, true, 10, 1, -1, 850 * MS);
    d = peek(tat, 100 * MS, 10, T2024_US + 150000, 2);
    expect_decision(d, false, 10, 1, 50 * MS, 850 * MS);
}

static void test_bucket_refills_to_capacity_and_no_more(void **state) {
    (void)state;
    /* A token bucket of 10 refilled at 5/s. */
    int64_t tat = 0;
    take(&tat, 200 * MS, 10, T2024_US, 10);
    expect_decision(peek(tat, 200 * MS, 10, T2024_US + 1000000, 0), true, 10, 5, -1, SEC);
    expect_decision(peek(tat, 200 * MS, 10, T2024_US + 2000000, 0), true, 10, 10, -1, 0);
    expect_decision(peek(tat, 200 * MS, 10, T2024_US + 9000000, 0), true, 10, 10, -1, 0);
    expect_decision(peek(tat, 200 * MS, 10, T2024_US + 9000000, 10), true, 10, 0, -1, 2 * SEC);
    expect_decision(peek(tat, 200 * MS, 10, T2024_US + 9000000, 11), false, 10, 10, -1, 0);
}

static void test_steady_rate_at_the_limit_is_always_admitted(void **state) {
    (void)state;
    /* A leaky bucket leaking one unit every 7 ms: a client sending exactly
     * at that rate is never refused, even with capacity 1. */
    int64_t tat = 0, now = T2024_US;
    for (int i = 0; i < 1000; i++, now += 7000) {
        fg_decision d = take(&tat, 7 * MS, 1, now, 1);
        expect_decision(d, true, 1, 0, -1, 7 * MS);
    }
    /* One microsecond early is too early. */
    fg_decision d = take(&tat, 7 * MS, 1, now - 7000 + 6999, 1);
    expect_decision(d, false, 1, 0, 1 * US, 1 * US);
}

static void test_stale_state_is_a_full_bucket(void **state) {
    (void)state;
    const int64_t now = T2024_US;
    /* A TAT 5 s in the past, with T = 2 s: as good as no state. */
    int64_t tat = now * US - 5 * SEC;
    fg_decision d = take(&tat, 2 * SEC, 16, now, 1);
    expect_decision(d, true, 16, 15, -1, 2 * SEC);
    expect_i64(tat, now * US + 2 * SEC);

    /* Denied with a stale TAT: full, not more than full. */
    tat = now * US - 5 * SEC;
    d = take(&tat, 2 * SEC, 16, now, 17);
    expect_decision(d, false, 16, 16, -1, 0);
    expect_i64(tat, now * US - 5 * SEC);
}

static void test_tat_equal_to_now_is_full(void **state) {
    (void)state;
    int64_t tat = T2024_US * US;
    fg_decision d = take(&tat, SEC, 3, T2024_US, 0);
    expect_decision(d, true, 3, 3, -1, 0);
    d = take(&tat, SEC, 3, T2024_US, 3);
    expect_decision(d, true, 3, 0, -1, 3 * SEC);
}

/* -------------------------------------------- sub-microsecond emission */

static void test_one_unit_per_nanosecond(void **state) {
    (void)state;
    /* 10^9 units per second: T = 1 ns. */
    int64_t tat = 0;
    fg_decision d = take(&tat, 1, 1000, T2024_US, 1000);
    expect_decision(d, true, 1000, 0, -1, 1000);
    d = take(&tat, 1, 1000, T2024_US, 1);
    expect_decision(d, false, 1000, 0, 1, 1000);
    /* One microsecond later the whole bucket came back. */
    d = take(&tat, 1, 1000, T2024_US + 1, 0);
    expect_decision(d, true, 1000, 1000, -1, 0);
    d = take(&tat, 1, 1000, T2024_US + 1, 1);
    expect_decision(d, true, 1000, 999, -1, 1);
}

static void test_emission_not_a_whole_microsecond(void **state) {
    (void)state;
    /* 3 million per second, rounded to T = 333 ns, capacity 10. */
    int64_t tat = 0;
    fg_decision d = take(&tat, 333, 10, T2024_US, 10);
    expect_decision(d, true, 10, 0, -1, 3330);
    d = take(&tat, 333, 10, T2024_US, 1);
    expect_decision(d, false, 10, 0, 333, 3330);
    /* 1 us later: 1000 ns / 333 = 3 units back (999 ns), 1 ns to spare. */
    d = take(&tat, 333, 10, T2024_US + 1, 0);
    expect_decision(d, true, 10, 3, -1, 2330);
    d = take(&tat, 333, 10, T2024_US + 1, 4);
    expect_decision(d, false, 10, 3, 332, 2330);
    d = take(&tat, 333, 10, T2024_US + 1, 3);
    expect_decision(d, true, 10, 0, -1, 3329);
}

/* ------------------------------------------------------ clock going back */

static void test_clock_going_back_refunds_nothing(void **state) {
    (void)state;
    const int64_t now = T2024_US;
    int64_t tat = 0;
    take(&tat, 2 * SEC, 16, now, 5); /* TAT = now + 10 s, 11 left */
    fg_decision d = take(&tat, 2 * SEC, 16, now - 5000000, 1);
    /* Seen from 5 s earlier the schedule is 15 s ahead: fewer units left. */
    expect_decision(d, true, 16, 7, -1, 17 * SEC);
    expect_i64(tat, now * US + 12 * SEC);
}

static void test_clock_far_back_denies_even_a_peek(void **state) {
    (void)state;
    const int64_t now = T2024_US;
    int64_t tat = 0;
    take(&tat, 2 * SEC, 16, now, 16); /* TAT = now + 32 s */
    int64_t before = tat;
    fg_decision d = take(&tat, 2 * SEC, 16, now - 10000000, 0);
    expect_decision(d, false, 16, 0, 10 * SEC, 42 * SEC);
    expect_i64(tat, before);
    d = take(&tat, 2 * SEC, 16, now - 10000000, 1);
    expect_decision(d, false, 16, 0, 12 * SEC, 42 * SEC);
    /* Once the clock is back where it was, the usual answer. */
    d = take(&tat, 2 * SEC, 16, now + 2000000, 1);
    expect_decision(d, true, 16, 0, -1, 32 * SEC);
}

/* ------------------------------------------------------- huge values */

static void test_overflow_of_the_tolerance(void **state) {
    (void)state;
    fg_gcra_params p = {2, INT64_MAX / 2 + 1};
    fg_decision d;
    int64_t next;
    expect_status(fg_gcra_decide(0, &p, T2024_US, 1, &d, &next), FG_EOVERFLOW);
    p = (fg_gcra_params){INT64_MAX / 3 + 1, 3};
    expect_status(fg_gcra_decide(0, &p, T2024_US, 1, &d, &next), FG_EOVERFLOW);
    /* A day per unit times 10^9 units does not fit in 64-bit nanoseconds. */
    p = (fg_gcra_params){86400 * SEC, 1000000000};
    expect_status(fg_gcra_decide(0, &p, T2024_US, 0, &d, &next), FG_EOVERFLOW);
}

/* Regression: a cost above the capacity, however large, is a denial that no
 * wait helps (retry -1), not an overflow error, even where T * cost would
 * not fit in 64 bits. */
static void test_huge_cost_never_fits(void **state) {
    (void)state;
    fg_gcra_params p = {SEC, 10};
    fg_decision d;
    int64_t next;
    int64_t costs[] = {11, INT64_MAX / SEC + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
        expect_status(fg_gcra_decide(0, &p, T2024_US, costs[i], &d, &next), FG_OK);
        expect_decision(d, false, 10, 10, -1, 0);
        expect_i64(next, 0);
    }
    /* With some of the bucket used, the answer shows what is left. */
    int64_t tat = T2024_US * US + 3 * SEC;
    expect_status(fg_gcra_decide(tat, &p, T2024_US, INT64_MAX, &d, &next), FG_OK);
    expect_decision(d, false, 10, 7, -1, 3 * SEC);
    expect_i64(next, tat);
}

/* A cost that fits the bucket but pushes the TAT past the year 2262 is an
 * overflow. */
static void test_overflow_of_the_new_tat(void **state) {
    (void)state;
    fg_gcra_params p = {SEC, INT64_MAX / SEC};
    fg_decision d;
    int64_t next;
    int64_t largest = (INT64_MAX - T2024_US * US) / SEC;
    expect_status(fg_gcra_decide(0, &p, T2024_US, largest, &d, &next), FG_OK);
    expect_status(fg_gcra_decide(0, &p, T2024_US, largest + 1, &d, &next), FG_EOVERFLOW);
}

static void test_overflow_of_now_and_tat(void **state) {
    (void)state;
    fg_gcra_params p = {SEC, 10};
    fg_decision d;
    int64_t next;
    expect_status(fg_gcra_decide(0, &p, INT64_MAX / 1000 + 1, 1, &d, &next), FG_EOVERFLOW);
    expect_status(fg_gcra_decide(0, &p, INT64_MAX, 0, &d, &next), FG_EOVERFLOW);
    /* The largest now that converts to nanoseconds works. */
    expect_status(fg_gcra_decide(0, &p, INT64_MAX / 1000, 0, &d, &next), FG_OK);
    expect_decision(d, true, 10, 10, -1, 0);
    /* A TAT at the end of time cannot be pushed further. */
    expect_status(fg_gcra_decide(INT64_MAX - 5, &p, T2024_US, 1, &d, &next), FG_EOVERFLOW);
    /* But it can be peeked at: denied, far away. */
    expect_status(fg_gcra_decide(INT64_MAX - 5, &p, T2024_US, 0, &d, &next), FG_OK);
    expect_i64(d.allowed, false);
    expect_i64(d.remaining, 0);
    expect_i64(d.reset_after_ns, INT64_MAX - 5 - T2024_US * US);
    expect_i64(d.retry_after_ns, INT64_MAX - 5 - T2024_US * US - 10 * SEC);
}

static void test_largest_tolerance_that_fits(void **state) {
    (void)state;
    /* T * capacity == INT64_MAX exactly. */
    int64_t tat = 0;
    fg_decision d = take(&tat, 1, INT64_MAX, T2024_US, 1);
    expect_decision(d, true, INT64_MAX, INT64_MAX - 1, -1, 1);
    d = take(&tat, 7, INT64_MAX / 7, T2024_US, 0);
    expect_decision(d, true, INT64_MAX / 7, INT64_MAX / 7 - 1, -1, 1);
}

static void test_outputs_untouched_on_error(void **state) {
    (void)state;
    fg_gcra_params p = {0, 10};
    fg_decision d = {true, 1, 2, 3, 4};
    int64_t next = 99;
    expect_status(fg_gcra_decide(0, &p, T2024_US, 1, &d, &next), FG_EINVAL);
    expect_decision(d, true, 1, 2, 3, 4);
    expect_i64(next, 99);
    p = (fg_gcra_params){SEC, INT64_MAX};
    expect_status(fg_gcra_decide(0, &p, T2024_US, 1, &d, &next), FG_EOVERFLOW);
    expect_decision(d, true, 1, 2, 3, 4);
    expect_i64(next, 99);
}

/* ------------------------------------------------------ invalid input */

static void test_invalid_params(void **state) {
    (void)state;
    fg_decision d;
    int64_t next;
    fg_gcra_params bad[] = {{0, 10}, {-1, 10}, {INT64_MIN, 10}, {SEC, 0}, {SEC, -5},
                            {SEC, INT64_MIN}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_status(fg_gcra_decide(0, &bad[i], T2024_US, 1, &d, &next), FG_EINVAL);

    fg_gcra_params p = {SEC, 10};
    expect_status(fg_gcra_decide(0, &p, T2024_US, -1, &d, &next), FG_EINVAL);
    expect_status(fg_gcra_decide(0, &p, T2024_US, INT64_MIN, &d, &next), FG_EINVAL);
    expect_status(fg_gcra_decide(0, &p, -1, 1, &d, &next), FG_EINVAL);
    expect_status(fg_gcra_decide(-1, &p, T2024_US, 1, &d, &next), FG_EINVAL);
    expect_status(fg_gcra_decide(0, NULL, T2024_US, 1, &d, &next), FG_EINVAL);
    /* The smallest valid values work, including now = 0. */
    p = (fg_gcra_params){1, 1};
    expect_status(fg_gcra_decide(0, &p, 0, 1, &d, &next), FG_OK);
    expect_decision(d, true, 1, 0, -1, 1);
    expect_i64(next, 1);
}

/* ------------------------------------------------------------ expiry */

static void test_expires_at_rounds_up(void **state) {
    (void)state;
    expect_i64(fg_gcra_expires_at_us(0), 0);
    expect_i64(fg_gcra_expires_at_us(-5), 0);
    expect_i64(fg_gcra_expires_at_us(1), 1);
    expect_i64(fg_gcra_expires_at_us(999), 1);
    expect_i64(fg_gcra_expires_at_us(1000), 1);
    expect_i64(fg_gcra_expires_at_us(1001), 2);
    expect_i64(fg_gcra_expires_at_us(T2024_US * US), T2024_US);
    expect_i64(fg_gcra_expires_at_us(T2024_US * US + 1), T2024_US + 1);
    expect_i64(fg_gcra_expires_at_us(INT64_MAX), INT64_MAX / 1000 + 1);
}

static void test_expiry_matches_reset_after(void **state) {
    (void)state;
    int64_t tat = 0;
    fg_decision d = take(&tat, 333, 10, T2024_US, 4);
    /* TAT = now + 1332 ns: expires 2 us after now, never before. */
    expect_i64(d.reset_after_ns, 1332);
    expect_i64(fg_gcra_expires_at_us(tat), T2024_US + 2);
}

/* ----------------------------------------- properties, many cases */

/* retry_after is exact: waiting it (rounded up to the microsecond, as the
 * binding does) admits the same request; one microsecond less does not.
 * reset_after is exact too: then the bucket is full, and not before.
 * remaining is exactly the largest cost that would fit now. */
static void check_answer(int64_t tat, const fg_gcra_params *p, int64_t now, int64_t cost,
                         const fg_decision *d, int64_t next) {
    fg_decision e;
    int64_t ignored;

    expect_sane(d);
    if (!d->allowed && d->retry_after_ns >= 0) {
        int64_t wait = wait_us_for(d->retry_after_ns);
        expect_status(fg_gcra_decide(tat, p, now + wait, cost, &e, &ignored), FG_OK);
        assert_true(e.allowed);
        expect_status(fg_gcra_decide(tat, p, now + wait - 1, cost, &e, &ignored), FG_OK);
        assert_false(e.allowed);
    }
    if (!d->allowed && d->retry_after_ns < 0) assert_true(cost > p->capacity);

    int64_t full_at = now + wait_us_for(d->reset_after_ns);
    expect_status(fg_gcra_decide(next, p, full_at, 0, &e, &ignored), FG_OK);
    expect_i64(e.remaining, p->capacity);
    if (d->reset_after_ns > 0) {
        expect_status(fg_gcra_decide(next, p, full_at - 1, 0, &e, &ignored), FG_OK);
        assert_true(e.remaining < p->capacity);
    }

    expect_status(fg_gcra_decide(next, p, now, d->remaining + 1, &e, &ignored), FG_OK);
    assert_false(e.allowed);
    if (d->remaining > 0) {
        expect_status(fg_gcra_decide(next, p, now, d->remaining, &e, &ignored), FG_OK);
        assert_true(e.allowed);
    }
}

static void test_answers_are_exact_under_random_traffic(void **state) {
    (void)state;
    test_rng rng = {20240101};
    int denied_with_retry = 0;

    for (int scenario = 0; scenario < 300; scenario++) {
        fg_gcra_params p;
        /* Emission intervals from 1 ns to 5 s, including whole and broken
         * microseconds. */
        switch (scenario % 3) {
        case 0: p.emission_ns = rng_range(&rng, 1, 2000); break;
        case 1: p.emission_ns = rng_range(&rng, 1, 5000) * US; break;
        default: p.emission_ns = rng_range(&rng, 1, 5 * SEC); break;
        }
        p.capacity = rng_range(&rng, 1, 40);
        int64_t tat = 0, now = T2024_US + rng_range(&rng, 0, 1000000);
        int64_t span_us = p.emission_ns / US + 2;

        for (int step = 0; step < 60; step++) {
            int64_t r = rng_range(&rng, 0, 9);
            if (r < 6) now += rng_range(&rng, 0, span_us);
            else if (r == 6) now -= rng_range(&rng, 0, span_us); /* clock back */
            int64_t cost = rng_range(&rng, 0, 9) == 0 ? rng_range(&rng, 0, p.capacity + 3)
                                                      : rng_range(&rng, 0, 2);
            fg_decision d;
            int64_t next;
            expect_status(fg_gcra_decide(tat, &p, now, cost, &d, &next), FG_OK);
            check_answer(tat, &p, now, cost, &d, next);
            if (!d.allowed && d.retry_after_ns > 0) denied_with_retry++;
            if (!d.allowed || cost == 0) expect_i64(next, tat);
            tat = next;
        }
    }
    /* The traffic must actually have exercised the denials. */
    assert_true(denied_with_retry > 1000);
}

/* The same properties from arbitrary stored TATs: stale ones, and ones far
 * ahead of now, as a clock step back leaves them. */
static void test_answers_are_exact_from_arbitrary_states(void **state) {
    (void)state;
    test_rng rng = {555};
    for (int i = 0; i < 20000; i++) {
        fg_gcra_params p = {rng_range(&rng, 1, 3 * MS), rng_range(&rng, 1, 20)};
        int64_t now = T2024_US + rng_range(&rng, 0, 1000000);
        int64_t dvt = p.emission_ns * p.capacity;
        int64_t tat = rng_range(&rng, 0, 4) == 0
                          ? 0
                          : now * US + rng_range(&rng, -3 * dvt, 3 * dvt);
        int64_t cost = rng_range(&rng, 0, p.capacity + 1);
        fg_decision d;
        int64_t next;
        expect_status(fg_gcra_decide(tat, &p, now, cost, &d, &next), FG_OK);
        check_answer(tat, &p, now, cost, &d, next);
    }
}

/* An independent model: a token bucket in exact rational arithmetic, with
 * tokens counted in units of 1/T ns (so refill is one per nanosecond). */
static void test_matches_a_token_bucket_model(void **state) {
    (void)state;
    test_rng rng = {7};
    for (int scenario = 0; scenario < 200; scenario++) {
        fg_gcra_params p = {rng_range(&rng, 1, 3000), rng_range(&rng, 1, 20)};
        int64_t full = p.emission_ns * p.capacity; /* bucket size in ns-tokens */
        int64_t level = full, last_ns = 0, tat = 0;
        int64_t now = T2024_US;

        for (int step = 0; step < 200; step++) {
            now += rng_range(&rng, 0, p.emission_ns * 3 / 1000 + 1);
            int64_t cost = rng_range(&rng, 0, p.capacity + 1);
            int64_t now_ns = now * US;
            if (last_ns != 0) level = fg_min(full, level + (now_ns - last_ns));
            last_ns = now_ns;
            bool model_allows = cost * p.emission_ns <= level;

            fg_decision d;
            int64_t next;
            expect_status(fg_gcra_decide(tat, &p, now, cost, &d, &next), FG_OK);
            expect_i64(d.allowed, model_allows);
            if (model_allows) level -= cost * p.emission_ns;
            expect_i64(d.remaining, level / p.emission_ns);
            expect_i64(d.reset_after_ns, full - level);
            tat = next;
        }
    }
}

/* Giving back units taken earlier (a lease's leftover). */
static void test_refund(void **state) {
    (void)state;
    fg_gcra_params p = {SEC, 10};
    fg_decision d;
    int64_t tat, next, refunded;
    expect_status(fg_gcra_decide(0, &p, T2024_US, 10, &d, &tat), FG_OK);
    /* 4 of 10 back at once: the TAT moves back 4 s. */
    expect_status(fg_gcra_refund(tat, &p, T2024_US, 4, &next, &refunded), FG_OK);
    expect_i64(refunded, 4);
    expect_i64(next, tat - 4 * SEC);
    /* After 7 s only 3 units are still out: giving back 5 returns those 3
     * (rounded up) and the bucket is full again. */
    expect_status(fg_gcra_refund(tat, &p, T2024_US + 7 * SEC / US, 5, &next, &refunded), FG_OK);
    expect_i64(refunded, 3);
    expect_i64(next, 0);
    /* Nothing out, nothing back; more than a bucket is capped. */
    expect_status(fg_gcra_refund(0, &p, T2024_US, 5, &next, &refunded), FG_OK);
    expect_i64(refunded, 0);
    expect_i64(next, 0);
    expect_status(fg_gcra_refund(tat, &p, T2024_US, INT64_MAX, &next, &refunded), FG_OK);
    expect_i64(refunded, 10);
    expect_i64(next, 0);
    expect_status(fg_gcra_refund(tat, &p, T2024_US, -1, &next, &refunded), FG_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_cell_30_per_minute),
        cmocka_unit_test(test_redis_cell_own_table),
        cmocka_unit_test(test_first_request_on_empty_state),
        cmocka_unit_test(test_cost_equal_to_capacity_empties_the_bucket),
        cmocka_unit_test(test_cost_larger_than_capacity_never_fits),
        cmocka_unit_test(test_cost_zero_on_empty_state_is_a_full_peek),
        cmocka_unit_test(test_cost_zero_peeks_without_writing),
        cmocka_unit_test(test_cost_zero_on_full_bucket_is_allowed),
        cmocka_unit_test(test_remaining_rounds_down_between_emissions),
        cmocka_unit_test(test_bucket_refills_to_capacity_and_no_more),
        cmocka_unit_test(test_steady_rate_at_the_limit_is_always_admitted),
        cmocka_unit_test(test_stale_state_is_a_full_bucket),
        cmocka_unit_test(test_tat_equal_to_now_is_full),
        cmocka_unit_test(test_one_unit_per_nanosecond),
        cmocka_unit_test(test_emission_not_a_whole_microsecond),
        cmocka_unit_test(test_clock_going_back_refunds_nothing),
        cmocka_unit_test(test_clock_far_back_denies_even_a_peek),
        cmocka_unit_test(test_overflow_of_the_tolerance),
        cmocka_unit_test(test_huge_cost_never_fits),
        cmocka_unit_test(test_refund),
        cmocka_unit_test(test_overflow_of_the_new_tat),
        cmocka_unit_test(test_overflow_of_now_and_tat),
        cmocka_unit_test(test_largest_tolerance_that_fits),
        cmocka_unit_test(test_outputs_untouched_on_error),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_expires_at_rounds_up),
        cmocka_unit_test(test_expiry_matches_reset_after),
        cmocka_unit_test(test_answers_are_exact_under_random_traffic),
        cmocka_unit_test(test_answers_are_exact_from_arbitrary_states),
        cmocka_unit_test(test_matches_a_token_bucket_model),
    };
    return cmocka_run_group_tests_name("gcra", tests, NULL, NULL);
}
