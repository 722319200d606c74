/*
 * test_limiter.c - the families behind one call (core/limiter.c): each
 * decides as its own algorithm does, and says to store only what an
 * admitted request with a cost changed, with the instant the stored state
 * is empty again.
 */
#include "test_util.h"

#include <string.h>

#include "limiter.h"

#define T0 T2024_US
#define SEC_US 1000000LL

static fg_limiter_params params(fg_limiter_family f) {
    fg_limiter_params p;
    memset(&p, 0, sizeof(p));
    switch (f) {
    case FG_LIMITER_BUCKET: p.bucket = (fg_gcra_params){SEC, 2}; break; /* 1/s, burst 2 */
    case FG_LIMITER_FIXED: p.fixed = (fg_fixed_params){2, 10 * SEC_US}; break;
    case FG_LIMITER_SLIDING: p.sliding = (fg_sliding_params){2, 10 * SEC_US}; break;
    case FG_LIMITER_SLIDELOG: p.slidelog = (fg_slog_params){2, 10 * SEC_US}; break;
    }
    return p;
}

static fg_limiter_next decide(fg_limiter_family f, const fg_limiter_state *cur, int64_t now,
                              int64_t cost, fg_decision *d) {
    fg_limiter_params p = params(f);
    fg_limiter_next n;
    memset(&n, 0x5A, sizeof(n));
    expect_status(fg_limiter_decide(f, cur, &p, now, cost, d, &n), FG_OK);
    return n;
}

/* The first admitted request of every family is stored, empty when its
 * own expiry rule says; peeks (cost 0) and denials store nothing. */
static void test_each_family_stores_an_admitted_request(void **state) {
    (void)state;
    fg_decision d;
    fg_limiter_next n = decide(FG_LIMITER_BUCKET, NULL, T0, 1, &d);
    assert_true(d.allowed && n.store);
    expect_i64(n.st.tat_ns, T0 * 1000 + SEC);
    expect_i64(n.empty_at_us, fg_gcra_expires_at_us(n.st.tat_ns));

    n = decide(FG_LIMITER_FIXED, NULL, T0, 1, &d);
    assert_true(d.allowed && n.store);
    expect_i64(n.st.fixed.count, 1);
    fg_limiter_params p = params(FG_LIMITER_FIXED);
    expect_i64(n.empty_at_us, fg_fixed_expires_at_us(&n.st.fixed, &p.fixed));

    n = decide(FG_LIMITER_SLIDING, NULL, T0, 1, &d);
    assert_true(d.allowed && n.store);
    expect_i64(n.st.sliding.count, 1);
    p = params(FG_LIMITER_SLIDING);
    expect_i64(n.empty_at_us, fg_sliding_expires_at_us(&n.st.sliding, &p.sliding));

    n = decide(FG_LIMITER_SLIDELOG, NULL, T0, 2, &d);
    assert_true(d.allowed && n.store);
    expect_i64(n.effect.at_us, T0);
    expect_i64(n.effect.count, 2);
    expect_i64(n.empty_at_us, T0 + 10 * SEC_US);

    for (int f = 0; f < FG_LIMITER_FAMILIES; f++) {
        n = decide((fg_limiter_family)f, NULL, T0, 0, &d);
        assert_true(d.allowed);
        assert_false(n.store);
        n = decide((fg_limiter_family)f, NULL, T0, 3, &d); /* over the limit of 2 */
        assert_false(d.allowed);
        assert_false(n.store);
    }
}

/* The stored state is what is decided on, and a denial keeps it. */
static void test_the_stored_state_decides(void **state) {
    (void)state;
    fg_decision d;
    fg_limiter_state s;
    memset(&s, 0, sizeof(s));
    s.fixed = (fg_fixed_state){T0, 2};
    fg_limiter_next n = decide(FG_LIMITER_FIXED, &s, T0 + SEC_US, 1, &d);
    assert_false(d.allowed);
    assert_false(n.store);
    n = decide(FG_LIMITER_FIXED, &s, T0 + 10 * SEC_US, 1, &d); /* the next window */
    assert_true(d.allowed && n.store);
    expect_i64(n.st.fixed.window_start_us, T0 + 10 * SEC_US);
    expect_i64(n.st.fixed.count, 1);

    int64_t ts[2] = {T0, T0 + SEC_US};
    memset(&s, 0, sizeof(s));
    s.slidelog = (fg_slog){ts, 0, 2, 2};
    n = decide(FG_LIMITER_SLIDELOG, &s, T0 + 5 * SEC_US, 1, &d);
    assert_false(d.allowed);
    n = decide(FG_LIMITER_SLIDELOG, &s, T0 + 10 * SEC_US, 1, &d); /* the first left */
    assert_true(d.allowed && n.store);
    expect_i64(n.effect.drop_through_us, T0);
    expect_i64(n.empty_at_us, T0 + 20 * SEC_US);
}

/* Errors are the algorithms' own, and leave nothing to store. */
static void test_errors_store_nothing(void **state) {
    (void)state;
    fg_decision d;
    fg_limiter_params p = params(FG_LIMITER_FIXED);
    p.fixed.limit = 0;
    fg_limiter_next n;
    n.store = true;
    expect_status(fg_limiter_decide(FG_LIMITER_FIXED, NULL, &p, T0, 1, &d, &n), FG_EINVAL);
    assert_false(n.store);
    p = params(FG_LIMITER_BUCKET);
    n.store = true;
    expect_status(fg_limiter_decide(FG_LIMITER_BUCKET, NULL, &p, T0, -1, &d, &n), FG_EINVAL);
    assert_false(n.store);
    n.store = true;
    expect_status(fg_limiter_decide((fg_limiter_family)FG_LIMITER_FAMILIES, NULL, &p, T0, 1, &d, &n),
                  FG_EINVAL);
    assert_false(n.store);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_family_stores_an_admitted_request),
        cmocka_unit_test(test_the_stored_state_decides),
        cmocka_unit_test(test_errors_store_nothing),
    };
    return cmocka_run_group_tests_name("limiter", tests, NULL, NULL);
}
