/*
 * test_sliding_log.c - the sliding window log, against exact values, with an
 * allocator that moves every block and fails on demand.
 */
#include "test_heap.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "sliding_log.h"

#define MINUTE_US 60000000LL

/* ------------------------------------------------------------- helpers */

/* Decides and applies the effect, as the binding would. */
static fg_decision take(fg_slog *log, int64_t limit, int64_t window_us, int64_t now_us,
                        int64_t cost) {
    fg_slog_params p = {limit, window_us};
    fg_decision d;
    fg_slog_effect e;
    expect_status(fg_slog_decide(log, &p, now_us, cost, &d, &e), FG_OK);
    expect_sane(&d);
    if (d.allowed && cost > 0) {
        expect_i64(e.count, cost);
        expect_i64(e.drop_through_us, now_us - window_us);
    } else {
        expect_i64(e.count, 0);
    }
    expect_status(fg_slog_apply(log, &e, &alloc), FG_OK);
    return d;
}

static void expect_log(const fg_slog *log, const int64_t *expected, uint32_t n) {
    expect_i64(log->len, n);
    for (uint32_t i = 0; i < n; i++) expect_i64(fg_slog_at(log, i), expected[i]);
}

static void fill(fg_slog *log, int64_t first_us, int64_t step_us, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        fg_slog_effect e = {INT64_MIN, first_us + step_us * i, 1};
        expect_status(fg_slog_apply(log, &e, &alloc), FG_OK);
    }
}

/* A full copy of the ring, to check that a failed call changed nothing. */
typedef struct snapshot {
    fg_slog log;
    int64_t entries[64];
} snapshot;

static snapshot take_snapshot(const fg_slog *log) {
    snapshot s;
    s.log = *log;
    assert_true(log->len <= 64);
    for (uint32_t i = 0; i < log->len; i++) s.entries[i] = fg_slog_at(log, i);
    return s;
}

static void expect_unchanged(const fg_slog *log, const snapshot *s) {
    assert_ptr_equal(log->ts, s->log.ts);
    expect_i64(log->head, s->log.head);
    expect_i64(log->len, s->log.len);
    expect_i64(log->cap, s->log.cap);
    expect_log(log, s->entries, s->log.len);
}

/* ------------------------------------------------------ empty and full */

static void test_first_request_on_empty_log(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_params p = {5, MINUTE_US};
    fg_decision d;
    fg_slog_effect e;
    expect_status(fg_slog_decide(&log, &p, T2024_US, 1, &d, &e), FG_OK);
    expect_decision(d, true, 5, 4, -1, 60 * SEC);
    expect_i64(e.drop_through_us, T2024_US - MINUTE_US);
    expect_i64(e.at_us, T2024_US);
    expect_i64(e.count, 1);
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    int64_t want[] = {T2024_US};
    expect_log(&log, want, 1);
    fg_slog_free(&log, &alloc);
}

static void test_fills_up_then_waits_for_the_oldest(void **state) {
    (void)state;
    fg_slog log = {0};
    const int64_t t0 = T2024_US;
    for (int64_t i = 0; i < 5; i++)
        expect_decision(take(&log, 5, MINUTE_US, t0 + i * 1000000, 1), true, 5, 4 - i, -1,
                        60 * SEC);
    /* At t0 + 10 s the oldest (t0) leaves at t0 + 60 s. */
    expect_decision(take(&log, 5, MINUTE_US, t0 + 10000000, 1), false, 5, 0, 50 * SEC,
                    54 * SEC);
    expect_decision(take(&log, 5, MINUTE_US, t0 + MINUTE_US - 1, 1), false, 5, 0, 1 * US,
                    4 * SEC + 1 * US);
    expect_decision(take(&log, 5, MINUTE_US, t0 + MINUTE_US, 1), true, 5, 0, -1, 60 * SEC);
    /* The expired entry was dropped by the same apply. */
    int64_t want[] = {t0 + 1000000, t0 + 2000000, t0 + 3000000, t0 + 4000000, t0 + MINUTE_US};
    expect_log(&log, want, 5);
    fg_slog_free(&log, &alloc);
}

static void test_retry_waits_for_as_many_entries_as_needed(void **state) {
    (void)state;
    fg_slog log = {0};
    const int64_t t0 = T2024_US;
    fill(&log, t0, 1000000, 5); /* t0 .. t0 + 4 s */
    /* A cost of 3 needs 3 entries to leave: the 3rd is t0 + 2 s. */
    expect_decision(take(&log, 5, MINUTE_US, t0 + 10000000, 3), false, 5, 0, 52 * SEC,
                    54 * SEC);
    expect_decision(take(&log, 5, MINUTE_US, t0 + 62000000 - 1, 3), false, 5, 2, 1 * US,
                    2 * SEC + 1 * US);
    expect_decision(take(&log, 5, MINUTE_US, t0 + 62000000, 3), true, 5, 0, -1, 60 * SEC);
    int64_t want[] = {t0 + 3000000, t0 + 4000000, t0 + 62000000, t0 + 62000000,
                      t0 + 62000000};
    expect_log(&log, want, 5);
    fg_slog_free(&log, &alloc);
}

static void test_entries_with_the_same_stamp(void **state) {
    (void)state;
    fg_slog log = {0};
    take(&log, 10, 100, 1000, 4);
    take(&log, 10, 100, 1050, 6);
    /* 10 entries: 4 at 1000, 6 at 1050. A cost of 5 needs the 5th oldest,
     * stamped 1050, to leave: at 1150. */
    expect_decision(take(&log, 10, 100, 1060, 5), false, 10, 0, 90 * US, 90 * US);
    /* A cost of 4 only needs the 4 at 1000 gone: at 1100. */
    expect_decision(take(&log, 10, 100, 1060, 4), false, 10, 0, 40 * US, 90 * US);
    expect_decision(take(&log, 10, 100, 1100, 4), true, 10, 0, -1, 100 * US);
    fg_slog_free(&log, &alloc);
}

static void test_cost_equal_to_limit(void **state) {
    (void)state;
    fg_slog log = {0};
    expect_decision(take(&log, 5, MINUTE_US, T2024_US, 5), true, 5, 0, -1, 60 * SEC);
    int64_t want[] = {T2024_US, T2024_US, T2024_US, T2024_US, T2024_US};
    expect_log(&log, want, 5);
    fg_slog_free(&log, &alloc);
}

static void test_cost_larger_than_limit_never_fits(void **state) {
    (void)state;
    fg_slog log = {0};
    expect_decision(take(&log, 5, MINUTE_US, T2024_US, 6), false, 5, 5, -1, 0);
    expect_i64(log.len, 0);
    fill(&log, T2024_US, 0, 2);
    expect_decision(take(&log, 5, MINUTE_US, T2024_US + 1, INT64_MAX), false, 5, 3, -1,
                    60 * SEC - 1 * US);
    expect_i64(log.len, 2);
    fg_slog_free(&log, &alloc);
}

/* ---------------------------------------------------------- cost 0 */

static void test_cost_zero_peeks_without_an_effect(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_params p = {5, MINUTE_US};
    fg_decision d;
    fg_slog_effect e;
    expect_status(fg_slog_decide(&log, &p, T2024_US, 0, &d, &e), FG_OK);
    expect_decision(d, true, 5, 5, -1, 0);
    expect_i64(e.count, 0);

    fill(&log, T2024_US, 1, 3);
    expect_status(fg_slog_decide(&log, &p, T2024_US + 10, 0, &d, &e), FG_OK);
    expect_decision(d, true, 5, 2, -1, 60 * SEC - 8 * US);
    expect_i64(e.count, 0);
    /* The no-op effect is harmless to apply. */
    snapshot before = take_snapshot(&log);
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_unchanged(&log, &before);
    fg_slog_free(&log, &alloc);
}

static void test_cost_zero_on_a_full_log(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, T2024_US, 0, 5);
    expect_decision(take(&log, 5, MINUTE_US, T2024_US, 0), true, 5, 0, -1, 60 * SEC);
    fg_slog_free(&log, &alloc);
}

/* -------------------------------------------------- window boundaries */

static void test_boundary_just_before_at_and_after(void **state) {
    (void)state;
    fg_slog log = {0};
    const int64_t t0 = T2024_US;
    take(&log, 1, MINUTE_US, t0, 1);
    expect_decision(take(&log, 1, MINUTE_US, t0 + MINUTE_US - 1, 1), false, 1, 0, 1 * US,
                    1 * US);
    expect_decision(take(&log, 1, MINUTE_US, t0 + MINUTE_US, 0), true, 1, 1, -1, 0);
    expect_decision(take(&log, 1, MINUTE_US, t0 + MINUTE_US, 1), true, 1, 0, -1, 60 * SEC);
    expect_decision(take(&log, 1, MINUTE_US, t0 + MINUTE_US + 1, 1), false, 1, 0,
                    60 * SEC - 1 * US, 60 * SEC - 1 * US);
    int64_t want[] = {t0 + MINUTE_US};
    expect_log(&log, want, 1);
    fg_slog_free(&log, &alloc);
}

static void test_no_burst_across_any_boundary(void **state) {
    (void)state;
    /* Exact: at most `limit` units in any window of W microseconds. */
    fg_slog log = {0};
    const int64_t t0 = T2024_US;
    expect_decision(take(&log, 100, MINUTE_US, t0 + MINUTE_US - 1, 100), true, 100, 0, -1,
                    60 * SEC);
    expect_decision(take(&log, 100, MINUTE_US, t0 + MINUTE_US, 1), false, 100, 0,
                    60 * SEC - 1 * US, 60 * SEC - 1 * US);
    fg_slog_free(&log, &alloc);
}

static void test_one_microsecond_window(void **state) {
    (void)state;
    fg_slog log = {0};
    expect_decision(take(&log, 2, 1, 5, 2), true, 2, 0, -1, 1 * US);
    expect_decision(take(&log, 2, 1, 5, 1), false, 2, 0, 1 * US, 1 * US);
    expect_decision(take(&log, 2, 1, 6, 2), true, 2, 0, -1, 1 * US);
    int64_t want[] = {6, 6};
    expect_log(&log, want, 2);
    fg_slog_free(&log, &alloc);
}

static void test_time_zero(void **state) {
    (void)state;
    fg_slog log = {0};
    expect_decision(take(&log, 2, 10, 0, 1), true, 2, 1, -1, 10 * US);
    int64_t want[] = {0};
    expect_log(&log, want, 1);
    expect_i64(fg_slog_expires_at_us(&log, &(fg_slog_params){2, 10}), 10);
    fg_slog_free(&log, &alloc);
}

/* ---------------------------------------------------- clock going back */

static void test_clock_back_entries_still_count(void **state) {
    (void)state;
    fg_slog log = {0};
    const int64_t t0 = T2024_US;
    fill(&log, t0 + 10000000, 1000000, 3); /* t0 + 10, 11, 12 s */
    /* Now is t0: the three entries are in the future and count. */
    fg_slog_params p = {4, MINUTE_US};
    fg_decision d;
    fg_slog_effect e;
    expect_status(fg_slog_decide(&log, &p, t0, 1, &d, &e), FG_OK);
    expect_decision(d, true, 4, 0, -1, 72 * SEC);
    /* Stamped with the newest time, not now, to keep the log ordered. */
    expect_i64(e.at_us, t0 + 12000000);
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    /* The oldest, t0 + 10 s, leaves at t0 + 70 s. */
    expect_decision(take(&log, 4, MINUTE_US, t0, 1), false, 4, 0, 70 * SEC, 72 * SEC);
    fg_slog_free(&log, &alloc);
}

/* ------------------------------------------------------ odd states */

static void test_log_above_a_lowered_limit(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, T2024_US, 1000000, 8); /* t0 .. t0 + 7 s */
    /* limit 5, cost 1: 4 entries must go, the 4th is t0 + 3 s. */
    expect_decision(take(&log, 5, MINUTE_US, T2024_US + 10000000, 1), false, 5, 0, 53 * SEC,
                    57 * SEC);
    /* Even a peek: 3 must go. */
    expect_decision(take(&log, 5, MINUTE_US, T2024_US + 10000000, 0), false, 5, 0, 52 * SEC,
                    57 * SEC);
    fg_slog_free(&log, &alloc);
}

static void test_largest_limit(void **state) {
    (void)state;
    fg_slog log = {0};
    expect_decision(take(&log, FG_SLOG_MAX_LIMIT, MINUTE_US, T2024_US, FG_SLOG_MAX_LIMIT),
                    true, FG_SLOG_MAX_LIMIT, 0, -1, 60 * SEC);
    expect_i64(log.len, FG_SLOG_MAX_LIMIT);
    expect_i64(log.cap, FG_SLOG_MAX_LIMIT);
    expect_decision(take(&log, FG_SLOG_MAX_LIMIT, MINUTE_US, T2024_US + 1, 1), false,
                    FG_SLOG_MAX_LIMIT, 0, 60 * SEC - 1 * US, 60 * SEC - 1 * US);
    /* A window later all of them are replaced in one apply. */
    expect_decision(take(&log, FG_SLOG_MAX_LIMIT, MINUTE_US, T2024_US + MINUTE_US,
                         FG_SLOG_MAX_LIMIT),
                    true, FG_SLOG_MAX_LIMIT, 0, -1, 60 * SEC);
    expect_i64(log.len, FG_SLOG_MAX_LIMIT);
    expect_i64(fg_slog_at(&log, 0), T2024_US + MINUTE_US);
    fg_slog_free(&log, &alloc);
}

static void test_growth_one_unit_at_a_time_up_to_the_maximum(void **state) {
    (void)state;
    fg_slog log = {0};
    for (int64_t i = 0; i < FG_SLOG_MAX_LIMIT; i++) {
        fg_slog_effect e = {INT64_MIN, i, 1};
        expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
        assert_true(log.cap <= FG_SLOG_MAX_LIMIT);
        assert_true(log.cap >= log.len);
    }
    expect_i64(log.cap, FG_SLOG_MAX_LIMIT);
    /* Geometric growth: a handful of reallocations, not one per unit. */
    assert_true(heap.calls < 20);
    for (uint32_t i = 0; i < FG_SLOG_MAX_LIMIT; i += 997) expect_i64(fg_slog_at(&log, i), i);
    fg_slog_effect e = {INT64_MIN, FG_SLOG_MAX_LIMIT, 1};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_EINVAL);
    fg_slog_free(&log, &alloc);
}

/* ------------------------------------------------------- huge values */

static void test_overflowing_times(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_params p = {5, MINUTE_US};
    fg_decision d = {true, 1, 2, 3, 4};
    fg_slog_effect e;
    /* An entry near the end of time (a clock that stepped far back). */
    fill(&log, INT64_MAX - 10, 0, 1);
    expect_status(fg_slog_decide(&log, &p, T2024_US, 1, &d, &e), FG_EOVERFLOW);
    expect_status(fg_slog_decide(&log, &p, T2024_US, 6, &d, &e), FG_EOVERFLOW);
    expect_decision(d, true, 1, 2, 3, 4);
    fg_slog_free(&log, &alloc);
    /* Far, but still representable in ns: fine. */
    fill(&log, T2024_US + 1000000000000LL, 0, 5);
    expect_status(fg_slog_decide(&log, &p, T2024_US, 1, &d, &e), FG_OK);
    expect_decision(d, false, 5, 0, (1000000000000LL + MINUTE_US) * US,
                    (1000000000000LL + MINUTE_US) * US);
    fg_slog_free(&log, &alloc);
}

static void test_huge_window(void **state) {
    (void)state;
    fg_slog log = {0};
    const int64_t W = 1000000000000000LL; /* 10^12 ms */
    expect_decision(take(&log, 2, W, T2024_US, 1), true, 2, 1, -1, W * US);
    /* now - W is negative: nothing is dropped, nothing overflows. */
    expect_decision(take(&log, 2, W, T2024_US + 5, 1), true, 2, 0, -1, W * US);
    expect_decision(take(&log, 2, W, T2024_US + 9, 1), false, 2, 0, (W - 9) * US, (W - 4) * US);
    fg_slog_free(&log, &alloc);
}

/* ------------------------------------------------------ invalid input */

static void test_invalid_params(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_decision d;
    fg_slog_effect e;
    fg_slog_params bad[] = {{0, 10}, {-1, 10}, {FG_SLOG_MAX_LIMIT + 1, 10}, {INT64_MAX, 10},
                            {10, 0}, {10, -1}, {10, INT64_MIN}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_status(fg_slog_decide(&log, &bad[i], T2024_US, 1, &d, &e), FG_EINVAL);

    fg_slog_params p = {10, MINUTE_US};
    expect_status(fg_slog_decide(&log, &p, T2024_US, -1, &d, &e), FG_EINVAL);
    expect_status(fg_slog_decide(&log, &p, -1, 1, &d, &e), FG_EINVAL);
    expect_status(fg_slog_decide(&log, NULL, T2024_US, 1, &d, &e), FG_EINVAL);
    expect_status(fg_slog_decide(NULL, &p, T2024_US, 1, &d, &e), FG_EINVAL);
    p = (fg_slog_params){1, 1};
    expect_status(fg_slog_decide(&log, &p, 0, 1, &d, &e), FG_OK);
    p = (fg_slog_params){FG_SLOG_MAX_LIMIT, INT64_MAX / 1000};
    expect_status(fg_slog_decide(&log, &p, 0, 1, &d, &e), FG_OK);
    expect_decision(d, true, FG_SLOG_MAX_LIMIT, FG_SLOG_MAX_LIMIT - 1, -1,
                    INT64_MAX / 1000 * 1000);
    /* A window too long to be said in nanoseconds. */
    p = (fg_slog_params){FG_SLOG_MAX_LIMIT, INT64_MAX};
    expect_status(fg_slog_decide(&log, &p, 0, 1, &d, &e), FG_EOVERFLOW);
    expect_status(fg_slog_decide(&log, &p, 0, 0, &d, &e), FG_OK);
}

static void test_malformed_logs_are_refused(void **state) {
    (void)state;
    int64_t slots[4] = {1, 2, 3, 4};
    fg_slog_params p = {10, MINUTE_US};
    fg_decision d;
    fg_slog_effect e = {INT64_MIN, 10, 1};
    fg_slog bad[] = {
        {NULL, 0, 1, 0},  /* entries without an allocation */
        {NULL, 0, 0, 4},  /* an allocation without a pointer */
        {slots, 4, 1, 4}, /* head outside the ring */
        {slots, 0, 5, 4}, /* more entries than slots */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_status(fg_slog_decide(&bad[i], &p, T2024_US, 1, &d, &e), FG_EINVAL);
        expect_status(fg_slog_apply(&bad[i], &e, &alloc), FG_EINVAL);
    }
    fg_slog ok = {slots, 3, 2, 4}; /* 4, 1: a wrapped ring */
    expect_i64(fg_slog_at(&ok, 0), 4);
    expect_i64(fg_slog_at(&ok, 1), 1);
    expect_i64(fg_slog_at(&ok, 2), 0); /* out of range */
    expect_i64(fg_slog_at(NULL, 0), 0);
}

/* -------------------------------------------------------------- apply */

static void test_apply_drops_through_the_given_time(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 100, 10, 6); /* 100 .. 150 */
    fg_slog_effect e = {120, 200, 2};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    int64_t want[] = {130, 140, 150, 200, 200};
    expect_log(&log, want, 5);
    /* Count 0 drops only. */
    e = (fg_slog_effect){145, 0, 0};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    int64_t want2[] = {150, 200, 200};
    expect_log(&log, want2, 3);
    fg_slog_free(&log, &alloc);
}

static void test_apply_refuses_an_older_stamp(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 100, 10, 3); /* 100, 110, 120 */
    snapshot before = take_snapshot(&log);
    fg_slog_effect e = {INT64_MIN, 119, 1};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_EINVAL);
    expect_unchanged(&log, &before);
    /* Equal to the newest is fine. */
    e.at_us = 120;
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    /* Older than the newest, but the newest is dropped first: fine. */
    e = (fg_slog_effect){120, 50, 1};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    int64_t want[] = {50};
    expect_log(&log, want, 1);
    fg_slog_free(&log, &alloc);
}

static void test_apply_refuses_bad_effects(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 100, 10, 3);
    snapshot before = take_snapshot(&log);
    fg_slog_effect bad[] = {
        {INT64_MIN, 200, -1},
        {INT64_MIN, -5, 1},
        {INT64_MIN, 200, FG_SLOG_MAX_LIMIT - 2},
        {INT64_MIN, 200, INT64_MAX},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_status(fg_slog_apply(&log, &bad[i], &alloc), FG_EINVAL);
        expect_unchanged(&log, &before);
    }
    expect_status(fg_slog_apply(&log, NULL, &alloc), FG_EINVAL);
    expect_status(fg_slog_apply(&log, &bad[0], NULL), FG_EINVAL);
    /* Exactly up to the maximum, counting what stays after the drop. */
    fg_slog_effect e = {105, 200, FG_SLOG_MAX_LIMIT - 2};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.len, FG_SLOG_MAX_LIMIT);
    fg_slog_free(&log, &alloc);
}

static void test_allocation_failure_leaves_the_log_unchanged(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_effect e = {INT64_MIN, 100, 1};

    /* The very first allocation. */
    heap.fail_in = 1;
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_EOVERFLOW);
    assert_null(log.ts);
    expect_i64(log.len, 0);
    expect_i64(log.cap, 0);

    /* Growing a full, wrapped ring. */
    fill(&log, 100, 1, 16);
    e = (fg_slog_effect){104, 200, 5}; /* drops 5, adds 5: no growth */
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.cap, 16);
    assert_true(log.head != 0);
    snapshot before = take_snapshot(&log);
    heap.fail_in = 1;
    e = (fg_slog_effect){INT64_MIN, 300, 3};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_EOVERFLOW);
    expect_unchanged(&log, &before);

    /* The decision does not allocate: it still works. */
    heap.fail_always = true;
    fg_decision d;
    fg_slog_params p = {100, 1000};
    expect_status(fg_slog_decide(&log, &p, 250, 3, &d, &e), FG_OK);
    expect_i64(d.allowed, true);
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_EOVERFLOW);
    expect_unchanged(&log, &before);

    /* Once memory is back the same effect applies. */
    heap.fail_always = false;
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.len, 19);
    expect_i64(fg_slog_at(&log, 0), 105);
    expect_i64(fg_slog_at(&log, 18), 250);
    fg_slog_free(&log, &alloc);
}

/* ------------------------------------------------------- ring buffer */

static void test_ring_wraps_around(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 0, 1, 10); /* 0..9 in a ring of 16 */
    expect_i64(log.cap, 16);
    /* Drop 3 (not enough to shrink), then add up to 18: the ring wraps. */
    fg_slog_effect e = {2, 10, 1};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    fill(&log, 11, 1, 8);
    expect_i64(log.cap, 16);
    expect_i64(log.head, 3);
    int64_t want[16];
    for (int i = 0; i < 16; i++) want[i] = 3 + i;
    expect_log(&log, want, 16);
    expect_i64(log.ts[2], 18); /* the newest sits before the oldest */

    /* Many rounds of drop-one, add-one go around the ring many times. */
    for (int64_t t = 19; t < 1000; t++) {
        e = (fg_slog_effect){fg_slog_at(&log, 0), t, 1};
        expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
        expect_i64(log.len, 16);
        expect_i64(fg_slog_at(&log, 15), t);
        for (uint32_t i = 1; i < 16; i++)
            assert_true(fg_slog_at(&log, i - 1) <= fg_slog_at(&log, i));
    }
    expect_i64(log.cap, 16);
    fg_slog_free(&log, &alloc);
}

static void test_growth_of_a_wrapped_ring_keeps_the_order(void **state) {
    (void)state;
    /* Every head position, so that every split of a wrapped ring grows. */
    for (uint32_t shift = 0; shift < 16; shift++) {
        fg_slog log = {0};
        fill(&log, 0, 1, 16);
        fg_slog_effect e = {(int64_t)shift - 1, 16, (int64_t)shift};
        expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
        expect_i64(log.head, shift);
        expect_i64(log.len, 16);
        /* Now grow: 16 entries plus 5. */
        e = (fg_slog_effect){INT64_MIN, 17, 5};
        expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
        expect_i64(log.cap, 32);
        expect_i64(log.len, 21);
        for (uint32_t i = 0; i < 21; i++) {
            int64_t want = i + shift < 16 ? (int64_t)(i + shift) : i + shift < 16 + shift ? 16 : 17;
            expect_i64(fg_slog_at(&log, i), want);
        }
        fg_slog_free(&log, &alloc);
    }
}

static void test_shrinks_when_mostly_empty(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 0, 1, 1000);
    uint32_t big = log.cap;
    assert_true(big >= 1000);
    /* Keep 10 (990..999), wrapped or not, then add 1: a quarter full at most. */
    fg_slog_effect e = {989, 1000, 1};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    assert_true(log.cap < big);
    assert_true(log.cap >= log.len);
    expect_i64(log.len, 11);
    for (uint32_t i = 0; i < 11; i++) expect_i64(fg_slog_at(&log, i), 990 + i);
    fg_slog_free(&log, &alloc);
}

static void test_shrink_of_a_wrapped_ring(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 0, 1, 64);
    expect_i64(log.cap, 64);
    /* Drop 60 and add 6: 10 entries, wrapped at the end of the ring. */
    fg_slog_effect e = {59, 64, 6};
    heap.fail_in = 1; /* the shrink fails: harmless */
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.cap, 64);
    int64_t want[] = {60, 61, 62, 63, 64, 64, 64, 64, 64, 64};
    expect_log(&log, want, 10);
    /* Next time it works. */
    e = (fg_slog_effect){INT64_MIN, 65, 1};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.cap, 22);
    expect_i64(log.head, 0);
    int64_t want2[] = {60, 61, 62, 63, 64, 64, 64, 64, 64, 64, 65};
    expect_log(&log, want2, 11);
    fg_slog_free(&log, &alloc);
}

static void test_keeps_its_memory_while_a_quarter_full(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 0, 1, 64);
    expect_i64(log.cap, 64);
    /* 17 of 64 in use: more than a quarter, no reallocation. */
    int64_t calls = heap.calls;
    fg_slog_effect e = {46, 0, 0};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.len, 17);
    expect_i64(log.cap, 64);
    expect_i64(heap.calls, calls);
    /* 16 of 64: shrinks to twice what is in use. */
    e = (fg_slog_effect){47, 0, 0};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(log.len, 16);
    expect_i64(log.cap, 32);
    for (uint32_t i = 0; i < 16; i++) expect_i64(fg_slog_at(&log, i), 48 + i);
    fg_slog_free(&log, &alloc);
}

static void test_an_emptied_log_gives_its_memory_back(void **state) {
    (void)state;
    fg_slog log = {0};
    fill(&log, 0, 1, 5);
    expect_i64(heap.blocks, 1);
    fg_slog_effect e = {10, 0, 0};
    expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
    expect_i64(heap.blocks, 0);
    assert_null(log.ts);
    expect_i64(log.cap, 0);
    expect_i64(log.len, 0);
    /* And it can be used again. */
    fill(&log, 20, 1, 2);
    expect_i64(log.len, 2);
    fg_slog_free(&log, &alloc);
}

/* --------------------------------------------------- expiry and free */

static void test_expires_when_the_newest_leaves(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_params p = {5, MINUTE_US};
    expect_i64(fg_slog_expires_at_us(&log, &p), 0);
    expect_i64(fg_slog_expires_at_us(NULL, &p), 0);
    fill(&log, T2024_US, 7, 3);
    expect_i64(fg_slog_expires_at_us(&log, &p), T2024_US + 14 + MINUTE_US);
    p.window_us = INT64_MAX;
    expect_i64(fg_slog_expires_at_us(&log, &p), INT64_MAX);
    fg_slog_free(&log, &alloc);
}

static void test_expiry_matches_reset_after(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_params p = {5, MINUTE_US};
    const int64_t now = T2024_US + 1234567;
    fg_decision d = take(&log, 5, MINUTE_US, now, 2);
    expect_i64(fg_slog_expires_at_us(&log, &p), now + d.reset_after_ns / US);
    fg_slog_free(&log, &alloc);
}

static void test_free_releases_and_zeroes(void **state) {
    (void)state;
    fg_slog log = {0};
    fg_slog_free(&log, &alloc); /* an empty log: nothing to free */
    fill(&log, 1, 1, 40);
    fg_slog_free(&log, &alloc);
    assert_null(log.ts);
    expect_i64(log.head, 0);
    expect_i64(log.len, 0);
    expect_i64(log.cap, 0);
    expect_i64(heap.blocks, 0);
}

/* ----------------------------------------- properties, many cases */

/* A model: a plain sorted array, and every answer recomputed by counting
 * and by trying every later microsecond. */
typedef struct model {
    int64_t ts[256];
    int n;
} model;

static int64_t model_counted(const model *m, int64_t now, int64_t W) {
    int64_t c = 0;
    for (int i = 0; i < m->n; i++) c += m->ts[i] > now - W;
    return c;
}

static void check_answer(const fg_slog *log, const fg_slog_params *p, int64_t now,
                         int64_t cost, const fg_decision *d) {
    fg_decision e;
    fg_slog_effect ignored;
    expect_sane(d);
    if (!d->allowed && d->retry_after_ns >= 0) {
        int64_t wait = wait_us_for(d->retry_after_ns);
        expect_i64(wait * US, d->retry_after_ns);
        expect_status(fg_slog_decide(log, p, now + wait, cost, &e, &ignored), FG_OK);
        assert_true(e.allowed);
        expect_status(fg_slog_decide(log, p, now + wait - 1, cost, &e, &ignored), FG_OK);
        assert_false(e.allowed);
    }
    if (!d->allowed && d->retry_after_ns < 0) assert_true(cost > p->limit);
}

static void test_matches_a_model_under_random_traffic(void **state) {
    (void)state;
    test_rng rng = {1234};
    int denied_with_retry = 0;
    static model m;

    for (int scenario = 0; scenario < 300; scenario++) {
        fg_slog_params p = {rng_range(&rng, 1, 40), rng_range(&rng, 1, 3000)};
        fg_slog log = {0}, replica = {0};
        int64_t now = T2024_US + rng_range(&rng, 0, 1000000);
        m.n = 0;

        for (int step = 0; step < 100; step++) {
            int64_t r = rng_range(&rng, 0, 9);
            if (r < 6) now += rng_range(&rng, 0, p.window_us / 4 + 1);
            else if (r == 6) now -= rng_range(&rng, 0, p.window_us); /* clock back */
            int64_t cost = rng_range(&rng, 0, 9) == 0 ? rng_range(&rng, 0, p.limit + 3)
                                                      : rng_range(&rng, 0, 3);
            fg_decision d;
            fg_slog_effect e;
            expect_status(fg_slog_decide(&log, &p, now, cost, &d, &e), FG_OK);
            check_answer(&log, &p, now, cost, &d);

            int64_t counted = model_counted(&m, now, p.window_us);
            bool allowed = counted + cost <= p.limit;
            expect_i64(d.allowed, allowed);
            expect_i64(d.remaining, fg_max(p.limit - counted - (allowed ? cost : 0), 0));
            if (!allowed && cost <= p.limit) {
                int64_t t = 1;
                while (model_counted(&m, now + t, p.window_us) + cost > p.limit) t++;
                expect_i64(d.retry_after_ns, t * US);
            }
            if (!d.allowed && d.retry_after_ns > 0) denied_with_retry++;

            /* Apply to the log, to a replica, and to the model. */
            expect_status(fg_slog_apply(&log, &e, &alloc), FG_OK);
            expect_status(fg_slog_apply(&replica, &e, &alloc), FG_OK);
            if (e.count > 0) {
                int keep = 0;
                for (int i = 0; i < m.n; i++)
                    if (m.ts[i] > e.drop_through_us) m.ts[keep++] = m.ts[i];
                m.n = keep;
                for (int64_t i = 0; i < e.count; i++) m.ts[m.n++] = e.at_us;
            }
            expect_log(&log, m.ts, (uint32_t)m.n);
            expect_log(&replica, m.ts, (uint32_t)m.n);
            if (m.n > 0) {
                int64_t newest = m.ts[m.n - 1];
                bool any_counted = model_counted(&m, now, p.window_us) > 0;
                expect_i64(d.reset_after_ns, any_counted ? (newest + p.window_us - now) * US : 0);
            } else {
                expect_i64(d.reset_after_ns, 0);
            }
        }
        fg_slog_free(&log, &alloc);
        fg_slog_free(&replica, &alloc);
    }
    assert_true(denied_with_retry > 1000);
}

#define slog_test(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        slog_test(test_first_request_on_empty_log),
        slog_test(test_fills_up_then_waits_for_the_oldest),
        slog_test(test_retry_waits_for_as_many_entries_as_needed),
        slog_test(test_entries_with_the_same_stamp),
        slog_test(test_cost_equal_to_limit),
        slog_test(test_cost_larger_than_limit_never_fits),
        slog_test(test_cost_zero_peeks_without_an_effect),
        slog_test(test_cost_zero_on_a_full_log),
        slog_test(test_boundary_just_before_at_and_after),
        slog_test(test_no_burst_across_any_boundary),
        slog_test(test_one_microsecond_window),
        slog_test(test_time_zero),
        slog_test(test_clock_back_entries_still_count),
        slog_test(test_log_above_a_lowered_limit),
        slog_test(test_largest_limit),
        slog_test(test_growth_one_unit_at_a_time_up_to_the_maximum),
        slog_test(test_overflowing_times),
        slog_test(test_huge_window),
        slog_test(test_invalid_params),
        slog_test(test_malformed_logs_are_refused),
        slog_test(test_apply_drops_through_the_given_time),
        slog_test(test_apply_refuses_an_older_stamp),
        slog_test(test_apply_refuses_bad_effects),
        slog_test(test_allocation_failure_leaves_the_log_unchanged),
        slog_test(test_ring_wraps_around),
        slog_test(test_growth_of_a_wrapped_ring_keeps_the_order),
        slog_test(test_shrinks_when_mostly_empty),
        slog_test(test_shrink_of_a_wrapped_ring),
        slog_test(test_keeps_its_memory_while_a_quarter_full),
        slog_test(test_an_emptied_log_gives_its_memory_back),
        slog_test(test_expires_when_the_newest_leaves),
        slog_test(test_expiry_matches_reset_after),
        slog_test(test_free_releases_and_zeroes),
        slog_test(test_matches_a_model_under_random_traffic),
    };
    return cmocka_run_group_tests_name("sliding_log", tests, NULL, NULL);
}
