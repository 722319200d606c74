/*
 * test_sliding_window.c - the sliding window counter, against exact values.
 */
#include "test_util.h"

#include <string.h>

#include "sliding_window.h"

#define MINUTE_US 60000000LL

/* Decides and stores the new state, as the binding would. */
static fg_decision take(fg_sliding_state *s, int64_t limit, int64_t window_us,
                        int64_t now_us, int64_t cost) {
    fg_sliding_params p = {limit, window_us};
    fg_decision d;
    fg_sliding_state next = {-1, -1, -1};
    expect_status(fg_sliding_decide(s, &p, now_us, cost, &d, &next), FG_OK);
    expect_sane(&d);
    if (!d.allowed || cost == 0) {
        expect_i64(next.window_start_us, s->window_start_us);
        expect_i64(next.count, s->count);
        expect_i64(next.prev_count, s->prev_count);
    }
    *s = next;
    return d;
}

#define expect_state(s, start, count_, prev_)     \
    do {                                          \
        expect_i64((s).window_start_us, (start)); \
        expect_i64((s).count, (count_));          \
        expect_i64((s).prev_count, (prev_));      \
    } while (0)

/* ------------------------------------------------------ empty and full */

static void test_first_request_on_empty_state(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 15000000, 1);
    /* The unit weighs until the end of the next window. */
    expect_decision(d, true, 10, 9, -1, 105 * SEC);
    expect_state(s, T2024_US, 1, 0);
}

static void test_fills_up_within_one_window(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    const int64_t now = T2024_US + 15000000;
    for (int64_t i = 1; i <= 10; i++)
        expect_decision(take(&s, 10, MINUTE_US, now, 1), true, 10, 10 - i, -1, 105 * SEC);
    /* Full: the 10 units only stop counting entirely in the next window,
     * after 45 s + 60 s; the request fits once they weigh 9 units, at
     * 10 * (60 - e) <= 9 * 60, e = 6 s into the next window. */
    expect_decision(take(&s, 10, MINUTE_US, now, 1), false, 10, 0, 51 * SEC, 105 * SEC);
    expect_state(s, T2024_US, 10, 0);
}

static void test_cost_equal_to_limit(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    expect_decision(take(&s, 10, MINUTE_US, T2024_US, 10), true, 10, 0, -1, 120 * SEC);
    expect_state(s, T2024_US, 10, 0);
}

static void test_cost_larger_than_limit_never_fits(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    expect_decision(take(&s, 10, MINUTE_US, T2024_US, 11), false, 10, 10, -1, 0);
    s = (fg_sliding_state){T2024_US, 2, 0};
    expect_decision(take(&s, 10, MINUTE_US, T2024_US, INT64_MAX), false, 10, 8, -1,
                    120 * SEC);
    expect_state(s, T2024_US, 2, 0);
}

/* ---------------------------------------------------------- cost 0 */

static void test_cost_zero_on_empty_state(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 3, 0), true, 10, 10, -1, 0);
    expect_state(s, 0, 0, 0);
}

static void test_cost_zero_peeks_without_writing(void **state) {
    (void)state;
    /* Rolled at now: prev = 4, count = 0; prev weighs 4 * 30/60 = 2. */
    fg_sliding_state s = {T2024_US - MINUTE_US, 4, 9};
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 30000000, 0), true, 10, 8, -1,
                    30 * SEC);
    expect_state(s, T2024_US - MINUTE_US, 4, 9);
}

/* ------------------------------------------------------ the estimate */

static void test_previous_window_weighs_by_overlap(void **state) {
    (void)state;
    /* 15 s into the window after a full one: prev weighs 10 * 45/60 = 7.5. */
    fg_sliding_state s = {T2024_US, 10, 0};
    const int64_t now = T2024_US + MINUTE_US + 15000000;
    fg_decision d = take(&s, 10, MINUTE_US, now, 3);
    /* 7.5 + 3 > 10. It fits when 10 * (60 - e) <= 7 * 60: e = 18 s. */
    expect_decision(d, false, 10, 2, 3 * SEC, 45 * SEC);
    expect_state(s, T2024_US, 10, 0);

    expect_decision(take(&s, 10, MINUTE_US, now + 3000000 - 1, 3), false, 10, 2, 1 * US,
                    45 * SEC - 3 * SEC + 1 * US);
    d = take(&s, 10, MINUTE_US, now + 3000000, 3);
    /* 10 * 42/60 = 7 plus 3: exactly the limit. */
    expect_decision(d, true, 10, 0, -1, 102 * SEC);
    expect_state(s, T2024_US + MINUTE_US, 3, 10);
}

static void test_remaining_rounds_down(void **state) {
    (void)state;
    fg_sliding_state s = {T2024_US, 10, 0};
    /* prev weighs 7.5: 2.5 units left, 2 whole ones; a cost of 2 fits and
     * leaves half a unit, which is 0. */
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + MINUTE_US + 15000000, 2);
    expect_decision(d, true, 10, 0, -1, 105 * SEC);
    expect_state(s, T2024_US + MINUTE_US, 2, 10);
}

static void test_retry_in_the_next_window(void **state) {
    (void)state;
    /* 30 s in: 4 * 30/60 + 6 = 8. A cost of 5 cannot fit this window
     * (6 + 5 > 10); next window prev = 6 weighs 6 * (60 - e)/60 <= 5 at
     * e = 10 s: 30 s + 10 s from now. */
    fg_sliding_state s = {T2024_US, 6, 4};
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 30000000, 5);
    expect_decision(d, false, 10, 2, 40 * SEC, 90 * SEC);
    /* 1 us early: prev weighs a hair over 5, so 4 whole units are left. */
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 70000000 - 1, 5), false, 10, 4, 1 * US,
                    50 * SEC + 1 * US);
    d = take(&s, 10, MINUTE_US, T2024_US + 70000000, 5);
    expect_decision(d, true, 10, 0, -1, 110 * SEC);
    expect_state(s, T2024_US + MINUTE_US, 5, 6);
}

static void test_retry_for_the_whole_limit_waits_two_windows(void **state) {
    (void)state;
    /* Any unit in the current window weighs something until the end of the
     * next one, so a cost equal to the limit waits for that. */
    fg_sliding_state s = {T2024_US, 3, 0};
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 10000000, 10);
    expect_decision(d, false, 10, 7, 110 * SEC, 110 * SEC);
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 120000000 - 1, 10), false, 10, 9,
                    1 * US, 1 * US);
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 120000000, 10), true, 10, 0, -1,
                    120 * SEC);
}

static void test_retry_when_only_prev_weighs(void **state) {
    (void)state;
    fg_sliding_state s = {T2024_US - MINUTE_US, 10, 0};
    /* At the very start of a window prev weighs all 10: 1 fits at
     * 10 * (60 - e) <= 9 * 60, e = 6 s. */
    expect_decision(take(&s, 10, MINUTE_US, T2024_US, 1), false, 10, 0, 6 * SEC, 60 * SEC);
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 6000000, 1), true, 10, 0, -1,
                    114 * SEC);
}

static void test_retry_is_rounded_up_to_the_microsecond(void **state) {
    (void)state;
    /* W = 10 us, prev 7: a cost of 4 needs 7 * (10 - e) <= 60, so
     * 10 - e <= 8.57.., e >= 1.43.., i.e. 2 us. */
    fg_sliding_state s = {0, 7, 0};
    expect_decision(take(&s, 10, 10, 10, 4), false, 10, 3, 2 * US, 10 * US);
    expect_decision(take(&s, 10, 10, 11, 4), false, 10, 3, 1 * US, 9 * US);
    expect_decision(take(&s, 10, 10, 12, 4), true, 10, 0, -1, 18 * US);
    expect_state(s, 10, 4, 7);
}

/* -------------------------------------------------- window boundaries */

static void test_boundary_just_before_at_and_after(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    const int64_t end = T2024_US + MINUTE_US;
    take(&s, 10, MINUTE_US, T2024_US, 10);

    /* Just before the end: all 10 in the current window. */
    expect_decision(take(&s, 10, MINUTE_US, end - 1, 1), false, 10, 0, 6 * SEC + 1 * US,
                    60 * SEC + 1 * US);
    /* At the end: the 10 became prev and weigh 10 exactly. */
    expect_decision(take(&s, 10, MINUTE_US, end, 0), true, 10, 0, -1, 60 * SEC);
    expect_decision(take(&s, 10, MINUTE_US, end, 1), false, 10, 0, 6 * SEC, 60 * SEC);
    /* One microsecond later prev weighs a little less than 10: still 0. */
    expect_decision(take(&s, 10, MINUTE_US, end + 1, 0), true, 10, 0, -1,
                    60 * SEC - 1 * US);
    /* No burst of twice the limit across the boundary. */
    expect_decision(take(&s, 10, MINUTE_US, end + 6000000, 1), true, 10, 0, -1,
                    114 * SEC);
}

static void test_rolls_over_to_prev_and_then_expires(void **state) {
    (void)state;
    fg_sliding_state s = {T2024_US, 4, 6};
    /* Next window: prev = 4, count = 0. */
    take(&s, 10, MINUTE_US, T2024_US + MINUTE_US, 1);
    expect_state(s, T2024_US + MINUTE_US, 1, 4);
    /* Two windows later neither counts. */
    take(&s, 10, MINUTE_US, T2024_US + 3 * MINUTE_US, 1);
    expect_state(s, T2024_US + 3 * MINUTE_US, 1, 0);
    /* Skipping many windows at once, too. */
    take(&s, 10, MINUTE_US, T2024_US + 50 * MINUTE_US + 7, 2);
    expect_state(s, T2024_US + 50 * MINUTE_US, 2, 0);
}

static void test_unaligned_stored_start_is_moved_to_the_grid(void **state) {
    (void)state;
    /* A key last used with another window length: its start is moved down
     * to the grid. Here that is the previous window: count becomes prev. */
    fg_sliding_state s = {T2024_US - MINUTE_US / 2, 4, 9};
    take(&s, 10, MINUTE_US, T2024_US + 1, 1);
    expect_state(s, T2024_US, 1, 4);
    /* Two windows back: stale. */
    s = (fg_sliding_state){T2024_US - MINUTE_US - 1, 4, 9};
    take(&s, 10, MINUTE_US, T2024_US + 1, 1);
    expect_state(s, T2024_US, 1, 0);
    /* The current window. */
    s = (fg_sliding_state){T2024_US + MINUTE_US / 2, 2, 3};
    take(&s, 10, MINUTE_US, T2024_US + 1, 1);
    expect_state(s, T2024_US, 3, 3);
    /* The next window: a clock step back, judged from its grid start. */
    s = (fg_sliding_state){T2024_US + MINUTE_US + 7, 5, 8};
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 30000000, 1);
    expect_decision(d, false, 10, 0, 60 * SEC, 150 * SEC);
    /* A negative start is simply old. */
    s = (fg_sliding_state){-5, 10, 10};
    expect_decision(take(&s, 10, MINUTE_US, T2024_US, 1), true, 10, 9, -1, 120 * SEC);
}

static void test_one_microsecond_windows(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    expect_decision(take(&s, 1, 1, 5, 1), true, 1, 0, -1, 2 * US);
    /* At 6 the unit is prev, at elapsed 0 it weighs fully; at 7 nothing. */
    expect_decision(take(&s, 1, 1, 5, 1), false, 1, 0, 2 * US, 2 * US);
    expect_decision(take(&s, 1, 1, 6, 1), false, 1, 0, 1 * US, 1 * US);
    expect_decision(take(&s, 1, 1, 7, 1), true, 1, 0, -1, 2 * US);
}

static void test_time_zero(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0};
    expect_decision(take(&s, 3, 10, 0, 1), true, 3, 2, -1, 20 * US);
    expect_state(s, 0, 1, 0);
}

/* ---------------------------------------------------- clock going back */

static void test_clock_back_judges_at_the_start_of_the_stored_window(void **state) {
    (void)state;
    const int64_t next_window = T2024_US + MINUTE_US;
    fg_sliding_state s = {next_window, 2, 4};
    /* prev weighs fully (elapsed 0): 4 + 2 + 1 <= 10. */
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 30000000, 1);
    expect_decision(d, true, 10, 3, -1, 150 * SEC);
    expect_state(s, next_window, 3, 4);
}

static void test_clock_back_retry_counts_from_the_stored_window(void **state) {
    (void)state;
    const int64_t next_window = T2024_US + MINUTE_US;
    fg_sliding_state s = {next_window, 5, 8};
    /* 8 + 5 > 10. 1 more fits when 8 * (60 - e) <= 4 * 60: e = 30 s into
     * the stored window, which starts 30 s from now. */
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 30000000, 1);
    expect_decision(d, false, 10, 0, 60 * SEC, 150 * SEC);
    expect_decision(take(&s, 10, MINUTE_US, next_window + 30000000 - 1, 1), false, 10, 0,
                    1 * US, 90 * SEC + 1 * US);
    expect_decision(take(&s, 10, MINUTE_US, next_window + 30000000, 1), true, 10, 0, -1,
                    90 * SEC);
}

static void test_clock_back_on_an_empty_state_is_fresh(void **state) {
    (void)state;
    fg_sliding_state s = {T2024_US + 9 * MINUTE_US, 0, 0};
    take(&s, 10, MINUTE_US, T2024_US + 1, 1);
    expect_state(s, T2024_US, 1, 0);
}

/* ------------------------------------------------------ odd states */

static void test_counts_above_a_lowered_limit(void **state) {
    (void)state;
    fg_sliding_state s = {T2024_US, 15, 20};
    fg_decision d = take(&s, 10, MINUTE_US, T2024_US + 30000000, 1);
    /* Next window: prev = 15 must weigh <= 9: 15 * (60 - e) <= 540,
     * e = 24 s, 30 s + 24 s from now. */
    expect_decision(d, false, 10, 0, 54 * SEC, 90 * SEC);
    /* Even a peek is refused: 15 must weigh <= 10, e = 20 s next window. */
    expect_decision(take(&s, 10, MINUTE_US, T2024_US + 30000000, 0), false, 10, 0, 50 * SEC,
                    90 * SEC);
}

/* ------------------------------------------------------- huge values */

static void test_largest_window_in_the_docs(void **state) {
    (void)state;
    const int64_t W = 1000000000000000LL; /* 10^12 ms */
    fg_sliding_state s = {0, 0, 0};
    expect_decision(take(&s, 1, W, T2024_US, 1), true, 1, 0, -1, (3 * W - T2024_US) * US);
    expect_state(s, W, 1, 0);
}

static void test_huge_counts_do_not_overflow(void **state) {
    (void)state;
    const int64_t W = 1000000000000000LL;
    fg_sliding_state s = {W, INT64_MAX, INT64_MAX};
    fg_decision d = take(&s, INT64_MAX, W, T2024_US, 1);
    expect_i64(d.allowed, false);
    expect_i64(d.remaining, 0);

    s = (fg_sliding_state){W, INT64_MAX - 5, 0};
    d = take(&s, INT64_MAX, W, T2024_US, 5);
    expect_decision(d, true, INT64_MAX, 0, -1, (3 * W - T2024_US) * US);
    expect_state(s, W, INT64_MAX, 0);

    /* At the start of a window prev = INT64_MAX weighs the whole limit;
     * 1 us later it weighs INT64_MAX * (W - 1) / W, room for one unit. */
    s = (fg_sliding_state){0, INT64_MAX, 0};
    d = take(&s, INT64_MAX, W, W, 1);
    expect_decision(d, false, INT64_MAX, 0, 1 * US, W * US);
    d = take(&s, INT64_MAX, W, W + 1, 1);
    expect_decision(d, true, INT64_MAX, (INT64_MAX - W) / W, -1, (2 * W - 1) * US);
    expect_state(s, W, 1, INT64_MAX);
}

static void test_overflowing_times(void **state) {
    (void)state;
    fg_sliding_params p = {10, INT64_MAX / 2};
    fg_sliding_state s = {0, 0, 0}, next;
    fg_decision d = {true, 1, 2, 3, 4};
    /* The unit would weigh until 2 * W: past the end of time. */
    expect_status(fg_sliding_decide(&s, &p, T2024_US, 1, &d, &next), FG_EOVERFLOW);
    /* A peek on an empty state needs no time arithmetic. */
    expect_status(fg_sliding_decide(&s, &p, T2024_US, 0, &d, &next), FG_OK);
    expect_decision(d, true, 10, 10, -1, 0);
    d = (fg_decision){true, 1, 2, 3, 4};
    p = (fg_sliding_params){10, 1000};
    expect_status(fg_sliding_decide(&s, &p, INT64_MAX - 1, 1, &d, &next), FG_EOVERFLOW);
    s = (fg_sliding_state){INT64_MAX / 2, 10, 0};
    expect_status(fg_sliding_decide(&s, &p, T2024_US, 1, &d, &next), FG_EOVERFLOW);
    expect_decision(d, true, 1, 2, 3, 4);
}

/* ------------------------------------------------------ invalid input */

static void test_invalid_params(void **state) {
    (void)state;
    fg_sliding_state s = {0, 0, 0}, next;
    fg_decision d;
    fg_sliding_params bad[] = {{0, 10}, {-1, 10}, {INT64_MIN, 10}, {10, 0}, {10, -1},
                               {10, INT64_MIN}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_status(fg_sliding_decide(&s, &bad[i], T2024_US, 1, &d, &next), FG_EINVAL);

    fg_sliding_params p = {10, MINUTE_US};
    expect_status(fg_sliding_decide(&s, &p, T2024_US, -1, &d, &next), FG_EINVAL);
    expect_status(fg_sliding_decide(&s, &p, -1, 1, &d, &next), FG_EINVAL);
    expect_status(fg_sliding_decide(&s, NULL, T2024_US, 1, &d, &next), FG_EINVAL);
    expect_status(fg_sliding_decide(NULL, &p, T2024_US, 1, &d, &next), FG_EINVAL);
    s.count = -1;
    expect_status(fg_sliding_decide(&s, &p, T2024_US, 1, &d, &next), FG_EINVAL);
    s = (fg_sliding_state){0, 0, -1};
    expect_status(fg_sliding_decide(&s, &p, T2024_US, 1, &d, &next), FG_EINVAL);
    s = (fg_sliding_state){0, 0, 0};
    p = (fg_sliding_params){1, 1};
    expect_status(fg_sliding_decide(&s, &p, 0, 1, &d, &next), FG_OK);
    expect_decision(d, true, 1, 0, -1, 2 * US);
}

/* ------------------------------------------------------------ expiry */

static void test_expires_after_the_last_window_that_weighs(void **state) {
    (void)state;
    fg_sliding_params p = {10, MINUTE_US};
    fg_sliding_state s = {T2024_US, 3, 5};
    expect_i64(fg_sliding_expires_at_us(&s, &p), T2024_US + 2 * MINUTE_US);
    s.count = 0;
    expect_i64(fg_sliding_expires_at_us(&s, &p), T2024_US + MINUTE_US);
    s.count = 1;
    p.window_us = INT64_MAX / 2 + 1;
    expect_i64(fg_sliding_expires_at_us(&s, &p), INT64_MAX);
    p.window_us = INT64_MAX;
    expect_i64(fg_sliding_expires_at_us(&s, &p), INT64_MAX);
}

static void test_expiry_matches_reset_after(void **state) {
    (void)state;
    fg_sliding_params p = {10, MINUTE_US};
    fg_sliding_state s = {0, 0, 0};
    const int64_t now = T2024_US + 1234567;
    fg_decision d = take(&s, 10, MINUTE_US, now, 2);
    expect_i64(fg_sliding_expires_at_us(&s, &p), now + d.reset_after_ns / US);
}

/* ----------------------------------------- properties, many cases */

static bool allows(const fg_sliding_state *s, const fg_sliding_params *p, int64_t now,
                   int64_t cost) {
    fg_decision e;
    fg_sliding_state ignored;
    expect_status(fg_sliding_decide(s, p, now, cost, &e, &ignored), FG_OK);
    return e.allowed;
}

static int64_t remaining_at(const fg_sliding_state *s, const fg_sliding_params *p,
                            int64_t now) {
    fg_decision e;
    fg_sliding_state ignored;
    expect_status(fg_sliding_decide(s, p, now, 0, &e, &ignored), FG_OK);
    return e.remaining;
}

/* retry_after and reset_after are exact to the microsecond, and remaining
 * is exactly the largest cost that would fit now. */
static void check_answer(const fg_sliding_state *cur, const fg_sliding_params *p, int64_t now,
                         int64_t cost, const fg_decision *d, const fg_sliding_state *next) {
    expect_sane(d);
    if (!d->allowed && d->retry_after_ns >= 0) {
        int64_t wait = wait_us_for(d->retry_after_ns);
        expect_i64(wait * US, d->retry_after_ns);
        assert_true(allows(cur, p, now + wait, cost));
        assert_false(allows(cur, p, now + wait - 1, cost));
    }
    if (!d->allowed && d->retry_after_ns < 0) assert_true(cost > p->limit);

    int64_t full_at = now + wait_us_for(d->reset_after_ns);
    expect_i64(remaining_at(next, p, full_at), p->limit);
    if (d->reset_after_ns > 0) assert_true(remaining_at(next, p, full_at - 1) < p->limit);

    /* (After a clock step back the estimate can exceed the limit, and then
     * even a peek is refused: remaining is 0 and nothing fits.) */
    assert_false(allows(next, p, now, d->remaining + 1));
    if (d->remaining > 0) assert_true(allows(next, p, now, d->remaining));
}

static void test_answers_are_exact_under_random_traffic(void **state) {
    (void)state;
    test_rng rng = {31337};
    int denied_with_retry = 0;

    for (int scenario = 0; scenario < 300; scenario++) {
        fg_sliding_params p = {rng_range(&rng, 1, 30), rng_range(&rng, 1, 5000)};
        fg_sliding_state s = {0, 0, 0};
        int64_t now = T2024_US + rng_range(&rng, 0, 1000000);

        for (int step = 0; step < 80; step++) {
            int64_t r = rng_range(&rng, 0, 9);
            if (r < 6) now += rng_range(&rng, 0, p.window_us / 4 + 1);
            else if (r == 6) now -= rng_range(&rng, 0, p.window_us * 2); /* clock back */
            int64_t cost = rng_range(&rng, 0, 9) == 0 ? rng_range(&rng, 0, p.limit + 3)
                                                      : rng_range(&rng, 0, 2);
            fg_decision d;
            fg_sliding_state next;
            expect_status(fg_sliding_decide(&s, &p, now, cost, &d, &next), FG_OK);
            check_answer(&s, &p, now, cost, &d, &next);
            if (!d.allowed && d.retry_after_ns > 0) denied_with_retry++;
            s = next;
        }
    }
    assert_true(denied_with_retry > 1000);
}

/* The same properties from arbitrary stored states: any start (on the grid
 * or not, before or after now) and any counts. */
static void test_answers_are_exact_from_arbitrary_states(void **state) {
    (void)state;
    test_rng rng = {8080};
    for (int i = 0; i < 20000; i++) {
        fg_sliding_params p = {rng_range(&rng, 1, 20), rng_range(&rng, 1, 1000)};
        int64_t now = rng_range(&rng, 0, 100000);
        fg_sliding_state s = {now + rng_range(&rng, -3 * p.window_us, 3 * p.window_us),
                              rng_range(&rng, 0, p.limit + 2), rng_range(&rng, 0, p.limit + 2)};
        int64_t cost = rng_range(&rng, 0, p.limit + 1);
        fg_decision d;
        fg_sliding_state next;
        expect_status(fg_sliding_decide(&s, &p, now, cost, &d, &next), FG_OK);
        check_answer(&s, &p, now, cost, &d, &next);
    }
}

/* An independent model for a clock that only moves forward: counts kept
 * per window index, the estimate in exact rational arithmetic, and the
 * retry found by trying every later microsecond. */
#define MODEL_WINDOWS 4096

static bool model_allows(const int64_t *counts, int64_t limit, int64_t W, int64_t now,
                         int64_t cost) {
    int64_t idx = now / W, elapsed = now % W;
    int64_t prev = idx > 0 ? counts[idx - 1] : 0;
    return prev * (W - elapsed) + (counts[idx] + cost) * W <= limit * W;
}

static void test_matches_a_per_window_model(void **state) {
    (void)state;
    static int64_t counts[MODEL_WINDOWS];
    test_rng rng = {2718};
    for (int scenario = 0; scenario < 200; scenario++) {
        fg_sliding_params p = {rng_range(&rng, 1, 20), rng_range(&rng, 1, 40)};
        fg_sliding_state s = {0, 0, 0};
        int64_t now = rng_range(&rng, 0, 100);
        memset(counts, 0, sizeof(counts));

        for (int step = 0; step < 200; step++) {
            now += rng_range(&rng, 0, p.window_us / 3 + 1);
            if (now / p.window_us + 3 >= MODEL_WINDOWS) break;
            int64_t cost = rng_range(&rng, 0, p.limit / 2 + 1);
            bool allowed = model_allows(counts, p.limit, p.window_us, now, cost);

            fg_decision d;
            fg_sliding_state next;
            expect_status(fg_sliding_decide(&s, &p, now, cost, &d, &next), FG_OK);
            expect_i64(d.allowed, allowed);
            if (!allowed && cost <= p.limit) {
                int64_t t = 1;
                while (!model_allows(counts, p.limit, p.window_us, now + t, cost)) t++;
                expect_i64(d.retry_after_ns, t * US);
            }
            if (allowed) counts[now / p.window_us] += cost;
            s = next;
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_request_on_empty_state),
        cmocka_unit_test(test_fills_up_within_one_window),
        cmocka_unit_test(test_cost_equal_to_limit),
        cmocka_unit_test(test_cost_larger_than_limit_never_fits),
        cmocka_unit_test(test_cost_zero_on_empty_state),
        cmocka_unit_test(test_cost_zero_peeks_without_writing),
        cmocka_unit_test(test_previous_window_weighs_by_overlap),
        cmocka_unit_test(test_remaining_rounds_down),
        cmocka_unit_test(test_retry_in_the_next_window),
        cmocka_unit_test(test_retry_for_the_whole_limit_waits_two_windows),
        cmocka_unit_test(test_retry_when_only_prev_weighs),
        cmocka_unit_test(test_retry_is_rounded_up_to_the_microsecond),
        cmocka_unit_test(test_boundary_just_before_at_and_after),
        cmocka_unit_test(test_rolls_over_to_prev_and_then_expires),
        cmocka_unit_test(test_unaligned_stored_start_is_moved_to_the_grid),
        cmocka_unit_test(test_one_microsecond_windows),
        cmocka_unit_test(test_time_zero),
        cmocka_unit_test(test_clock_back_judges_at_the_start_of_the_stored_window),
        cmocka_unit_test(test_clock_back_retry_counts_from_the_stored_window),
        cmocka_unit_test(test_clock_back_on_an_empty_state_is_fresh),
        cmocka_unit_test(test_counts_above_a_lowered_limit),
        cmocka_unit_test(test_largest_window_in_the_docs),
        cmocka_unit_test(test_huge_counts_do_not_overflow),
        cmocka_unit_test(test_overflowing_times),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_expires_after_the_last_window_that_weighs),
        cmocka_unit_test(test_expiry_matches_reset_after),
        cmocka_unit_test(test_answers_are_exact_under_random_traffic),
        cmocka_unit_test(test_answers_are_exact_from_arbitrary_states),
        cmocka_unit_test(test_matches_a_per_window_model),
    };
    return cmocka_run_group_tests_name("sliding_window", tests, NULL, NULL);
}
