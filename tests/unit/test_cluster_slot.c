/*
 * test_cluster_slot.c - the slot of a key in a Redis Cluster (cluster.c):
 * CRC16-XMODEM check values, the slots Redis 7.0 gives (CLUSTER KEYSLOT),
 * hash-tag edge cases; and the parsing of redis+cluster:// URLs.
 */
#include "test_util.h"

#include <string.h>

#include "remote/cluster.h"
#include "floodgate.h"

static unsigned slot(const char *key) { return fg_cluster_slot(key, strlen(key)); }

static void test_check_values(void **state) {
    (void)state;
    expect_i64(slot("123456789"), 0x31C3 & 0x3FFF); /* the CRC16-XMODEM check value */
    expect_i64(slot("foo"), 12182);                 /* CLUSTER KEYSLOT foo */
    expect_i64(slot("user1"), 8106);
    expect_i64(slot(""), 0);
}

static void test_hash_tags(void **state) {
    (void)state;
    expect_i64(slot("{user1}.a"), 8106);
    expect_i64(slot("x{user1}"), 8106);
    expect_i64(slot("a{b}c{d}"), slot("b")); /* the first tag only */
    expect_i64(slot("}{x}"), slot("x"));     /* a '}' before the '{' does not count */
    expect_i64(slot("{x}}"), slot("x"));
}

static void test_no_tag(void **state) {
    (void)state;
    /* Whole-key CRCs, computed independently (binascii.crc_hqx). */
    expect_i64(slot("{}"), 15257);   /* an empty tag: the whole key */
    expect_i64(slot("{"), 4092);     /* no '}' */
    expect_i64(slot("{}{x}"), 3257); /* the first tag is empty: no second chance */
}

static void test_binary_keys(void **state) {
    (void)state;
    /* The length counts, not a NUL: "a\0{b}" has the tag b. */
    expect_i64(fg_cluster_slot("a\0{b}", 5), slot("b"));
    expect_i64(fg_cluster_slot("user1xyz", 5), 8106);
}

static void expect_invalid(const char *url) {
    fg_error err;
    fg_client *c = fg_open(url, NULL, &err);
    if (c != NULL) {
        fg_close(c);
        print_error("fg_open(\"%s\") succeeded\n", url);
        fail();
    }
    expect_i64(err.code, FG_CODE_INVALID);
}

static void test_urls(void **state) {
    (void)state;
    expect_invalid("redis+cluster://");
    expect_invalid("redis+cluster://127.0.0.1:7000,");
    expect_invalid("redis+cluster://127.0.0.1:7000,,127.0.0.1:7001");
    expect_invalid("redis+cluster://127.0.0.1:7000/1");
    expect_invalid("redis+cluster://127.0.0.1:0");
    expect_invalid("redis+cluster://user@127.0.0.1:7000");
    /* Nothing listens on port 1: not fatal, as for redis:// */
    fg_options o;
    fg_options_init(&o);
    o.on_failure = FG_ON_FAILURE_CLOSED;
    fg_error err;
    fg_client *c = fg_open("redis+cluster://u:p%40ss@127.0.0.1:1,[::1]:1", &o, &err);
    assert_non_null(c);
    fg_limit l = fg_token_bucket(5, 1);
    fg_result r;
    expect_i64(fg_check(c, "k", &l, 1, &r, &err), FG_CODE_OK);
    expect_i64(r.source, FG_SOURCE_FAILED_CLOSED);
    fg_request reqs[2] = {{.key = "a", .limit = &l, .cost = 1}, {.key = "b", .limit = &l, .cost = 1}};
    expect_i64(fg_check_batch(c, reqs, 2, &err), FG_CODE_OK);
    expect_i64(reqs[1].result.source, FG_SOURCE_FAILED_CLOSED);
    expect_i64(fg_reset(c, "k", NULL, &err), FG_CODE_IO);
    fg_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_values), cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_no_tag),       cmocka_unit_test(test_binary_keys),
        cmocka_unit_test(test_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
