/*
 * test_policy_check.c - the steps of a policy check (core/policy_check.c)
 * with exact values: the deny list before the allow list before the state,
 * the answer of each, counting, whether a request waits (its limits' retry
 * within the timeout; no overtaking), whether a head waits on, and the
 * yield of a waiter behind others at its deadline.
 */
#include "test_util.h"

#include <string.h>

#include "policy_check.h"

#define SEC_US 1000000LL
#define T0     T2024_US

/* 2 requests, one more every second (a token bucket). */
static fg_policy_rules two_per_second(void) {
    fg_policy_rules r;
    memset(&r, 0, sizeof(r));
    r.nlimits = 1;
    r.limits[0].algorithm = FG_POLICY_TOKEN;
    r.limits[0].p.bucket = (fg_gcra_params){1000000000LL, 2};
    return r;
}

static void test_lists_come_first(void **state) {
    (void)state;
    fg_policy_eval c;
    fg_policy_answer a;
    fg_policy_counters n = {0};
    assert_true(fg_policy_check_lists(&c, T0, 1, true, true)); /* deny wins */
    assert_false(fg_policy_check_allowed(&c));
    assert_false(fg_policy_check_writes(&c));
    fg_policy_check_answer(&c, &a);
    assert_int_equal(a.decided_by, FG_CHECK_DENYLIST);
    assert_int_equal(a.retry_after_ms, -1);
    assert_int_equal(a.limit, 0);
    fg_policy_check_count(&c, &n);
    assert_true(fg_policy_check_lists(&c, T0, 1, false, true));
    fg_policy_check_answer(&c, &a);
    assert_true(a.allowed);
    assert_int_equal(a.decided_by, FG_CHECK_ALLOWLIST);
    fg_policy_check_count(&c, &n);
    assert_int_equal(n.allowed, 1);
    assert_int_equal(n.denied, 1);
    int64_t first;
    assert_false(fg_policy_check_waits(&c, true, 1000, &first)); /* a list never waits */
    assert_false(fg_policy_check_lists(&c, T0, 1, false, false));
}

static void test_state_decides_and_counts(void **state) {
    (void)state;
    fg_policy_rules rules = two_per_second();
    fg_policy_eval c;
    fg_policy_answer a;
    fg_policy_counters n = {0};
    fg_policy_state s;
    assert_false(fg_policy_check_lists(&c, T0, 2, false, false));
    assert_int_equal(fg_policy_check_state(&c, &rules, NULL), FG_OK);
    assert_true(fg_policy_check_allowed(&c));
    assert_true(fg_policy_check_writes(&c));
    assert_int_equal(fg_policy_check_neutral_at(&c), T0 + 2 * SEC_US);
    fg_policy_check_answer(&c, &a);
    assert_int_equal(a.decided_by, FG_CHECK_LIMIT);
    assert_int_equal(a.limit_index, 0);
    assert_int_equal(a.remaining, 0);
    assert_int_equal(a.reset_after_ms, 2000);
    s = c.next;
    /* The bucket is empty: one more waits a second. */
    fg_policy_check_lists(&c, T0, 1, false, false);
    assert_int_equal(fg_policy_check_state(&c, &rules, &s), FG_OK);
    assert_false(fg_policy_check_allowed(&c));
    fg_policy_check_answer(&c, &a);
    assert_int_equal(a.retry_after_ms, 1000);
    fg_policy_check_count(&c, &n);
    assert_int_equal(n.denied, 1);
    /* A peek changes nothing and is not stored. */
    fg_policy_check_lists(&c, T0, 0, false, false);
    assert_int_equal(fg_policy_check_state(&c, &rules, &s), FG_OK);
    assert_false(fg_policy_check_writes(&c));
}

static void test_waiting(void **state) {
    (void)state;
    fg_policy_rules rules = two_per_second();
    fg_policy_eval c;
    fg_policy_state s;
    int64_t first, wake;
    fg_policy_check_lists(&c, T0, 2, false, false);
    fg_policy_check_state(&c, &rules, NULL);
    s = c.next;
    /* Allowed and alone: no wait; allowed with others ahead: it waits
     * behind them, from now. */
    fg_policy_check_lists(&c, T0 + 3 * SEC_US, 1, false, false);
    fg_policy_check_state(&c, &rules, &s);
    assert_false(fg_policy_check_waits(&c, false, 1000, &first));
    assert_true(fg_policy_check_waits(&c, true, 1000, &first));
    assert_int_equal(first, T0 + 3 * SEC_US);
    /* Denied: waits when the retry (1 s) is within the timeout. */
    fg_policy_check_lists(&c, T0, 1, false, false);
    fg_policy_check_state(&c, &rules, &s);
    assert_false(fg_policy_check_waits(&c, false, 999, &first));
    assert_true(fg_policy_check_waits(&c, false, 1000, &first));
    assert_int_equal(first, T0 + SEC_US);
    assert_true(fg_policy_check_waits_on(&c, T0 + SEC_US, &wake));
    assert_int_equal(wake, T0 + SEC_US);
    assert_false(fg_policy_check_waits_on(&c, T0 + SEC_US - 1, &wake));
    /* A cost beyond the capacity can never fit: it never waits. */
    fg_policy_check_lists(&c, T0, 3, false, false);
    fg_policy_check_state(&c, &rules, &s);
    assert_false(fg_policy_check_waits(&c, false, 100000, &first));
}

static void test_yield_at_deadline(void **state) {
    (void)state;
    fg_policy_rules rules = two_per_second();
    fg_policy_eval c;
    fg_policy_answer a;
    fg_policy_counters n = {0};
    fg_policy_check_lists(&c, T0, 1, false, false);
    fg_policy_check_state(&c, &rules, NULL);
    /* Would fit: at the head it is settled as it stands; behind others it
     * yields, denied with retry 0 and counted as a denial. */
    assert_false(fg_policy_check_yield(&c, true, &a, &n));
    assert_true(fg_policy_check_yield(&c, false, &a, &n));
    assert_false(a.allowed);
    assert_int_equal(a.retry_after_ms, 0);
    assert_int_equal(a.remaining, 1);
    assert_int_equal(n.denied, 1);
    assert_int_equal(n.allowed, 0);
    /* A peek takes nothing: it does not yield. */
    fg_policy_check_lists(&c, T0, 0, false, false);
    fg_policy_check_state(&c, &rules, NULL);
    assert_false(fg_policy_check_yield(&c, false, &a, &n));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_come_first),
        cmocka_unit_test(test_state_decides_and_counts),
        cmocka_unit_test(test_waiting),
        cmocka_unit_test(test_yield_at_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
