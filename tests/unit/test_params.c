/*
 * test_params.c - the shared ranges and conversions of the commands' numbers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "params.h"

static char msg[160];

static void test_buckets_round_to_the_nearest_nanosecond(void **state) {
    (void)state;
    fg_gcra_params p;
    assert_true(fg_param_bucket(10, 3, "rate", &p, msg, sizeof(msg)));
    assert_int_equal(p.emission_ns, 333333333);
    assert_int_equal(p.capacity, 10);
    assert_true(fg_param_bucket(1, 1.5, "rate", &p, msg, sizeof(msg)));
    assert_int_equal(p.emission_ns, 666666667);
    assert_true(fg_param_bucket(1, 1e9, "rate", &p, msg, sizeof(msg)));
    assert_int_equal(p.emission_ns, 1);
    assert_true(fg_param_bucket(1, 0.001, "rate", &p, msg, sizeof(msg)));
    assert_int_equal(p.emission_ns, 1000000000000);
}

static void test_gcra_interval(void **state) {
    (void)state;
    fg_gcra_params p;
    assert_true(fg_param_gcra(5, 1, 0.0104, &p, msg, sizeof(msg)));
    assert_int_equal(p.emission_ns, 10400);
    assert_true(fg_param_gcra(5, 3, 0.0104, &p, msg, sizeof(msg)));
    assert_int_equal(p.emission_ns, 3467);
    assert_false(fg_param_gcra(1, 1000, 0.0001, &p, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "rate too high"));
    assert_false(fg_param_gcra(1, 0.001, 1e12, &p, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "count"));
}

static void test_windows_round_to_whole_microseconds(void **state) {
    (void)state;
    int64_t us;
    assert_true(fg_param_window(3, 100, 1.0004, &us, msg, sizeof(msg)));
    assert_int_equal(us, 1000);
    assert_true(fg_param_window(3, 100, 0.0005, &us, msg, sizeof(msg)));
    assert_int_equal(us, 1);
    assert_false(fg_param_window(3, 100, 0.0004, &us, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "window_ms"));
    assert_false(fg_param_window(101, 100, 1000, &us, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR limit must be between 1 and 100");
}

static void test_refusals_name_the_argument(void **state) {
    (void)state;
    fg_gcra_params p;
    double bad[] = {0, -1, INFINITY, -INFINITY, NAN, 2e9};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msg[0] = '\0';
        assert_false(fg_param_bucket(1, bad[i], "leak_per_sec", &p, msg, sizeof(msg)));
        assert_int_equal(strncmp(msg, "ERR leak_per_sec ", 17), 0);
    }
    assert_false(fg_param_bucket(0, 1, "rate", &p, msg, sizeof(msg)));
    assert_int_equal(strncmp(msg, "ERR capacity ", 13), 0);
    assert_false(fg_param_integer(-1, "COST", 0, INT64_MAX, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR COST must be between 0 and 9223372036854775807");
    /* A short buffer is cut, never overrun. */
    char tiny[8];
    assert_false(fg_param_integer(-1, "COST", 0, 1, tiny, sizeof(tiny)));
    assert_int_equal(strlen(tiny), 7);
}

/* BF.RESERVE's numbers, refused in RedisBloom's order and words. */
static void test_bloom_error_rate_and_capacity(void **state) {
    (void)state;
    assert_true(fg_param_bloom_error(0.01, msg, sizeof(msg)));
    assert_true(fg_param_bloom_error(1e-9, msg, sizeof(msg)));
    assert_false(fg_param_bloom_error(NAN, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR bad error rate");
    double out_of_range[] = {0, 1, -0.5, 2, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(out_of_range) / sizeof(out_of_range[0]); i++) {
        assert_false(fg_param_bloom_error(out_of_range[i], msg, sizeof(msg)));
        assert_string_equal(msg, "ERR (0 < error rate range < 1) ");
    }
    assert_false(fg_param_bloom_error(9e-10, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR error rate must be at least 1e-09");

    assert_true(fg_param_bloom_capacity(1, msg, sizeof(msg)));
    assert_true(fg_param_bloom_capacity(1LL << 40, msg, sizeof(msg)));
    assert_false(fg_param_bloom_capacity(0, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR (capacity should be larger than 0)");
    assert_false(fg_param_bloom_capacity(INT64_MIN, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR (capacity should be larger than 0)");
    assert_false(fg_param_bloom_capacity((1LL << 40) + 1, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR capacity must be at most 1099511627776");
}

/* A policy's Bloom list: a number, from 1e-9 up to but not including 1. */
static void test_list_error_rate(void **state) {
    (void)state;
    assert_true(fg_param_list_error(1e-9, msg, sizeof(msg)));
    assert_true(fg_param_list_error(0.999, msg, sizeof(msg)));
    assert_false(fg_param_list_error(NAN, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR error must be a number");
    assert_false(fg_param_list_error(INFINITY, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR error must be a number");
    double out_of_range[] = {0, 9e-10, 1, -1, 5};
    for (size_t i = 0; i < sizeof(out_of_range) / sizeof(out_of_range[0]); i++) {
        assert_false(fg_param_list_error(out_of_range[i], msg, sizeof(msg)));
        assert_string_equal(msg, "ERR error must be at least 1e-09 and less than 1");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_round_to_the_nearest_nanosecond),
        cmocka_unit_test(test_gcra_interval),
        cmocka_unit_test(test_windows_round_to_whole_microseconds),
        cmocka_unit_test(test_refusals_name_the_argument),
        cmocka_unit_test(test_bloom_error_rate_and_capacity),
        cmocka_unit_test(test_list_error_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
