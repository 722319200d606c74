/*
 * test_key_table.c - the client's tables of keys (src/client/key_table.c):
 * lookups among equal hashes, growth and shrinking, the key hash, and
 * cursors that walk a table, remove as they go and resume later.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "key_table.h"
#include "test_util.h"

/* A test entry: its node, an id and how often a walk saw it. */
typedef struct item {
    fg_key_node node;
    int id;
    int seen;
    char key[16];
} item;

static item *item_new(int id, uint64_t hash) {
    item *it = calloc(1, sizeof(*it));
    assert_non_null(it);
    it->id = id;
    size_t len = (size_t)snprintf(it->key, sizeof(it->key), "k%d", id);
    it->node = (fg_key_node){NULL, hash, len, it->key};
    return it;
}

static void item_free(fg_key_node *n) { free(n); }

/* n items, with ids 0..n-1 and hashes from hash_of, in t. */
static item **fill(fg_key_table *t, int n, uint64_t (*hash_of)(int id)) {
    item **items = calloc((size_t)n, sizeof(*items));
    assert_non_null(items);
    for (int i = 0; i < n; i++) {
        items[i] = item_new(i, hash_of(i));
        assert_true(fg_key_table_insert(t, &items[i]->node));
    }
    return items;
}

static uint64_t spread(int id) { return fg_key_hash(&id, sizeof(id)); }
static uint64_t few(int id) { return (uint64_t)(id % 3) << 60 | (uint64_t)(id % 3); }

static item *find(const fg_key_table *t, int id, uint64_t hash) {
    char key[16];
    size_t len = (size_t)snprintf(key, sizeof(key), "k%d", id);
    return (item *)fg_key_table_find(t, hash, key, len);
}

/* ------------------------------------------------------------------ table */

/* Keys that share a hash, or differ only in length, are told apart. */
static void test_equal_hashes_are_told_apart(void **state) {
    (void)state;
    fg_key_table t = {0};
    item **items = fill(&t, 30, few); /* "k1", "k4", ..., "k10", "k13": one hash */
    for (int i = 0; i < 30; i++) assert_ptr_equal(find(&t, i, few(i)), items[i]);
    assert_null(find(&t, 30, few(30)));
    fg_key_table_remove(&t, &items[10]->node);
    free(items[10]);
    assert_null(find(&t, 10, few(10)));
    assert_ptr_equal(find(&t, 1, few(1)), items[1]);
    assert_ptr_equal(find(&t, 13, few(13)), items[13]);
    expect_i64(t.count, 29);
    fg_key_table_clear(&t, item_free);
    free(items);
}

/* The buckets double as the table fills and halve as it empties, never
 * below eight while it has buckets. */
static void test_growth_and_shrinking(void **state) {
    (void)state;
    fg_key_table t = {0};
    assert_null(find(&t, 0, spread(0))); /* no buckets yet */
    item **items = fill(&t, 1000, spread);
    expect_i64(t.count, 1000);
    expect_i64(t.nbuckets, 1024);
    for (int i = 0; i < 1000; i++) assert_ptr_equal(find(&t, i, spread(i)), items[i]);
    for (int i = 0; i < 990; i++) {
        fg_key_table_remove(&t, &items[i]->node);
        free(items[i]);
        assert_true(t.count * 8 >= t.nbuckets || t.nbuckets == 8);
    }
    expect_i64(t.nbuckets, 64);
    for (int i = 990; i < 1000; i++) assert_ptr_equal(find(&t, i, spread(i)), items[i]);
    fg_key_table_clear(&t, item_free);
    expect_i64(t.nbuckets, 0);
    expect_i64(t.count, 0);
    free(items);
}

/* ------------------------------------------------------------------- hash */

static void test_key_hash(void **state) {
    (void)state;
    expect_i64(fg_key_hash(NULL, 0), fg_key_hash("", 0));
    expect_i64(fg_key_hash("user:1", 6), fg_key_hash_seeded("user:1", 6, 0));
    assert_true(fg_key_hash("user:1", 6) != fg_key_hash_seeded("user:1", 6, 1));
    assert_true(fg_key_hash("user:1", 6) != fg_key_hash("user:2", 6));
    /* Zeros of different lengths, across the 4-, 8- and 16-byte reads. */
    static const char zeros[40];
    for (size_t n = 0; n < sizeof(zeros); n++)
        assert_true(fg_key_hash(zeros, n) != fg_key_hash(zeros, n + 1));
}

/* ----------------------------------------------------------------- cursor */

/* Walks until the cursor is back at the first bucket, removing the items
 * whose id is a multiple of `drop` (0: none); returns the nodes seen. */
static int walk_round(fg_key_table *t, fg_key_cursor *c, int drop) {
    int seen = 0;
    do {
        for (fg_key_node *n; (n = fg_key_cursor_node(t, c)) != NULL; seen++) {
            item *it = (item *)n;
            it->seen++;
            if (drop != 0 && it->id % drop == 0)
                free(fg_key_cursor_remove(t, c));
            else
                fg_key_cursor_pass(c);
        }
    } while (!fg_key_cursor_next_bucket(t, c));
    return seen;
}

/* A round sees every node once, and the nodes removed on the way are gone
 * while the others stay; the buckets keep their number until the table is
 * shrunk. */
static void test_a_round_removing_as_it_goes(void **state) {
    (void)state;
    fg_key_table t = {0};
    item **items = fill(&t, 1000, few); /* three long chains */
    fg_key_cursor c = {0};
    expect_i64(walk_round(&t, &c, 4), 1000);
    expect_i64(t.count, 750);
    expect_i64(t.nbuckets, 1024);
    for (int i = 0; i < 1000; i++) {
        if (i % 4 == 0) {
            assert_null(find(&t, i, few(i)));
        } else {
            assert_ptr_equal(find(&t, i, few(i)), items[i]);
            expect_i64(items[i]->seen, 1);
        }
    }
    /* Remove everything through the cursor, then give the buckets back. */
    expect_i64(walk_round(&t, &c, 1), 750);
    expect_i64(t.count, 0);
    expect_i64(t.nbuckets, 1024);
    fg_key_table_shrink(&t);
    expect_i64(t.nbuckets, 8);
    fg_key_table_clear(&t, item_free);
    free(items);
}

/* A walk stopped after any number of nodes goes on where it stopped, even
 * with nodes added to the table meanwhile (without a resize). */
static void test_a_walk_resumes_where_it_stopped(void **state) {
    (void)state;
    fg_key_table t = {0};
    item **items = fill(&t, 200, few);
    item *late[10];
    fg_key_cursor c = {0};
    int steps = 0, wraps = 0, added = 0;
    while (wraps == 0) {
        /* Three nodes per call, as a sweep with a budget of three. */
        for (int budget = 3; budget > 0 && wraps == 0;) {
            item *it = (item *)fg_key_cursor_node(&t, &c);
            if (it != NULL) {
                it->seen++;
                fg_key_cursor_pass(&c);
                budget--;
            } else {
                wraps += fg_key_cursor_next_bucket(&t, &c);
            }
        }
        if (++steps % 10 == 0 && added < 10) { /* 256 buckets: no resize */
            late[added] = item_new(1000 + added, spread(1000 + added));
            assert_true(fg_key_table_insert(&t, &late[added]->node));
            added++;
        }
    }
    expect_i64(t.nbuckets, 256);
    for (int i = 0; i < 200; i++) expect_i64(items[i]->seen, 1);
    fg_key_table_clear(&t, item_free);
    free(items);
}

/* A cursor kept while the table is resized starts over at the first
 * bucket; one whose bucket lost nodes behind it finds the end of it. */
static void test_a_cursor_after_the_table_changed(void **state) {
    (void)state;
    fg_key_table t = {0};
    fg_key_cursor c = {0};
    assert_null(fg_key_cursor_node(&t, &c)); /* no buckets yet */
    assert_true(fg_key_cursor_next_bucket(&t, &c));

    item **items = fill(&t, 8, few); /* 8 buckets; ids 0, 3 and 6 in bucket 0 */
    expect_i64(t.nbuckets, 8);
    assert_non_null(fg_key_cursor_node(&t, &c));
    fg_key_cursor_pass(&c);
    fg_key_cursor_pass(&c);
    fg_key_table_remove(&t, &items[0]->node); /* the chain is shorter now */
    fg_key_table_remove(&t, &items[3]->node);
    free(items[0]);
    free(items[3]);
    assert_null(fg_key_cursor_node(&t, &c));
    assert_false(fg_key_cursor_next_bucket(&t, &c));
    expect_i64(c.bucket, 1);

    for (int id = 100; id < 103; id++) { /* the third finds 8 nodes: the buckets double */
        item *more = item_new(id, spread(id));
        assert_true(fg_key_table_insert(&t, &more->node));
    }
    expect_i64(t.nbuckets, 16);
    /* The cursor starts over: a round from here sees every node once. */
    expect_i64(walk_round(&t, &c, 0), 9);
    expect_i64(c.bucket, 0);
    fg_key_table_clear(&t, item_free);
    free(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_hashes_are_told_apart),
        cmocka_unit_test(test_growth_and_shrinking),
        cmocka_unit_test(test_key_hash),
        cmocka_unit_test(test_a_round_removing_as_it_goes),
        cmocka_unit_test(test_a_walk_resumes_where_it_stopped),
        cmocka_unit_test(test_a_cursor_after_the_table_changed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
