/*
 * test_text.c - the number texts commands are made of (text.c): the same
 * digits as snprintf's "%lld" and "%.17g", which they replace on the hot
 * path, across the boundaries where the fast way hands over.
 */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

static void expect_int_text(int64_t v) {
    char fast[FG_INT_TEXT_MAX], slow[32];
    size_t n = fg_format_int(fast, v);
    snprintf(slow, sizeof(slow), "%lld", (long long)v);
    assert_string_equal(fast, slow);
    expect_i64((int64_t)n, (int64_t)strlen(slow));
}

static void expect_double_text(double v) {
    char fast[32], slow[32];
    size_t n = fg_format_double(fast, sizeof(fast), v);
    snprintf(slow, sizeof(slow), "%.17g", v);
    assert_string_equal(fast, slow);
    expect_i64((int64_t)n, (int64_t)strlen(slow));
}

static void test_integers(void **state) {
    (void)state;
    const int64_t edges[] = {0, 1, -1, 9, 10, -10, 99, 100, 1000000, 4503599627370496,
                             INT64_MAX, INT64_MAX - 1, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        expect_int_text(edges[i]);
    for (int64_t v = 1; v > 0 && v < INT64_MAX / 3; v = v * 3 + 1) {
        expect_int_text(v);
        expect_int_text(-v);
    }
}

static void test_doubles(void **state) {
    (void)state;
    /* integral below 2^53: written as integers; the rest: %.17g itself */
    const double edges[] = {0.0, -0.0, 1, -1, 10, 1e8, 0.5, 1.5, 0.1, 1e-7, 2.5e-300,
                            9007199254740991.0, 9007199254740992.0, -9007199254740991.0,
                            1e16, 1e17, 1e300, 123456.789, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        expect_double_text(edges[i]);
    for (double v = 1; v < 1e300; v = v * 7 + 0.25) {
        expect_double_text(v);
        expect_double_text(floor(v));
        expect_double_text(-v);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_doubles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
