/*
 * test_filter.c - the Bloom filters of floodgate.h without a server: the
 * standalone fg_filter, and fg_bf_* on mem: (mem_bloom.c) with the module's
 * replies and messages: defaults, reserve on an existing key, full
 * non-scaling filters (BF.MADD stops at the first item that does not fit),
 * a filter at its last level, bad arguments, the namespace apart from the
 * rate limits, and many threads on one table (run under TSan by make
 * unit-tsan). A server URL that cannot be reached shows that the failure
 * policy does not apply and that bad input costs no round trip.
 *
 * Answers are compared with a core filter (src/core/bloom.h) fed the same
 * items through fg_bloom_hash (XXH3): both must be the very same filter, false
 * positives included.
 */
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bloom.h"
#include "floodgate.h"

#define INVALID_MSG(err, text)                                                                     \
    do {                                                                                           \
        expect_i64((err).code, FG_CODE_INVALID);                                                   \
        assert_string_equal((err).message, (text));                                                \
    } while (0)

static const fg_bloom_allocator heap = {{realloc, free}, calloc};

static fg_bloom_options options(double error, int64_t capacity, int expansion) {
    fg_bloom_options o = {error, capacity, expansion};
    return o;
}

/* The core filter that fg_filter and mem: must match. */
static fg_bloom twin(fg_bloom_options o) {
    fg_bloom f;
    expect_status(
        fg_bloom_init(&f, o.error_rate, (uint64_t)o.capacity, (uint32_t)o.expansion, &heap), FG_OK);
    return f;
}

static int twin_add(fg_bloom *f, const void *item, size_t len) {
    fg_bloom_add_result r = fg_bloom_add(f, fg_bloom_hash(f->hash, item, len), &heap);
    return r == FG_BLOOM_ADDED ? 1 : r == FG_BLOOM_PRESENT ? 0 : -1;
}

static size_t item_name(char *buf, size_t len, const char *prefix, int i) {
    return (size_t)snprintf(buf, len, "%s%d", prefix, i);
}

static fg_client *open_mem(void) {
    fg_error err;
    fg_client *c = fg_open("mem:", NULL, &err);
    assert_non_null(c);
    return c;
}

/* -------------------------------------------------------------- fg_filter */

static void test_options_init(void **state) {
    (void)state;
    fg_bloom_options o;
    fg_bloom_options_init(&o);
    assert_true(o.error_rate == 0.01);
    expect_i64(o.capacity, 100);
    expect_i64(o.expansion, 2);
}

/* fg_filter is the core's filter: the same answers, cardinality and size
 * as a core filter fed the same items, through several levels. */
static void test_filter_is_the_core_filter(void **state) {
    (void)state;
    fg_bloom_options o = options(0.01, 50, 2);
    fg_error err;
    fg_filter *f = fg_filter_new(&o, &err);
    assert_non_null(f);
    fg_bloom ref = twin(o);
    char buf[32];
    for (int i = 0; i < 1000; i++) {
        size_t len = item_name(buf, sizeof(buf), "item", i % 700);
        expect_i64(fg_filter_add(f, buf, len), twin_add(&ref, buf, len));
    }
    assert_true(ref.nlevels >= 4);
    for (int i = 0; i < 5000; i++) {
        size_t len = item_name(buf, sizeof(buf), i % 2 ? "item" : "other", i);
        expect_i64(fg_filter_contains(f, buf, len),
                   fg_bloom_contains(&ref, fg_bloom_hash(ref.hash, buf, len)));
    }
    expect_i64(fg_filter_cardinality(f), (int64_t)fg_bloom_cardinality(&ref));
    expect_i64(fg_filter_bytes(f), (int64_t)fg_bloom_bytes(&ref));
    /* 700 distinct items, estimated */
    assert_true(fg_filter_cardinality(f) >= 680 && fg_filter_cardinality(f) <= 720);
    fg_bloom_free(&ref, &heap);
    fg_filter_free(f);
}

static void test_filter_add_and_contains(void **state) {
    (void)state;
    fg_filter *f = fg_filter_new(NULL, NULL); /* the defaults */
    assert_non_null(f);
    expect_i64(fg_filter_cardinality(f), 0);
    assert_false(fg_filter_contains(f, "a", 1));
    expect_i64(fg_filter_add(f, "a", 1), 1);
    expect_i64(fg_filter_add(f, "a", 1), 0);
    assert_true(fg_filter_contains(f, "a", 1));
    /* binary items: bytes after a NUL count, and the empty item is one */
    expect_i64(fg_filter_add(f, "x\0y", 3), 1);
    assert_true(fg_filter_contains(f, "x\0y", 3));
    assert_true(fg_bloom_hash(FG_BLOOM_HASH_XXH3, "x\0y", 3) !=
                fg_bloom_hash(FG_BLOOM_HASH_XXH3, "x\0z", 3));
    assert_true(fg_bloom_hash(FG_BLOOM_HASH_XXH3, "x\0y", 3) !=
                fg_bloom_hash(FG_BLOOM_HASH_XXH3, "x", 1));
    assert_false(fg_filter_contains(f, NULL, 0));
    expect_i64(fg_filter_add(f, NULL, 0), 1);
    expect_i64(fg_filter_add(f, "", 0), 0);
    expect_i64(fg_filter_cardinality(f), 3);
    fg_filter_free(f);
    fg_filter_free(NULL);
}

/* Exactly `capacity` new items fit; then new items are refused (-1) and
 * change nothing, while present ones still answer 0. */
static void test_filter_nonscaling_full(void **state) {
    (void)state;
    fg_bloom_options o = options(0.001, 10, 0);
    fg_filter *f = fg_filter_new(&o, NULL);
    assert_non_null(f);
    fg_bloom ref = twin(o);
    size_t bytes = fg_filter_bytes(f);
    char buf[32];
    int added = 0, i = 0;
    while (added < 10) {
        size_t len = item_name(buf, sizeof(buf), "n", i++);
        added += fg_filter_add(f, buf, len);
        twin_add(&ref, buf, len);
    }
    expect_i64(fg_filter_add(f, "n0", 2), 0);
    for (int j = 0; j < 20; j++) {
        size_t len = item_name(buf, sizeof(buf), "late", j);
        if (fg_filter_contains(f, buf, len)) continue; /* a false positive answers 0 */
        expect_i64(fg_filter_add(f, buf, len), -1);
        assert_false(fg_filter_contains(f, buf, len));
    }
    expect_i64(fg_filter_bytes(f), (int64_t)bytes);
    expect_i64(fg_filter_cardinality(f), (int64_t)fg_bloom_cardinality(&ref));
    assert_true(fg_filter_cardinality(f) >= 10);
    fg_bloom_free(&ref, &heap);
    fg_filter_free(f);
}

/* Capacity 1 and expansion 1: one item per level, until the last level. */
static void test_filter_last_level(void **state) {
    (void)state;
    fg_bloom_options o = options(0.5, 1, 1);
    fg_filter *f = fg_filter_new(&o, NULL);
    assert_non_null(f);
    fg_bloom ref = twin(o);
    char buf[32];
    int r = 0;
    for (int i = 0; i < 10000 && r >= 0; i++) {
        size_t len = item_name(buf, sizeof(buf), "l", i);
        r = fg_filter_add(f, buf, len);
        expect_i64(r, twin_add(&ref, buf, len));
    }
    expect_i64(r, -1);
    expect_i64(ref.nlevels, FG_BLOOM_MAX_LEVELS);
    fg_bloom_free(&ref, &heap);
    fg_filter_free(f);
}

static void expect_bad_options(fg_bloom_options o, const char *message) {
    fg_error err = {0};
    assert_null(fg_filter_new(&o, &err));
    INVALID_MSG(err, message);
}

static void test_filter_bad_options(void **state) {
    (void)state;
    expect_bad_options(options(NAN, 100, 2), "ERR bad error rate");
    expect_bad_options(options(0, 100, 2), "ERR (0 < error rate range < 1) ");
    expect_bad_options(options(1, 100, 2), "ERR (0 < error rate range < 1) ");
    expect_bad_options(options(-0.5, 100, 2), "ERR (0 < error rate range < 1) ");
    expect_bad_options(options(INFINITY, 100, 2), "ERR (0 < error rate range < 1) ");
    expect_bad_options(options(0.01, 0, 2), "ERR (capacity should be larger than 0)");
    expect_bad_options(options(0.01, -1, 2), "ERR (capacity should be larger than 0)");
    expect_bad_options(options(0.01, FG_BLOOM_MAX_CAPACITY + 1, 2),
                       "ERR capacity must be at most 1099511627776");
    expect_bad_options(options(0.01, 100, -1), "ERR bad expansion");
    expect_bad_options(options(0.01, 100, FG_BLOOM_MAX_EXPANSION + 1), "ERR bad expansion");
    /* the checks run in the module's order */
    expect_bad_options(options(2, 0, -1), "ERR (0 < error rate range < 1) ");
    expect_bad_options(options(0.01, 0, -1), "ERR (capacity should be larger than 0)");
    /* bits beyond 1 TiB: refused before any allocation */
    expect_bad_options(options(1e-6, FG_BLOOM_MAX_CAPACITY, 0),
                       "ERR filter too big: its bits would exceed 1 TiB");
    expect_bad_options(options(0.01, FG_BLOOM_MAX_CAPACITY, 2),
                       "ERR filter too big: its bits would exceed 1 TiB");
    /* the largest and smallest that are fine, without allocating them */
    fg_bloom_options o = options(0.5, 1, FG_BLOOM_MAX_EXPANSION);
    fg_filter *f = fg_filter_new(&o, NULL);
    assert_non_null(f);
    fg_filter_free(f);
}

/* ------------------------------------------------------------------ mem: */

static void test_mem_reserve(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    fg_bloom_options o = options(0.001, 1000, 4);
    expect_i64(fg_bf_reserve(c, "k", &o, &err), FG_CODE_OK);
    bool added = false, exists = true;
    expect_i64(fg_bf_add(c, "k", "a", 1, &added, &err), FG_CODE_OK);
    assert_true(added);
    /* an existing key is refused, and keeps its filter */
    fg_bloom_options other = options(0.1, 5, 0);
    expect_i64(fg_bf_reserve(c, "k", &other, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR item exists");
    expect_i64(fg_bf_reserve(c, "k", NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_exists(c, "k", "a", 1, &exists, &err), FG_CODE_OK);
    assert_true(exists);
    /* bad options, with the module's message, create nothing */
    o.capacity = 0;
    expect_i64(fg_bf_reserve(c, "new", &o, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR (capacity should be larger than 0)");
    expect_i64(fg_bf_reserve(c, "new", NULL, &err), FG_CODE_OK);
    /* the same filter as a core one with those options */
    fg_bloom ref = twin(options(0.001, 1000, 4));
    twin_add(&ref, "a", 1);
    char buf[32];
    for (int i = 0; i < 3000; i++) {
        size_t len = item_name(buf, sizeof(buf), "r", i);
        expect_i64(fg_bf_add(c, "k", buf, len, &added, &err), FG_CODE_OK);
        expect_i64(added, twin_add(&ref, buf, len));
    }
    int64_t card = -1;
    expect_i64(fg_bf_card(c, "k", &card, &err), FG_CODE_OK);
    expect_i64(card, (int64_t)fg_bloom_cardinality(&ref));
    fg_bloom_free(&ref, &heap);
    fg_close(c);
}

/* BF.ADD on a missing key creates the defaults: 0.01, 100, expansion 2. */
static void test_mem_defaults(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    bool flag = true;
    int64_t card = -1;
    expect_i64(fg_bf_exists(c, "d", "a", 1, &flag, &err), FG_CODE_OK);
    assert_false(flag);
    expect_i64(fg_bf_card(c, "d", &card, &err), FG_CODE_OK);
    expect_i64(card, 0);
    fg_bloom ref = twin(options(0.01, 100, 2));
    char buf[32];
    for (int i = 0; i < 1500; i++) {
        size_t len = item_name(buf, sizeof(buf), "d", i % 1200);
        expect_i64(fg_bf_add(c, "d", buf, len, &flag, &err), FG_CODE_OK);
        expect_i64(flag, twin_add(&ref, buf, len));
    }
    assert_true(ref.nlevels >= 3);
    for (int i = 0; i < 3000; i++) {
        size_t len = item_name(buf, sizeof(buf), i % 3 ? "d" : "e", i);
        expect_i64(fg_bf_exists(c, "d", buf, len, &flag, &err), FG_CODE_OK);
        expect_i64(flag, fg_bloom_contains(&ref, fg_bloom_hash(ref.hash, buf, len)));
    }
    expect_i64(fg_bf_card(c, "d", &card, &err), FG_CODE_OK);
    expect_i64(card, (int64_t)fg_bloom_cardinality(&ref));
    /* the key now exists */
    expect_i64(fg_bf_reserve(c, "d", NULL, &err), FG_CODE_INVALID);
    fg_bloom_free(&ref, &heap);
    fg_close(c);
}

static void test_mem_madd_mexists(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    enum { N = 40 };
    char names[N][16];
    const void *items[N];
    size_t lens[N];
    bool added[N], exists[N];
    for (int i = 0; i < N; i++) {
        lens[i] = item_name(names[i], sizeof(names[i]), "m", i % 25); /* repeats */
        items[i] = names[i];
    }
    lens[7] = 0; /* the empty item, given as NULL */
    items[7] = NULL;
    expect_i64(fg_bf_mexists(c, "m", items, lens, N, exists, &err), FG_CODE_OK);
    for (int i = 0; i < N; i++)
        assert_false(exists[i]);
    expect_i64(fg_bf_madd(c, "m", items, lens, N, added, &err), FG_CODE_OK);
    fg_bloom ref = twin(options(0.01, 100, 2));
    for (int i = 0; i < N; i++)
        expect_i64(added[i], twin_add(&ref, items[i] ? items[i] : "", lens[i]));
    expect_i64(added[0], 1);
    expect_i64(added[25], 0);
    expect_i64(fg_bf_mexists(c, "m", items, lens, N, exists, &err), FG_CODE_OK);
    for (int i = 0; i < N; i++)
        assert_true(exists[i]);
    expect_i64(fg_bf_madd(c, "m", items, lens, N, NULL, &err), FG_CODE_OK); /* added optional */
    fg_bloom_free(&ref, &heap);
    fg_close(c);
}

/* BF.MADD stops at the first item that does not fit: added[] is set for the
 * items before it, and left as it was from there on. */
static void test_mem_nonscaling_full(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    fg_bloom_options o = options(0.001, 5, 0);
    expect_i64(fg_bf_reserve(c, "full", &o, &err), FG_CODE_OK);
    const void *items[8] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    size_t lens[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    bool added[8] = {false};
    expect_i64(fg_bf_madd(c, "full", items, lens, 8, added, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR non scaling filter is full");
    for (int i = 0; i < 8; i++)
        expect_i64(added[i], i < 5);
    /* a present item answers 0 before a new one stops the call */
    const void *again[3] = {"a", "z", "b"};
    bool flags[3] = {true, true, true};
    expect_i64(fg_bf_madd(c, "full", again, lens, 3, flags, &err), FG_CODE_INVALID);
    expect_i64(flags[0], 0);
    expect_i64(flags[1], 1); /* untouched */
    expect_i64(flags[2], 1);
    bool flag = true;
    expect_i64(fg_bf_add(c, "full", "a", 1, &flag, &err), FG_CODE_OK);
    assert_false(flag);
    expect_i64(fg_bf_add(c, "full", "zz", 2, &flag, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR non scaling filter is full");
    expect_i64(fg_bf_exists(c, "full", "zz", 2, &flag, &err), FG_CODE_OK);
    assert_false(flag);
    int64_t card = 0;
    expect_i64(fg_bf_card(c, "full", &card, &err), FG_CODE_OK);
    expect_i64(card, 5);
    fg_close(c);
}

static void test_mem_last_level(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    fg_bloom_options o = options(0.5, 1, 1);
    expect_i64(fg_bf_reserve(c, "deep", &o, &err), FG_CODE_OK);
    char buf[32];
    fg_code rc = FG_CODE_OK;
    int i = 0;
    while (rc == FG_CODE_OK && i < 10000) {
        size_t len = item_name(buf, sizeof(buf), "l", i++);
        rc = fg_bf_add(c, "deep", buf, len, NULL, &err);
    }
    INVALID_MSG(err, "ERR problem inserting into filter");
    fg_close(c);
}

static void test_mem_bad_arguments(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    bool flag;
    int64_t card;
    const void *items[2] = {"a", NULL};
    size_t lens[2] = {1, 1};
    expect_i64(fg_bf_add(NULL, "k", "a", 1, &flag, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_add(c, NULL, "a", 1, &flag, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_add(c, "k", NULL, 1, &flag, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_exists(c, "k", "a", 1, NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_card(c, "k", NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_card(c, NULL, &card, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_reserve(c, NULL, NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_madd(c, "k", items, lens, 0, &flag, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR wrong number of arguments for 'bf.madd' command");
    expect_i64(fg_bf_mexists(c, "k", items, lens, 0, &flag, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR wrong number of arguments for 'bf.mexists' command");
    expect_i64(fg_bf_madd(c, "k", items, lens, 2, NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_madd(c, "k", NULL, lens, 1, NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_madd(c, "k", items, NULL, 1, NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_mexists(c, "k", items, lens, 1, NULL, &err), FG_CODE_INVALID);
    expect_i64(fg_bf_add(c, "k", "a", 1, NULL, NULL), FG_CODE_OK); /* err may be NULL */
    /* none of the refused calls created the key */
    expect_i64(fg_bf_card(c, "k", &card, &err), FG_CODE_OK);
    expect_i64(card, 1);
    fg_close(c);
}

/* On mem:, Bloom keys are apart from the rate limits' and the locks' keys. */
static void test_mem_namespaces(void **state) {
    (void)state;
    fg_client *c = open_mem();
    fg_error err;
    fg_limit l = fg_token_bucket(5, 1);
    fg_result r;
    expect_i64(fg_check(c, "same", &l, 1, &r, &err), FG_CODE_OK);
    bool flag;
    expect_i64(fg_bf_add(c, "same", "a", 1, &flag, &err), FG_CODE_OK);
    assert_true(flag);
    bool existed;
    expect_i64(fg_reset(c, "same", &existed, &err), FG_CODE_OK);
    assert_true(existed); /* the limit */
    expect_i64(fg_bf_exists(c, "same", "a", 1, &flag, &err), FG_CODE_OK);
    assert_true(flag); /* the filter stays */
    fg_close(c);
}

/* A server that cannot be reached: FG_CODE_IO whatever on_failure says,
 * and bad input is refused before any round trip. */
static void test_unreachable_server(void **state) {
    (void)state;
    fg_options opts;
    fg_options_init(&opts);
    opts.on_failure = FG_ON_FAILURE_OPEN;
    opts.connect_timeout_ms = 200;
    fg_error err;
    fg_client *c = fg_open("redis://127.0.0.1:1", &opts, &err);
    assert_non_null(c);
    fg_stats before, after;
    fg_get_stats(c, &before);
    fg_bloom_options o = options(0.01, 0, 2);
    expect_i64(fg_bf_reserve(c, "k", &o, &err), FG_CODE_INVALID);
    INVALID_MSG(err, "ERR (capacity should be larger than 0)");
    const void *items[1] = {"a"};
    size_t lens[1] = {1};
    bool flag;
    expect_i64(fg_bf_madd(c, "k", items, lens, 0, &flag, &err), FG_CODE_INVALID);
    fg_get_stats(c, &after);
    expect_i64(after.round_trips, before.round_trips);
    expect_i64(fg_bf_add(c, "k", "a", 1, &flag, &err), FG_CODE_IO);
    expect_i64(err.code, FG_CODE_IO);
    int64_t card;
    expect_i64(fg_bf_card(c, "k", &card, &err), FG_CODE_IO);
    fg_close(c);
}

/* ---------------------------------------------------------------- threads */

#define THREADS    8
#define PER_THREAD 2000

typedef struct worker {
    fg_client *c;
    int id;
    fg_code reserve_rc;
    int missing;      /* own items not found in the shared filter afterwards */
    int64_t own_card; /* of its own key */
    int own_adds;     /* adds of its own key that answered 1 */
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    char own[16], buf[PER_THREAD][24];
    const void *items[10];
    size_t lens[10];
    bool flags[10];
    snprintf(own, sizeof(own), "own%d", w->id);
    fg_bloom_options o = options(0.001, 100, 2);
    w->reserve_rc = fg_bf_reserve(w->c, "race", &o, NULL);
    for (int i = 0; i < PER_THREAD; i += 10) {
        for (int j = 0; j < 10; j++) {
            lens[j] = item_name(buf[i + j], sizeof(buf[0]), own, i + j);
            items[j] = buf[i + j];
        }
        fg_bf_madd(w->c, "shared", items, lens, 10, flags, NULL);
        fg_bf_mexists(w->c, "shared", items, lens, 10, flags, NULL);
        for (int j = 0; j < 10; j++)
            w->missing += !flags[j];
        for (int j = 0; j < 10; j++) {
            bool added = false;
            fg_bf_add(w->c, own, items[j], lens[j], &added, NULL);
            w->own_adds += added;
        }
        fg_bf_add(w->c, "race", items[0], lens[0], NULL, NULL);
        /* a new key: inserts and rehashes while others look keys up */
        char fresh[32];
        snprintf(fresh, sizeof(fresh), "%s:%d", own, i);
        fg_bf_add(w->c, fresh, items[0], lens[0], NULL, NULL);
    }
    fg_bf_card(w->c, own, &w->own_card, NULL);
    return NULL;
}

/* Many threads on shared and own keys, creating keys (the table grows)
 * while the others look keys up, and a race to reserve one key: exactly
 * one reserve wins, no added item is ever missing, and each own key ends
 * as a single-threaded core filter would. */
static void test_mem_threads(void **state) {
    (void)state;
    fg_client *c = open_mem();
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.c = c, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, run_worker, &w[i]), 0);
    }
    int winners = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        winners += w[i].reserve_rc == FG_CODE_OK;
        if (w[i].reserve_rc != FG_CODE_OK) expect_i64(w[i].reserve_rc, FG_CODE_INVALID);
        expect_i64(w[i].missing, 0);
        fg_bloom ref = twin(options(0.01, 100, 2));
        int adds = 0;
        char own[16], buf[24];
        snprintf(own, sizeof(own), "own%d", i);
        for (int j = 0; j < PER_THREAD; j++)
            adds += twin_add(&ref, buf, item_name(buf, sizeof(buf), own, j));
        expect_i64(w[i].own_adds, adds);
        expect_i64(w[i].own_card, (int64_t)fg_bloom_cardinality(&ref));
        fg_bloom_free(&ref, &heap);
    }
    expect_i64(winners, 1);
    int64_t card = 0;
    for (int i = 0; i < THREADS; i++)
        for (int j = 0; j < PER_THREAD; j += 10) {
            char fresh[32], own[16], item[24];
            snprintf(own, sizeof(own), "own%d", i);
            snprintf(fresh, sizeof(fresh), "%s:%d", own, j);
            bool found = false;
            size_t len = item_name(item, sizeof(item), own, j);
            expect_i64(fg_bf_exists(c, fresh, item, len, &found, NULL), FG_CODE_OK);
            assert_true(found);
            expect_i64(fg_bf_card(c, fresh, &card, NULL), FG_CODE_OK);
            expect_i64(card, 1);
        }
    expect_i64(fg_bf_card(c, "shared", &card, NULL), FG_CODE_OK);
    assert_true(card > THREADS * PER_THREAD * 95 / 100 && card < THREADS * PER_THREAD * 105 / 100);
    fg_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_init),
        cmocka_unit_test(test_filter_is_the_core_filter),
        cmocka_unit_test(test_filter_add_and_contains),
        cmocka_unit_test(test_filter_nonscaling_full),
        cmocka_unit_test(test_filter_last_level),
        cmocka_unit_test(test_filter_bad_options),
        cmocka_unit_test(test_mem_reserve),
        cmocka_unit_test(test_mem_defaults),
        cmocka_unit_test(test_mem_madd_mexists),
        cmocka_unit_test(test_mem_nonscaling_full),
        cmocka_unit_test(test_mem_last_level),
        cmocka_unit_test(test_mem_bad_arguments),
        cmocka_unit_test(test_mem_namespaces),
        cmocka_unit_test(test_unreachable_server),
        cmocka_unit_test(test_mem_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
