/*
 * test_key_table.c - the client's table of keys (src/client/key_table.c):
 * lookups among equal hashes, growth and shrinking, removal that shifts a
 * cluster back (across the end of the slots too), the key hash, entries
 * that keep their key where the table is told, and sweeps that remove as
 * they go and resume later.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "key_table.h"
#include "test_util.h"

/* A test entry: an id, how often a sweep saw it, and its key. */
typedef struct item {
    int id;
    int seen;
    uint32_t keylen;
    char key[];
} item;

#define ITEMS FG_KEY_TABLE(item, keylen, key)

static item *item_new(const fg_key_table *t, int id) {
    char key[16];
    size_t len = (size_t)snprintf(key, sizeof(key), "k%d", id);
    item *it = fg_key_entry_new(t, sizeof(*it), key, len);
    assert_non_null(it);
    it->id = id;
    return it;
}

/* n items, with ids 0..n-1 and hashes from hash_of, in t. */
static item **fill(fg_key_table *t, int n, uint64_t (*hash_of)(int id)) {
    item **items = calloc((size_t)n, sizeof(*items));
    assert_non_null(items);
    for (int i = 0; i < n; i++) {
        items[i] = item_new(t, i);
        assert_true(fg_key_table_insert(t, hash_of(i), items[i]));
    }
    return items;
}

static uint64_t spread(int id) { return fg_key_hash(&id, sizeof(id)); }
static uint64_t few(int id) { return (uint64_t)(id % 3) << 60 | (uint64_t)(id % 3); }

static item *find(const fg_key_table *t, int id, uint64_t hash) {
    char key[16];
    size_t len = (size_t)snprintf(key, sizeof(key), "k%d", id);
    return fg_key_table_find(t, hash, key, len);
}

static void take_out(fg_key_table *t, item *it, uint64_t hash) {
    fg_key_table_remove(t, hash, it);
    free(it);
}

/* ------------------------------------------------------------------ table */

/* Keys that share a hash, or differ only in length, are told apart, and a
 * removal among them leaves the others found. */
static void test_equal_hashes_are_told_apart(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    item **items = fill(&t, 30, few); /* "k1", "k4", ..., "k10", "k13": one hash */
    for (int i = 0; i < 30; i++) assert_ptr_equal(find(&t, i, few(i)), items[i]);
    assert_null(find(&t, 30, few(30)));
    take_out(&t, items[10], few(10));
    assert_null(find(&t, 10, few(10)));
    assert_ptr_equal(find(&t, 1, few(1)), items[1]);
    assert_ptr_equal(find(&t, 13, few(13)), items[13]);
    expect_i64(t.count, 29);
    fg_key_table_clear(&t, free);
    free(items);
}

/* An entry keeps its key where the table was told; a key longer than its
 * uint32_t length can hold is refused. */
static void test_entries_keep_their_keys(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    item *it = fg_key_entry_new(&t, sizeof(*it), "user:1", 6);
    assert_non_null(it);
    expect_i64(it->keylen, 6);
    assert_memory_equal(it->key, "user:1", 6);
    expect_i64(it->id, 0); /* the rest is zeroed */
    expect_i64(fg_key_len(&t, it), 6);
    assert_ptr_equal(fg_key_bytes(&t, it), it->key);
    assert_true(fg_key_table_insert(&t, 5, it));
    assert_ptr_equal(fg_key_table_find(&t, 5, "user:1", 6), it);
    assert_null(fg_key_table_find(&t, 5, "user:", 5));
    free(it);
    free(t.slots);
    assert_null(fg_key_entry_new(&t, sizeof(*it), "", (size_t)UINT32_MAX + 1));
}

/* The slots double when the table would pass 3/4 full, and a shrink gives
 * them back below 1/8, to a table at most half full, never below 8 slots;
 * a clear frees them. */
static void test_growth_and_shrinking(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    assert_null(find(&t, 0, spread(0))); /* no slots yet */
    item **items = fill(&t, 6, spread);
    expect_i64(t.cap, 8);
    items = realloc(items, 1000 * sizeof(*items));
    for (int i = 6; i < 1000; i++) {
        items[i] = item_new(&t, i);
        assert_true(fg_key_table_insert(&t, spread(i), items[i]));
        assert_true(t.count * 4 <= t.cap * 3);
    }
    expect_i64(t.count, 1000);
    expect_i64(t.cap, 2048);
    for (int i = 0; i < 1000; i++) assert_ptr_equal(find(&t, i, spread(i)), items[i]);
    for (int i = 0; i < 990; i++) take_out(&t, items[i], spread(i));
    expect_i64(t.cap, 2048); /* removals keep the size */
    fg_key_table_shrink(&t);
    expect_i64(t.cap, 32);
    for (int i = 990; i < 1000; i++) assert_ptr_equal(find(&t, i, spread(i)), items[i]);
    fg_key_table_shrink(&t); /* 10 in 32: nothing to give back */
    expect_i64(t.cap, 32);
    for (int i = 990; i < 1000; i++) take_out(&t, items[i], spread(i));
    fg_key_table_shrink(&t);
    expect_i64(t.cap, 8);
    expect_i64(t.count, 0);
    fg_key_table_clear(&t, free);
    expect_i64(t.cap, 0);
    assert_null(t.slots);
    expect_i64(t.keylen_at, offsetof(item, keylen)); /* still a table of items */
    free(items);
}

/* A hash whose home slot, in a table of 8, is `home`. */
static uint64_t home(int slot) { return (uint64_t)slot | (uint64_t)0x100; }

static void expect_slot(const fg_key_table *t, size_t i, const item *it) {
    assert_ptr_equal(t->slots[i].entry, it);
}

/* A removal shifts back the rest of its cluster, each entry as far as its
 * home allows (no tombstones), across the end of the slots too. */
static void test_removal_shifts_the_cluster_back(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    item *it[6];
    for (int i = 0; i < 6; i++) it[i] = item_new(&t, i);
    /* Homes 1, 1, 2, 5: in slots 1, 2, 3 and 5. */
    assert_true(fg_key_table_insert(&t, home(1), it[0]));
    assert_true(fg_key_table_insert(&t, home(1), it[1]));
    assert_true(fg_key_table_insert(&t, home(2), it[2]));
    assert_true(fg_key_table_insert(&t, home(5), it[3]));
    expect_i64(t.cap, 8);
    expect_slot(&t, 3, it[2]);
    fg_key_table_remove(&t, home(1), it[0]);
    expect_slot(&t, 1, it[1]);
    expect_slot(&t, 2, it[2]);
    expect_slot(&t, 3, NULL);
    expect_slot(&t, 5, it[3]); /* another cluster: unmoved */
    /* Homes 7, 7, 0 wrap around: slots 7, 0 and 1 (after it[1], 2 and 3). */
    fg_key_table_remove(&t, home(1), it[1]);
    fg_key_table_remove(&t, home(2), it[2]);
    assert_true(fg_key_table_insert(&t, home(7), it[4]));
    assert_true(fg_key_table_insert(&t, home(7), it[5]));
    assert_true(fg_key_table_insert(&t, home(0), it[0]));
    expect_slot(&t, 0, it[5]);
    expect_slot(&t, 1, it[0]);
    fg_key_table_remove(&t, home(7), it[4]);
    expect_slot(&t, 7, it[5]);
    expect_slot(&t, 0, it[0]);
    expect_slot(&t, 1, NULL);
    for (int i = 0; i < 6; i++) free(it[i]);
    free(t.slots);
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

/* ------------------------------------------------------------------ sweep */

/* Drops (frees) the items whose id is a multiple of *every (0: none). */
static bool drop_every(void *p, void *every) {
    item *it = p;
    int n = *(const int *)every;
    it->seen++;
    if (n == 0 || it->id % n != 0) return false;
    free(it);
    return true;
}

/* A sweep with budget to spare goes round once: it sees every entry once,
 * those it drops are gone and the others stay, and the table shrinks. */
static void test_a_sweep_removing_as_it_goes(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    item **items = fill(&t, 1000, few); /* three long clusters */
    size_t budget = SIZE_MAX;
    int every = 4;
    assert_true(fg_key_table_sweep(&t, &budget, drop_every, &every));
    expect_i64(SIZE_MAX - budget, 1000);
    expect_i64(t.count, 750);
    expect_i64(t.cap, 2048);
    for (int i = 0; i < 1000; i++) {
        if (i % 4 == 0) {
            assert_null(find(&t, i, few(i)));
        } else {
            assert_ptr_equal(find(&t, i, few(i)), items[i]);
            expect_i64(items[i]->seen, 1);
        }
    }
    /* Everything goes, and most of the slots. */
    every = 1;
    budget = SIZE_MAX;
    assert_true(fg_key_table_sweep(&t, &budget, drop_every, &every));
    expect_i64(t.count, 0);
    expect_i64(t.cap, 8);
    budget = 1;
    assert_true(fg_key_table_sweep(&t, &budget, drop_every, &every)); /* empty: done */
    expect_i64(budget, 1);
    fg_key_table_clear(&t, free);
    assert_true(fg_key_table_sweep(&t, &budget, drop_every, &every)); /* no slots: done */
    free(items);
}

/* Sweeps with a small budget go on where the last stopped, even with
 * entries added meanwhile (without a resize), and are done when their
 * round comes full circle, having seen every entry once (the last spends
 * the rest of its budget on the next round: at most the first 3 twice). */
static void test_sweeps_resume_where_they_stopped(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    item **items = fill(&t, 200, few);
    int none = 0, sweeps = 0, added = 0;
    for (bool done = false; !done;) {
        size_t budget = 3;
        done = fg_key_table_sweep(&t, &budget, drop_every, &none);
        assert_true(done || budget == 0);
        if (++sweeps % 10 == 0 && added < 10) { /* 512 slots: no resize */
            item *late = item_new(&t, 1000 + added++);
            assert_true(fg_key_table_insert(&t, spread(late->id), late));
        }
    }
    expect_i64(t.cap, 512);
    assert_true(sweeps >= 200 / 3);
    for (int i = 0; i < 200; i++) assert_true(items[i]->seen == 1 || (i < 3 && items[i]->seen == 2));
    fg_key_table_clear(&t, free);
    free(items);
}

/* A resize starts a new round from the first slot. */
static void test_a_resize_starts_a_new_round(void **state) {
    (void)state;
    fg_key_table t = ITEMS;
    item **items = fill(&t, 6, spread);
    int none = 0;
    size_t budget = 2;
    assert_false(fg_key_table_sweep(&t, &budget, drop_every, &none));
    assert_true(t.cursor > 0);
    item *more = item_new(&t, 6); /* the seventh: 16 slots */
    assert_true(fg_key_table_insert(&t, spread(6), more));
    expect_i64(t.cap, 16);
    expect_i64(t.cursor, 0);
    expect_i64(t.swept, 0);
    budget = SIZE_MAX;
    assert_true(fg_key_table_sweep(&t, &budget, drop_every, &none));
    expect_i64(more->seen, 1);
    for (int i = 0; i < 6; i++) assert_true(items[i]->seen >= 1);
    fg_key_table_clear(&t, free);
    free(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_hashes_are_told_apart),
        cmocka_unit_test(test_entries_keep_their_keys),
        cmocka_unit_test(test_growth_and_shrinking),
        cmocka_unit_test(test_removal_shifts_the_cluster_back),
        cmocka_unit_test(test_key_hash),
        cmocka_unit_test(test_a_sweep_removing_as_it_goes),
        cmocka_unit_test(test_sweeps_resume_where_they_stopped),
        cmocka_unit_test(test_a_resize_starts_a_new_round),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
