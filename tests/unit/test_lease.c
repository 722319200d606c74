/*
 * test_lease.c - the lease table's claims and resets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "remote/lease.h"

#define NOW 1700000000000000LL

/* Regression: a lease asked for before a reset, and installed after it,
 * served units on top of a bucket the server had just reset. */
static void test_a_reset_during_a_claim_installs_nothing(void **state) {
    (void)state;
    fg_lease_table *t = fg_lease_table_new();
    fg_limit l = fg_token_bucket(100, 10);
    fg_lease old[FG_LEASE_RETURNS];
    fg_result out;
    size_t nold, slot;
    assert_int_equal(fg_lease_take(t, "k", &l, 1, NOW, &out, old, &nold, &slot),
                     FG_LEASE_CLAIMED);
    fg_lease_forget(t, "k"); /* fg_reset while the lease request is in flight */
    fg_lease mine = {.limit = l, .size = 20, .units = 19, .taken_us = NOW, .reset_ms = 2000};
    fg_lease_install(t, slot, "k", &mine, NOW + 5000);
    /* No lease: the next check claims again instead of being served. */
    assert_int_equal(fg_lease_take(t, "k", &l, 1, NOW + 1, &out, old, &nold, &slot),
                     FG_LEASE_CLAIMED);
    fg_lease_install(t, slot, "k", &mine, NOW + 5000);
    /* Without a reset in between, the lease serves. */
    assert_int_equal(fg_lease_take(t, "k", &l, 1, NOW + 2, &out, old, &nold, &slot),
                     FG_LEASE_HIT);
    fg_lease_table_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_reset_during_a_claim_installs_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
