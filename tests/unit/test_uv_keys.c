/*
 * test_uv_keys.c - the bucket keys of a unique counter on a server without
 * the module (core/uv_keys.c): the base that keeps the name's slot, the
 * names refused, and which buckets each kind of call declares: few for
 * adds, a minute of slack either way, never more than FG_UV_SCRIPT_KEYS.
 * That uv.lua takes what it needs among them is test_scripts_uv.py's.
 */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

#include "uv_keys.h"

#define NOW 1796229786LL /* 12:43:06 UTC */

static char keys[FG_UV_SCRIPT_KEYS][FG_UV_BUCKET_KEY_MAX];

static bool declared(size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return true;
    return false;
}

static void test_base(void **state) {
    (void)state;
    char base[FG_UV_BUCKET_KEY_MAX];
    static const struct {
        const char *name, *base;
    } cases[] = {{"page", "{page}"},     {"{t}:page", "{t}:page"}, {"a{b", "{a{b}"},
                 {"}{x}", "}{x}"},       {"x{}y", NULL},           {"a}b", NULL},
                 {"x{}y{z}", NULL},      {"", NULL}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bool ok = fg_uv_keys_base(cases[i].name, strlen(cases[i].name), base);
        assert_int_equal(ok, cases[i].base != NULL);
        if (ok) assert_string_equal(base, cases[i].base);
    }
    char longest[FG_UV_KEYS_NAME_MAX + 2];
    memset(longest, 'k', sizeof(longest));
    assert_true(fg_uv_keys_base(longest, FG_UV_KEYS_NAME_MAX, base));
    assert_false(fg_uv_keys_base(longest, FG_UV_KEYS_NAME_MAX + 1, base));
}

static void test_adds(void **state) {
    (void)state;
    fg_uv_call add = {.kind = FG_UV_CALL_ADD};
    size_t n = fg_uv_script_keys("k", 1, &add, NOW, keys);
    assert_int_equal(n, 3 + 1 + 1); /* the minute and its neighbours, the hour, the day */
    assert_true(declared(n, "{k}:uv:60:1796229720")); /* 12:42 */
    assert_true(declared(n, "{k}:uv:60:1796229780")); /* 12:43 */
    assert_true(declared(n, "{k}:uv:60:1796229840")); /* 12:44 */
    assert_true(declared(n, "{k}:uv:3600:1796227200"));
    assert_true(declared(n, "{k}:uv:86400:1796169600"));
    fg_uv_call at = {.kind = FG_UV_CALL_ADDAT, .at = 1000};
    n = fg_uv_script_keys("{t}x", 4, &at, NOW, keys);
    assert_int_equal(n, 3);
    assert_string_equal(keys[0], "{t}x:uv:60:960");
    assert_string_equal(keys[1], "{t}x:uv:3600:0");
    assert_string_equal(keys[2], "{t}x:uv:86400:0");
    assert_int_equal(fg_uv_script_keys("a}b", 3, &add, NOW, keys), 0);
}

static void test_windows(void **state) {
    (void)state;
    fg_uv_call last = {.kind = FG_UV_CALL_WINDOW, .window = {.last = true, .seconds = 600}};
    size_t n = fg_uv_script_keys("k", 1, &last, NOW, keys);
    /* minutes 12:32 .. 12:45, the hour, 34 days, the merge's key */
    assert_int_equal(n, 14 + 1 + 34 + 1);
    assert_true(declared(n, "{k}:uv:60:1796229120"));  /* 12:32 */
    assert_false(declared(n, "{k}:uv:60:1796229060")); /* 12:31 */
    assert_string_equal(keys[n - 1], "{k}:uv:tmp");
    /* the widest window and the widest BETWEEN: every kept bucket, one before
     * each tier's, minutes two ahead; within the room */
    fg_uv_call week = {.kind = FG_UV_CALL_WINDOW, .window = {.last = true, .seconds = 604800}};
    assert_int_equal(fg_uv_script_keys("k", 1, &week, NOW, keys), 63 + 49 + 34 + 1);
    fg_uv_call all = {.kind = FG_UV_CALL_WINDOW, .window = {.start = 0, .end = NOW * 2}};
    assert_int_equal(fg_uv_script_keys("k", 1, &all, NOW, keys), 63 + 49 + 34 + 1);
    assert_true(63 + 49 + 34 + 1 < FG_UV_SCRIPT_KEYS);
    /* a window long gone: only the days that tell whether the counter exists */
    fg_uv_call old = {.kind = FG_UV_CALL_WINDOW, .window = {.start = 0, .end = 5}};
    assert_int_equal(fg_uv_script_keys("k", 1, &old, NOW, keys), 34 + 1);
    fg_uv_call create = {.kind = FG_UV_CALL_ALL};
    assert_int_equal(fg_uv_script_keys("k", 1, &create, NOW, keys), 62 + 49 + 32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base),
        cmocka_unit_test(test_adds),
        cmocka_unit_test(test_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
