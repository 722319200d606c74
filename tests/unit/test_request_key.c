/*
 * test_request_key.c - keys built from values a request chose
 * (src/core/request_key.c, fg_request_key): each value its own key, none
 * another kind's or name's, none with a hash tag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "floodgate.h"

static char key[512];

static const char *key_of(const char *kind, const char *name, const void *v, size_t len) {
    size_t n = fg_request_key(key, sizeof(key), kind, name, v, len);
    assert_true(n > 0 && n < sizeof(key));
    assert_int_equal(strlen(key), n);
    return key;
}

static void test_plain_values_stand_as_they_are(void **state) {
    (void)state;
    assert_string_equal(key_of("limit_req", "perip", "10.0.0.1", 8), "limit_req:perip:10.0.0.1");
    assert_string_equal(key_of("policy", "api", "a:b", 3), "policy:api:a:b");
}

static void test_other_values_are_hex_after_a_tilde(void **state) {
    (void)state;
    assert_string_equal(key_of("limit_req", "perip", "\x7f\0\0\x01", 4),
                        "limit_req:perip:~7f000001");
    assert_string_equal(key_of("limit_req", "k", "a b", 3), "limit_req:k:~612062");
    /* '~' is never plain: the hex form of "a b" cannot be spelled */
    assert_string_equal(key_of("limit_req", "k", "~612062", 7), "limit_req:k:~7e363132303632");
    /* nor is a brace: no value picks its cluster slot */
    assert_string_equal(key_of("limit_req", "k", "{a}", 3), "limit_req:k:~7b617d");
    assert_string_equal(key_of("limit_req", "k", "", 0), "limit_req:k:");
}

/* Every pair of short values over the bytes that matter gives two keys. */
static void test_no_two_values_share_a_key(void **state) {
    (void)state;
    static const char alphabet[] = {'a', '~', '0', '7', 'e', ':', ' ', '{', '\0', '\x7f'};
    enum { A = sizeof(alphabet), N = A * A * A + A * A + A + 1 };
    char(*keys)[32] = calloc(N, sizeof(*keys));
    assert_non_null(keys);
    size_t n = 0;
    for (size_t len = 0; len <= 3; len++) {
        size_t count = len == 0 ? 1 : len == 1 ? A : len == 2 ? A * A : A * A * A;
        for (size_t i = 0; i < count; i++) {
            char v[3];
            for (size_t k = 0, x = i; k < len; k++, x /= A) v[k] = alphabet[x % A];
            assert_true(fg_request_key(keys[n], sizeof(keys[n]), "z", "n", v, len) < 32);
            n++;
        }
    }
    assert_int_equal(n, N);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) assert_string_not_equal(keys[i], keys[j]);
    free(keys);
}

static void test_kinds_and_names_cannot_hold_a_colon(void **state) {
    (void)state;
    assert_int_equal(fg_request_key(key, sizeof(key), "limit_req", "a:b", "x", 1), 0);
    assert_int_equal(fg_request_key(key, sizeof(key), "limit:req", "a", "x", 1), 0);
    assert_int_equal(fg_request_key(key, sizeof(key), "limit_req", "", "x", 1), 0);
    assert_int_equal(fg_request_key(key, sizeof(key), "limit_req", "a b", "x", 1), 0);
}

static void test_a_short_buffer_is_left_alone(void **state) {
    (void)state;
    char small[8] = "unset";
    assert_int_equal(fg_request_key(small, sizeof(small), "kind", "name", "value", 5), 15);
    assert_string_equal(small, "unset");
    assert_int_equal(fg_request_key(NULL, 0, "kind", "name", "\x01", 1), 13);
    /* the room the header promises is always enough */
    char room[FG_REQUEST_KEY_ROOM(4, 4, 3)];
    assert_int_equal(fg_request_key(room, sizeof(room), "kind", "name", "\x01\x02\x03", 3), 17);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_values_stand_as_they_are),
        cmocka_unit_test(test_other_values_are_hex_after_a_tilde),
        cmocka_unit_test(test_no_two_values_share_a_key),
        cmocka_unit_test(test_kinds_and_names_cannot_hold_a_colon),
        cmocka_unit_test(test_a_short_buffer_is_left_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
