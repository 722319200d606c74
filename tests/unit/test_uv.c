/*
 * test_uv.c - the sliding HyperLogLog: Redis's hash, registers, estimator
 * and dense string (values pinned from a redis-server 7.0.15: PFDEBUG
 * GETREG, PFCOUNT, and GET after PFDEBUG TODENSE), every window of random
 * streams (with backfills and rebases) against a brute-force reference,
 * the scan kernels (portable, SSE2, AVX2) against each other on raw tiles,
 * the memory bound, allocation failures, edge times and the serialized form
 * with each corruption its loader refuses; and the bucket tiers: past
 * windows on the grid against brute force, off-grid refusals, retention,
 * memory and allocation failures; and the commands' windows with their
 * refusals' words.
 */
#include "test_heap.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uv.h"

/* ------------------------------------------------------------- helpers */

/* A hash landing in register `reg` with rank `rank` (1..51). */
static uint64_t crafted(uint32_t reg, unsigned rank) {
    return reg | (rank <= 50 ? 1ULL << (14 + rank - 1) : 0);
}

static uint64_t hash_str(const char *s) { return fg_uv_hash(s, strlen(s)); }

/* The estimate of `n` items "<prefix><i>" (as PFADD would see them). */
static uint64_t estimate_of_items(const char *prefix, int n) {
    static uint8_t regs[FG_UV_REGISTERS];
    memset(regs, 0, sizeof(regs));
    for (int i = 0; i < n; i++) {
        char item[64];
        uint64_t h = fg_uv_hash(item, (size_t)snprintf(item, sizeof(item), "%s%d", prefix, i));
        uint8_t r = fg_uv_rank(h);
        if (r > regs[fg_uv_register(h)]) regs[fg_uv_register(h)] = r;
    }
    return fg_uv_estimate(regs);
}

/* What a counter must answer: every add it accepted, by second. */
typedef struct reference {
    uint64_t *hash;
    int64_t *sec;
    size_t n, cap;
    int64_t newest;
} reference;

static void reference_add(reference *ref, uint64_t hash, int64_t sec) {
    if (ref->n == ref->cap) {
        ref->cap = ref->cap ? 2 * ref->cap : 1024;
        ref->hash = realloc(ref->hash, ref->cap * sizeof(*ref->hash));
        ref->sec = realloc(ref->sec, ref->cap * sizeof(*ref->sec));
        assert_non_null(ref->hash);
        assert_non_null(ref->sec);
    }
    ref->hash[ref->n] = hash;
    ref->sec[ref->n++] = sec;
    if (sec > ref->newest) ref->newest = sec;
}

static void reference_free(reference *ref) {
    free(ref->hash);
    free(ref->sec);
}

static void reference_registers(const reference *ref, int64_t t1, int64_t span, uint8_t *regs) {
    memset(regs, 0, FG_UV_REGISTERS);
    if (t1 < ref->newest - span) t1 = ref->newest - span;
    for (size_t i = 0; i < ref->n; i++) {
        if (ref->sec[i] < t1) continue;
        uint8_t r = fg_uv_rank(ref->hash[i]);
        if (r > regs[fg_uv_register(ref->hash[i])]) regs[fg_uv_register(ref->hash[i])] = r;
    }
}

/* Adds through the counter and, when it accepts, to the reference too:
 * an add older than newest - span is skipped by both. */
static void add_both(fg_uv *uv, reference *ref, uint64_t hash, int64_t sec) {
    bool skipped = ref->n > 0 && sec < ref->newest - uv->span;
    fg_uv_add_result r = fg_uv_add(uv, hash, sec, &alloc);
    assert_true(r == FG_UV_CHANGED || r == FG_UV_UNCHANGED);
    if (skipped) expect_i64(r, FG_UV_UNCHANGED);
    if (!skipped) reference_add(ref, hash, sec);
}

/* uv.c's scan kernels (0 portable, 1 SSE2, 2 AVX2), for holding them
 * against each other; false when this build or CPU has no such kernel. */
bool fg_uv_registers_since_kernel(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS], int kernel);
#define SCAN_KERNELS 3

/* Every kernel the host has finds the registers fg_uv_registers_since
 * found (got); returns how many kernels ran. */
static int expect_kernels_agree(const fg_uv *uv, int64_t t1, const uint8_t *got) {
    static uint8_t other[FG_UV_REGISTERS];
    int ran = 0;
    for (int k = 0; k < SCAN_KERNELS; k++) {
        if (!fg_uv_registers_since_kernel(uv, t1, other, k)) continue;
        ran++;
        for (int i = 0; i < FG_UV_REGISTERS; i++)
            if (other[i] != got[i])
                fail_msg("kernel %d, since %lld: register %d = %d, expected %d", k, (long long)t1, i, other[i],
                         got[i]);
    }
    return ran;
}

static void expect_window(const fg_uv *uv, const reference *ref, int64_t t1) {
    static uint8_t got[FG_UV_REGISTERS], want[FG_UV_REGISTERS];
    fg_uv_registers_since(uv, t1, got);
    reference_registers(ref, t1, uv->span, want);
    for (int i = 0; i < FG_UV_REGISTERS; i++)
        if (got[i] != want[i])
            fail_msg("window since %lld: register %d = %d, expected %d", (long long)t1, i, got[i], want[i]);
    assert_true(expect_kernels_agree(uv, t1, got) >= 1);
}

/* A serialized copy, to show that a failed call changed nothing. */
static uint8_t *snapshot(const fg_uv *uv, size_t *len) {
    *len = fg_uv_serialized_size(uv);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    fg_uv_serialize(uv, buf);
    return buf;
}

/* ------------------------------------------------------ Redis's HLL */

static void test_hash_registers_match_redis(void **state) {
    (void)state;
    /* PFADD k <item>; PFDEBUG GETREG k: the one non-zero register. */
    static const struct {
        const char *item;
        uint64_t hash;
        uint32_t reg;
        unsigned rank;
    } cases[] = {
        {"item:0", 0xb334fe4fa90a31b8ULL, 12728, 4},
        {"item:1", 0xd469c08796f2be45ULL, 15941, 2},
        {"hello", 0x0f656f01eecfe400ULL, 9216, 1},
        {"", 0xd8dfea6585bc9732ULL, 5938, 2},
        {"abcdefghijklmnopq", 0x876ed29fb39e50afULL, 4271, 1}, /* two blocks and a tail */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t h = hash_str(cases[i].item);
        expect_i64(h == cases[i].hash, 1);
        expect_i64(fg_uv_register(h), cases[i].reg);
        expect_i64(fg_uv_rank(h), cases[i].rank);
    }
    /* The rank saturates at 51 when the 50 high bits are zero. */
    expect_i64(fg_uv_rank(crafted(7, 51)), 51);
    expect_i64(fg_uv_rank(crafted(7, 50)), 50);
    expect_i64(fg_uv_rank(crafted(7, 1)), 1);
}

static void test_estimates_match_pfcount(void **state) {
    (void)state;
    static uint8_t empty[FG_UV_REGISTERS];
    expect_i64(fg_uv_estimate(empty), 0);
    /* PFCOUNT after PFADD of the same items. */
    expect_i64(estimate_of_items("item:", 1), 1);
    expect_i64(estimate_of_items("item:", 10), 10);
    expect_i64(estimate_of_items("item:", 100), 99);
    expect_i64(estimate_of_items("item:", 1000), 1002);
    expect_i64(estimate_of_items("u", 3000), 2987);
    expect_i64(estimate_of_items("item:", 10000), 10083);
    expect_i64(estimate_of_items("x", 100000), 100903);
}

static void test_saturated_registers_estimate(void **state) {
    (void)state;
    /* All registers at 51: tau's branch, a finite huge count. */
    static uint8_t regs[FG_UV_REGISTERS];
    memset(regs, FG_UV_MAX_RANK, sizeof(regs));
    uint64_t all = fg_uv_estimate(regs);
    assert_true(all > (1ULL << 60));
    regs[0] = 1;
    assert_true(fg_uv_estimate(regs) < all);
}

static void test_export_is_redis_dense_string(void **state) {
    (void)state;
    /* PFADD k a b c; PFDEBUG TODENSE k; GET k: these bytes, all others 0. */
    static uint8_t regs[FG_UV_REGISTERS], out[FG_UV_HLL_BYTES], want[FG_UV_HLL_BYTES];
    const char *items[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        uint64_t h = hash_str(items[i]);
        if (fg_uv_rank(h) > regs[fg_uv_register(h)]) regs[fg_uv_register(h)] = fg_uv_rank(h);
    }
    memcpy(want, "HYLL", 4);
    want[15] = 0x80;
    want[6343] = 0x01;
    want[9549] = 0x08;
    want[11851] = 0x01;
    fg_uv_to_redis_hll(regs, out);
    assert_memory_equal(out, want, FG_UV_HLL_BYTES);

    /* Every bit position of the 6-bit packing: register i = i mod 64. */
    for (int i = 0; i < FG_UV_REGISTERS; i++) regs[i] = (uint8_t)(i % 64);
    fg_uv_to_redis_hll(regs, out);
    for (int i = 0; i < FG_UV_REGISTERS; i++) {
        int bit = 16 * 8 + 6 * i;
        unsigned next = bit % 8 > 2 ? out[bit / 8 + 1] : 0; /* a register spans two bytes */
        unsigned v = (out[bit / 8] | next << 8) >> (bit % 8);
        expect_i64(v & 63, i % 64);
    }
}

/* ------------------------------------------------------- the staircase */

static void test_init_and_edges(void **state) {
    (void)state;
    fg_uv uv;
    expect_status(fg_uv_init(&uv, 0), FG_EINVAL);
    expect_status(fg_uv_init(&uv, FG_UV_MAX_SPAN + 1), FG_EINVAL);
    expect_status(fg_uv_init(&uv, 100), FG_OK);
    assert_true(fg_uv_storable(&uv));
    static uint8_t regs[FG_UV_REGISTERS], zero[FG_UV_REGISTERS];
    expect_status(fg_uv_registers_last(&uv, 10, 1000, regs), FG_OK);
    assert_memory_equal(regs, zero, sizeof(zero));

    uint64_t h = crafted(3, 5);
    expect_i64(fg_uv_add(&uv, h, -1, &alloc), FG_UV_BADTIME);
    expect_i64(fg_uv_add(&uv, h, FG_UV_MAX_SECOND + 1, &alloc), FG_UV_BADTIME);
    expect_i64(uv.entries, 0);
    expect_i64(fg_uv_add(&uv, h, 1000, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_add(&uv, h, 1000, &alloc), FG_UV_UNCHANGED);          /* same pair */
    expect_i64(fg_uv_add(&uv, crafted(3, 4), 999, &alloc), FG_UV_UNCHANGED); /* older, lower */
    expect_i64(fg_uv_add(&uv, crafted(3, 5), 999, &alloc), FG_UV_UNCHANGED); /* older, equal */
    expect_i64(fg_uv_add(&uv, crafted(3, 6), 999, &alloc), FG_UV_CHANGED);   /* older, higher */
    expect_i64(fg_uv_add(&uv, crafted(3, 6), 1000, &alloc), FG_UV_CHANGED);  /* replaces both */
    expect_i64(uv.entries, 1);
    expect_i64(fg_uv_add(&uv, crafted(3, 2), 1001, &alloc), FG_UV_CHANGED);  /* newer, lower */
    expect_i64(uv.entries, 2);

    /* Retention: newest - span is kept, one second older is skipped. */
    expect_i64(fg_uv_add(&uv, crafted(9, 1), 1001 - 100, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_add(&uv, crafted(10, 1), 1001 - 101, &alloc), FG_UV_UNCHANGED);

    /* LAST n at now: seconds now - n + 1 .. now. */
    expect_status(fg_uv_registers_last(&uv, 0, 1001, regs), FG_EINVAL);
    expect_status(fg_uv_registers_last(&uv, 101, 1001, regs), FG_EINVAL);
    expect_status(fg_uv_registers_last(&uv, 1, 1001, regs), FG_OK);
    expect_i64(regs[3], 2);
    expect_status(fg_uv_registers_last(&uv, 2, 1001, regs), FG_OK);
    expect_i64(regs[3], 6);
    expect_i64(regs[9], 0);
    expect_status(fg_uv_registers_last(&uv, 100, 1000, regs), FG_OK);
    expect_i64(regs[9], 1);
    /* A window after every item is empty; a clock behind still sees them. */
    fg_uv_registers_since(&uv, 1002, regs);
    assert_memory_equal(regs, zero, sizeof(zero));
    expect_status(fg_uv_registers_last(&uv, 1, 990, regs), FG_OK);
    expect_i64(regs[3], 6);

    /* The extremes of time. */
    fg_uv edge;
    expect_status(fg_uv_init(&edge, FG_UV_MAX_SPAN), FG_OK);
    expect_i64(fg_uv_add(&edge, h, 0, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_add(&edge, crafted(4, 1), FG_UV_MAX_SECOND, &alloc), FG_UV_CHANGED);
    assert_true(fg_uv_storable(&edge));
    fg_uv_registers_since(&edge, 0, regs);
    expect_i64(regs[3], 0); /* older than newest - span */
    expect_i64(regs[4], 1);
    fg_uv_free(&edge, &alloc);
    assert_true(fg_uv_storable(&uv));
    fg_uv_free(&uv, &alloc);
}

/* A random stream: mostly forward in time, with backfills (some beyond
 * the span), items over `registers` registers (few: long staircases,
 * row growth and shrinking), and six jumps forward by `jump` (rebases).
 * Windows are checked against the reference as the stream goes. */
static void run_stream(uint64_t seed, int64_t span, uint32_t registers, int adds, int64_t jump) {
    test_rng rng = {seed};
    fg_uv uv;
    reference ref = {0};
    expect_status(fg_uv_init(&uv, span), FG_OK);
    int64_t now = 1700000000, first_base = -1;
    for (int i = 1; i <= adds; i++) {
        if (rng_range(&rng, 0, 3) == 0) now += rng_range(&rng, 0, span < 8000 ? span / 8 + 1 : 1000);
        if (jump && i % (adds / 6) == 0) now += jump;
        int64_t sec = now;
        if (rng_range(&rng, 0, 4) == 0) sec -= rng_range(&rng, 0, span + span / 4);
        uint64_t h = rng_next(&rng);
        h = (h & ~(uint64_t)(FG_UV_REGISTERS - 1)) | ((h % registers) * (FG_UV_REGISTERS / registers));
        add_both(&uv, &ref, h, sec);
        if (first_base < 0) first_base = uv.base;
        if (i % (adds / 8) == 0) {
            assert_true(fg_uv_storable(&uv));
            for (int w = 0; w < 6; w++) expect_window(&uv, &ref, now - rng_range(&rng, 0, span + 2));
            expect_window(&uv, &ref, now);
            expect_window(&uv, &ref, uv.newest + 1);
        }
    }
    if (jump) assert_true(uv.base != first_base); /* rebased at least once */
    fg_uv_free(&uv, &alloc);
    reference_free(&ref);
}

static void test_windows_match_brute_force(void **state) {
    (void)state;
    run_stream(1, 3600, FG_UV_REGISTERS, 40000, 0);
    run_stream(2, 600, 16, 20000, 0);                  /* deep staircases */
    run_stream(3, 86400, 256, 20000, 0);
    run_stream(4, FG_UV_MAX_SPAN, 64, 8000, 9000000);  /* rebases */
    run_stream(5, 10, 4, 5000, 1 << 24);               /* rebases, tiny span */
}

/* The kernels on raw tiles: any entries below 2^31 (the encoding's bound),
 * many right at the threshold, at its neighbours, at the top of the range,
 * with every rank field 0..63, and thresholds from the lowest (64) to the
 * highest; every row count 1..51 and empty tiles. The counter is built by
 * hand (base 0), so the scan sees entries no add would make. */
static uint32_t entry_near(test_rng *rng, uint32_t threshold) {
    uint32_t rank = (uint32_t)rng_range(rng, 0, 63);
    uint64_t e;
    switch (rng_range(rng, 0, 5)) {
    case 0: return 0;
    case 1: return (uint32_t)(rng_next(rng) & 0x7FFFFFFF);
    case 2: return 0x7FFFFFC0u | rank;
    case 3: e = threshold - 64 + rank; break; /* the second before */
    case 4: e = (uint64_t)threshold + 64 + rank; break;
    default: e = threshold + rank; break;
    }
    return e > 0x7FFFFFFF ? 0x7FFFFFC0u | rank : (uint32_t)e;
}

static void test_scan_kernels_agree_on_raw_tiles(void **state) {
    (void)state;
    test_rng rng = {31};
    static uint8_t got[FG_UV_REGISTERS];
    int kernels = 0;
    for (int round = 0; round < 40; round++) {
        fg_uv uv;
        int64_t span = round % 4 == 0 ? 1 : rng_range(&rng, 1, FG_UV_MAX_SPAN);
        expect_status(fg_uv_init(&uv, span), FG_OK);
        /* Offsets newest + 1 stay below the rebase limit, 2^25: the
         * thresholds run from 64 (t1 = newest - span = base) to 2^31 - 64. */
        uv.newest = round % 4 == 3 ? (1 << 25) - 2 : round % 2 ? span : rng_range(&rng, span, (1 << 25) - 2);
        uv.entries = 1;
        uv.tiles = calloc(1, sizeof(*uv.tiles));
        assert_non_null(uv.tiles);
        for (int k = 0; k < 8; k++) {
            int64_t t1 = k == 0   ? uv.newest - span
                         : k == 1 ? uv.newest
                                  : rng_range(&rng, uv.newest - span - 2, uv.newest + 1);
            int64_t kept = t1 > uv.newest - span ? t1 : uv.newest - span;
            uint32_t threshold = (uint32_t)(kept + 1) << 6;
            fg_uv_tiles *tiles = uv.tiles;
            for (int t = 0; t < FG_UV_TILES; t++) {
                free(tiles->tile[t]);
                tiles->tile[t] = NULL;
                tiles->nrows[t] = 0;
                if (rng_range(&rng, 0, 7) == 0) continue;
                tiles->nrows[t] = (uint8_t)rng_range(&rng, 1, FG_UV_MAX_RANK);
                tiles->tile[t] = malloc((16 + (size_t)tiles->nrows[t] * 64) * sizeof(uint32_t));
                assert_non_null(tiles->tile[t]);
                for (int i = 0; i < 64 * tiles->nrows[t]; i++)
                    tiles->tile[t][16 + i] = entry_near(&rng, threshold);
            }
            fg_uv_registers_since(&uv, t1, got);
            kernels = expect_kernels_agree(&uv, t1, got);
        }
        for (int t = 0; t < FG_UV_TILES; t++) free(uv.tiles->tile[t]);
        free(uv.tiles);
    }
    /* On x86-64, SSE2 is the baseline: the SIMD path was the one tested. */
#ifdef __SSE2__
    expect_i64(kernels, __builtin_cpu_supports("avx2") ? 3 : 2);
#else
    expect_i64(kernels, 1);
#endif
}

static void test_merge_registers(void **state) {
    (void)state;
    test_rng rng = {37};
    static uint8_t acc[FG_UV_REGISTERS], regs[FG_UV_REGISTERS], want[FG_UV_REGISTERS];
    for (int i = 0; i < FG_UV_REGISTERS; i++) {
        acc[i] = (uint8_t)rng_next(&rng);
        regs[i] = (uint8_t)rng_next(&rng); /* unsigned bytes: 200 beats 100 */
        want[i] = acc[i] > regs[i] ? acc[i] : regs[i];
    }
    fg_uv_merge_registers(acc, regs);
    assert_memory_equal(acc, want, sizeof(want));
    fg_uv_merge_registers(acc, acc);
    assert_memory_equal(acc, want, sizeof(want));
}

/* ---------------------------------------------------------------- memory */

static void test_memory_bound_and_shrink(void **state) {
    (void)state;
    enum { TILES = 32 };
    fg_uv uv;
    expect_status(fg_uv_init(&uv, 1000), FG_OK);
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv));
    /* The longest staircases: rank 51 first, then one lower every second. */
    for (unsigned rank = FG_UV_MAX_RANK, sec = 5000; rank >= 1; rank--, sec++)
        for (uint32_t reg = 0; reg < TILES * 64; reg++)
            expect_i64(fg_uv_add(&uv, crafted(reg, rank), sec, &alloc), FG_UV_CHANGED);
    expect_i64(uv.entries, TILES * 64 * FG_UV_MAX_RANK);
    uint64_t full_tile = 64 + 51 * 64 * 4;
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv) + sizeof(fg_uv_tiles) + TILES * full_tile);
    assert_true(fg_uv_storable(&uv));

    /* A newer rank-51 item dominates a whole staircase: once every register
     * of tile 0 is down to one entry, its rows shrink to one. */
    for (uint32_t reg = 0; reg < 64; reg++)
        expect_i64(fg_uv_add(&uv, crafted(reg, 51), 6000, &alloc), FG_UV_CHANGED);
    expect_i64(uv.tiles->nrows[0], 1);
    expect_i64(fg_uv_bytes(&uv),
               sizeof(fg_uv) + sizeof(fg_uv_tiles) + (TILES - 1) * full_tile + 64 + 64 * 4);
    expect_i64(uv.entries, (TILES - 1) * 64 * FG_UV_MAX_RANK + 64);
    assert_true(fg_uv_storable(&uv));
    fg_uv_free(&uv, &alloc);
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv));
}

static void test_allocation_failures_change_nothing(void **state) {
    (void)state;
    test_rng rng = {11};
    fg_uv uv;
    reference ref = {0};
    expect_status(fg_uv_init(&uv, 100), FG_OK);
    int failures = 0;
    for (int i = 0; i < 3000; i++) {
        uint64_t h = (rng_next(&rng) & ~(uint64_t)16383) | (uint64_t)rng_range(&rng, 0, 300);
        int64_t sec = 1000 + i / 10;
        size_t before_len, after_len;
        uint8_t *before = snapshot(&uv, &before_len);
        heap.fail_in = 1;
        fg_uv_add_result r = fg_uv_add(&uv, h, sec, &alloc);
        heap.fail_in = 0;
        if (r == FG_UV_NOMEM) {
            failures++;
            uint8_t *after = snapshot(&uv, &after_len);
            expect_i64(after_len, before_len);
            assert_memory_equal(after, before, before_len);
            free(after);
            add_both(&uv, &ref, h, sec);
        } else {
            assert_true(r == FG_UV_CHANGED || r == FG_UV_UNCHANGED);
            reference_add(&ref, h, sec);
        }
        free(before);
    }
    assert_true(failures > 10);
    assert_true(fg_uv_storable(&uv));
    for (int64_t t = 1000; t <= 1300; t += 37) expect_window(&uv, &ref, t);

    /* A load that runs out of memory half way gives everything back. */
    size_t len;
    uint8_t *buf = snapshot(&uv, &len);
    fg_uv loaded;
    int fail = 1;
    for (;; fail++) { /* each allocation of the load fails once, in turn */
        heap.fail_in = fail;
        fg_status st = fg_uv_deserialize(&loaded, buf, len, &alloc);
        heap.fail_in = 0;
        if (st == FG_OK) break;
        expect_status(st, FG_EOVERFLOW);
    }
    assert_true(fail > 1);
    fg_uv_free(&loaded, &alloc);
    free(buf);
    fg_uv_free(&uv, &alloc);
    reference_free(&ref);
}

/* --------------------------------------------------------- serialization */

static void test_serialization_round_trip(void **state) {
    (void)state;
    test_rng rng = {21};
    fg_uv uv, back;
    expect_status(fg_uv_init(&uv, 3600), FG_OK);
    size_t len;
    uint8_t *empty = snapshot(&uv, &len);
    expect_status(fg_uv_deserialize(&back, empty, len, &alloc), FG_OK);
    expect_i64(back.entries, 0);
    assert_true(fg_uv_storable(&back));
    free(empty);

    for (int i = 0; i < 20000; i++)
        fg_uv_add(&uv, rng_next(&rng) & ~(uint64_t)0x3f00, 5000 + rng_range(&rng, 0, 4000), &alloc);
    uint8_t *buf = snapshot(&uv, &len);
    expect_status(fg_uv_deserialize(&back, buf, len, &alloc), FG_OK);
    size_t len2;
    uint8_t *again = snapshot(&back, &len2);
    expect_i64(len2, len);
    assert_memory_equal(again, buf, len);
    static uint8_t a[FG_UV_REGISTERS], b[FG_UV_REGISTERS];
    for (int64_t t = 5000; t <= 9001; t += 250) {
        fg_uv_registers_since(&uv, t, a);
        fg_uv_registers_since(&back, t, b);
        assert_memory_equal(a, b, sizeof(a));
    }
    expect_i64(fg_uv_bytes(&back) <= fg_uv_bytes(&uv), 1);
    free(again);
    free(buf);
    fg_uv_free(&back, &alloc);
    fg_uv_free(&uv, &alloc);
}

/* A counter of three entries, serialized: register 5 holds (100, 9) and
 * (101, 3), register 70 holds (101, 1); span 50, newest 101, base 50
 * (the first second minus the span); 2 minute buckets, 1 hour bucket. */
static size_t small_payload(uint8_t *out) {
    fg_uv uv;
    expect_status(fg_uv_init_tiers(&uv, 50, 2, 1, 0, 0), FG_OK);
    expect_i64(fg_uv_add(&uv, crafted(5, 9), 100, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_add(&uv, crafted(5, 3), 101, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_add(&uv, crafted(70, 1), 101, &alloc), FG_UV_CHANGED);
    size_t len = fg_uv_serialized_size(&uv);
    fg_uv_serialize(&uv, out);
    fg_uv_free(&uv, &alloc);
    return len;
}

#define HEADER 25
#define ENTRY(i) (HEADER + 7 * (i))
#define TIERS ENTRY(3)
#define MINUTE_TIER (TIERS + 10)
#define HOUR_TIER (MINUTE_TIER + 18)

static void expect_refused(const uint8_t *buf, size_t len, const char *what) {
    fg_uv uv;
    memset(&uv, 0x5A, sizeof(uv));
    if (fg_uv_deserialize(&uv, buf, len, &alloc) != FG_EINVAL) fail_msg("accepted: %s", what);
    expect_i64(uv.span, 0x5A5A5A5A5A5A5A5ALL); /* untouched */
}

/* ------------------------------------------------------------- tiers */

/* The registers of every add in [t1, t2): what any answerable window
 * must give, whenever its items were added. */
static void reference_between(const reference *ref, int64_t t1, int64_t t2, uint8_t *regs) {
    memset(regs, 0, FG_UV_REGISTERS);
    for (size_t i = 0; i < ref->n; i++) {
        if (ref->sec[i] < t1 || ref->sec[i] >= t2) continue;
        uint8_t r = fg_uv_rank(ref->hash[i]);
        if (r > regs[fg_uv_register(ref->hash[i])]) regs[fg_uv_register(ref->hash[i])] = r;
    }
}

/* Checks [t1, t2) against the reference when answered; returns the result. */
static fg_uv_window_result check_between(const fg_uv *uv, const reference *all, int64_t t1, int64_t t2) {
    static uint8_t got[FG_UV_REGISTERS], want[FG_UV_REGISTERS];
    int64_t edge = -1;
    fg_uv_window_result r = fg_uv_registers_between(uv, t1, t2, got, &edge);
    if (r == FG_UV_WINDOW_OFF_GRID) assert_true(edge == t1 || edge == t2);
    if (r != FG_UV_WINDOW_OK) return r;
    reference_between(all, t1, t2, want);
    for (int i = 0; i < FG_UV_REGISTERS; i++)
        if (got[i] != want[i])
            fail_msg("window [%lld, %lld): register %d = %d, expected %d", (long long)t1, (long long)t2, i, got[i],
                     want[i]);
    return r;
}

static int64_t floor_by(int64_t a, int64_t b) { return (a / b - (a % b != 0 && a < 0)) * b; }

/* A random stream over about `days` days with backfills up to 40 days
 * back; every accepted add goes to the reference. Windows of whole
 * retained buckets of a random tier must be answered exactly. */
static void run_tier_stream(uint64_t seed, int64_t span, int64_t tz, int adds, int64_t step) {
    test_rng rng = {seed};
    fg_uv uv;
    reference all = {0};
    expect_status(fg_uv_init_tiers(&uv, span, 60, 48, 31, tz), FG_OK);
    int64_t now = 1700000000 + rng_range(&rng, 0, 86399);
    for (int i = 1; i <= adds; i++) {
        if (rng_range(&rng, 0, 1) == 0) now += rng_range(&rng, 0, step);
        int64_t sec = now;
        int kind = (int)rng_range(&rng, 0, 7);
        if (kind == 0) sec -= rng_range(&rng, 0, 40 * 86400);
        if (kind == 1) sec -= rng_range(&rng, 0, 7200);
        uint64_t h = rng_next(&rng);
        h = (h & ~(uint64_t)(FG_UV_REGISTERS - 1)) | (h % 512) * 32; /* 512 registers: many collisions */
        fg_uv_add_result r = fg_uv_add(&uv, h, sec, &alloc);
        assert_true(r == FG_UV_CHANGED || r == FG_UV_UNCHANGED);
        reference_add(&all, h, sec);
        if (i % (adds / 6) != 0) continue;
        assert_true(fg_uv_storable(&uv));
        for (int w = 0; w < 12; w++) {
            const fg_uv_tier *tier = &uv.tiers[rng_range(&rng, 0, FG_UV_TIERS - 1)];
            int64_t newest_b = floor_by(uv.newest + tier->offset, tier->width) / tier->width;
            int64_t b = newest_b - rng_range(&rng, 0, tier->count - 1);
            int64_t len = rng_range(&rng, 1, newest_b + 2 - b);
            int64_t t1 = b * tier->width - tier->offset, t2 = t1 + len * tier->width;
            expect_i64(check_between(&uv, &all, t1, t2), FG_UV_WINDOW_OK);
        }
        /* Ending after newest: from any second within the span. */
        int64_t t1 = uv.newest - rng_range(&rng, 0, span);
        expect_i64(check_between(&uv, &all, t1, uv.newest + 1 + rng_range(&rng, 0, 100)), FG_UV_WINDOW_OK);
        /* From a day edge weeks back to after newest: days, hours, minutes, then the staircase. */
        int64_t day = floor_by(uv.newest + tz, 86400) - tz - 20 * 86400;
        expect_i64(check_between(&uv, &all, day, uv.newest + 1), FG_UV_WINDOW_OK);
        /* Arbitrary windows: exact when answered. */
        for (int w = 0; w < 6; w++) {
            int64_t a = uv.newest - rng_range(&rng, 0, 3 * 86400), z = a + rng_range(&rng, 1, 2 * 86400);
            check_between(&uv, &all, a, z);
        }
    }
    fg_uv_free(&uv, &alloc);
    reference_free(&all);
}

static void test_past_windows_match_brute_force(void **state) {
    (void)state;
    run_tier_stream(31, 3600, 0, 12000, 120);     /* ~8 days */
    run_tier_stream(32, 600, 19800, 12000, 600);  /* +5:30, ~40 days */
    run_tier_stream(33, 86400, -18000, 6000, 40); /* -5:00, ~1 day */
}

static void test_off_grid_and_bad_windows(void **state) {
    (void)state;
    fg_uv uv;
    expect_status(fg_uv_init_tiers(&uv, 600, 60, 48, 31, 3600), FG_OK);
    expect_status(fg_uv_init_tiers(&uv, 600, 60, 48, 31, 90), FG_EINVAL); /* not whole minutes */
    expect_status(fg_uv_init_tiers(&uv, 600, 1441, 0, 0, 0), FG_EINVAL);
    expect_status(fg_uv_init_tiers(&uv, 600, 0, 745, 0, 0), FG_EINVAL);
    expect_status(fg_uv_init_tiers(&uv, 600, 0, 0, 1101, 0), FG_EINVAL);
    expect_status(fg_uv_init_tiers(&uv, 600, -1, 0, 0, 0), FG_EINVAL);
    expect_status(fg_uv_init_tiers(&uv, 600, 0, 0, 0, 86460), FG_EINVAL);
    expect_status(fg_uv_init_tiers(&uv, 0, 60, 48, 31, 0), FG_EINVAL);
    expect_status(fg_uv_init_tiers(&uv, 600, 60, 48, 31, 3600), FG_OK);
    /* Days start at 23:00 UTC (tzoffset +1:00). */
    int64_t midnight = 1700006400; /* a UTC midnight */
    int64_t now = midnight + 10 * 86400 + 12 * 3600 + 30 * 60 + 17;
    expect_i64(fg_uv_add(&uv, crafted(1, 3), now, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_add(&uv, crafted(2, 4), now - 5 * 86400, &alloc), FG_UV_CHANGED); /* days only */
    expect_i64(fg_uv_add(&uv, crafted(3, 5), now - 40 * 86400, &alloc), FG_UV_UNCHANGED); /* beyond all */
    static uint8_t regs[FG_UV_REGISTERS];
    int64_t edge = 0, minute = now - 17;
    expect_i64(fg_uv_registers_between(&uv, minute, minute, regs, &edge), FG_UV_WINDOW_BAD);
    expect_i64(fg_uv_registers_between(&uv, -1, minute, regs, &edge), FG_UV_WINDOW_BAD);
    expect_i64(fg_uv_registers_between(&uv, 0, FG_UV_MAX_SECOND + 2, regs, &edge), FG_UV_WINDOW_BAD);
    /* In the past (t2 <= newest): both edges on a retained grid. */
    expect_i64(fg_uv_registers_between(&uv, minute - 60, minute, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(fg_uv_registers_between(&uv, minute - 59, minute, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(edge, minute - 59);
    expect_i64(fg_uv_registers_between(&uv, minute - 120, minute - 1, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(edge, minute - 1);
    /* A minute edge older than the 60 minutes: only the hour grid remains. */
    int64_t hour = now - 17 - 30 * 60;
    expect_i64(fg_uv_registers_between(&uv, hour - 3600 - 60, hour, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(edge, hour - 3600 - 60);
    expect_i64(fg_uv_registers_between(&uv, hour - 3600, hour, regs, &edge), FG_UV_WINDOW_OK);
    /* Days start at 23:00 UTC; 5 days back holds register 2. */
    int64_t day = midnight + 10 * 86400 - 3600;
    expect_i64(fg_uv_registers_between(&uv, midnight + 5 * 86400, day, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(fg_uv_registers_between(&uv, day - 6 * 86400, day - 86400, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(regs[2], 4);
    expect_i64(regs[1], 0);
    /* Ending after newest: any second within the span; older needs the grid. */
    expect_i64(fg_uv_registers_between(&uv, now - 599, now + 1, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(regs[1], 3);
    expect_i64(fg_uv_registers_between(&uv, now - 601, now + 1, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(fg_uv_registers_between(&uv, day - 6 * 86400, now + 1, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(regs[1], 3);
    expect_i64(regs[2], 4);
    /* Beyond every retention. */
    expect_i64(fg_uv_registers_between(&uv, day - 40 * 86400, day - 39 * 86400, regs, &edge),
               FG_UV_WINDOW_OFF_GRID);
    /* Without tiers only windows ending after newest are answered. */
    fg_uv plain;
    expect_status(fg_uv_init(&plain, 600), FG_OK);
    expect_i64(fg_uv_add(&plain, crafted(1, 3), now, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_registers_between(&plain, minute - 60, minute, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(fg_uv_registers_between(&plain, now, now + 1, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(regs[1], 3);
    fg_uv_free(&plain, &alloc);
    fg_uv_free(&uv, &alloc);
}

/* The commands' windows: the registers when the window fits, else the
 * refusal the module and the mem: backend both answer, word for word. */
static void test_command_windows_and_their_refusals(void **state) {
    (void)state;
    fg_uv uv;
    expect_status(fg_uv_init_tiers(&uv, 600, 60, 48, 0, 0), FG_OK);
    int64_t now = 1700006400 + 30 * 60 + 17;
    expect_i64(fg_uv_add(&uv, crafted(1, 3), now, &alloc), FG_UV_CHANGED);
    static uint8_t regs[FG_UV_REGISTERS];
    char msg[256];
    fg_uv_window last = {.last = true, .seconds = 600};
    assert_true(fg_uv_window_registers(&uv, &last, now, "k", 1, regs, msg, sizeof(msg)));
    expect_i64(regs[1], 3);
    last.seconds = 601;
    assert_false(fg_uv_window_registers(&uv, &last, now, "visits", 6, regs, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR LAST window of 601 seconds is longer than the SPAN of "
                             "'visits' (600 seconds)");
    fg_uv_window between = {.start = now - 17, .end = now + 1};
    assert_true(fg_uv_window_registers(&uv, &between, now, "k", 1, regs, msg, sizeof(msg)));
    expect_i64(regs[1], 3);
    between = (fg_uv_window){.start = now - 17 - 60, .end = now - 17 - 1}; /* ends off the grid */
    assert_false(fg_uv_window_registers(&uv, &between, now, "visits", 6, regs, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR BETWEEN edge 1700008199000000 is not on the grid of 'visits' "
                             "(minutes for the last 60 minutes, hours for the last 48 hours)");
    /* An hour on the grid but older than the 48 kept: out of retention, not
     * off the grid; the oldest time kept is the oldest hour's start. */
    int64_t oldest = 1700006400 - 47 * 3600;
    between = (fg_uv_window){.start = oldest - 3600, .end = oldest};
    assert_false(fg_uv_window_registers(&uv, &between, now, "visits", 6, regs, msg, sizeof(msg)));
    assert_string_equal(msg, "ERR BETWEEN edge 1699833600000000 is older than what 'visits' "
                             "keeps: its oldest time is 1699837200000000 (minutes for the last "
                             "60 minutes, hours for the last 48 hours)");
    between = (fg_uv_window){.start = oldest, .end = oldest + 3600};
    assert_true(fg_uv_window_registers(&uv, &between, now, "k", 1, regs, msg, sizeof(msg)));
    /* A key's name is quoted up to 100 bytes. */
    char name[150];
    memset(name, 'n', sizeof(name));
    last.seconds = 601;
    assert_false(fg_uv_window_registers(&uv, &last, now, name, sizeof(name), regs, msg, sizeof(msg)));
    char want[256];
    snprintf(want, sizeof(want), "ERR LAST window of 601 seconds is longer than the SPAN of '%.100s' "
             "(600 seconds)", name);
    assert_string_equal(msg, want);
    fg_uv_free(&uv, &alloc);
}

static void test_retention_and_memory(void **state) {
    (void)state;
    fg_uv uv;
    expect_status(fg_uv_init_tiers(&uv, 60, 60, 0, 0, 0), FG_OK);
    /* Blocks get room for n rounded up to 2^k or 3 * 2^(k-1): the list one
     * entry, a sparse bucket 4 pairs, the minutes' array 64 buckets but at
     * most the 60 it keeps. */
    uint64_t list = sizeof(uint64_t), array = 60 * sizeof(fg_uv_bucket *);
    uint64_t bucket = sizeof(fg_uv_bucket) + 4 * sizeof(uint32_t);
    /* Two hours, one item a minute in register 0: its staircase keeps one entry. */
    int64_t start = 1700006400;
    for (int m = 0; m < 120; m++) {
        expect_i64(fg_uv_add(&uv, crafted(0, 1), start + 60 * m, &alloc), FG_UV_CHANGED);
        expect_i64(uv.buckets, m < 60 ? m + 1 : 60);
    }
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv) + list + array + 60 * bucket);
    assert_true(fg_uv_storable(&uv));
    /* Minute 60 is the oldest kept; minute 59 is gone and a backfill skips it. */
    static uint8_t regs[FG_UV_REGISTERS];
    int64_t edge;
    expect_i64(fg_uv_registers_between(&uv, start + 3600, start + 3660, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(regs[0], 1);
    expect_i64(fg_uv_registers_between(&uv, start + 3540, start + 3600, regs, &edge), FG_UV_WINDOW_OFF_GRID);
    expect_i64(fg_uv_add(&uv, crafted(5, 9), start + 3599, &alloc), FG_UV_UNCHANGED);
    /* A backfill into a kept minute outside the span raises that bucket only. */
    expect_i64(fg_uv_add(&uv, crafted(5, 9), start + 3601, &alloc), FG_UV_CHANGED);
    expect_i64(fg_uv_registers_between(&uv, start + 3600, start + 3660, regs, &edge), FG_UV_WINDOW_OK);
    expect_i64(regs[5], 9);
    expect_i64(fg_uv_add(&uv, crafted(5, 9), start + 3601, &alloc), FG_UV_UNCHANGED);
    /* A jump of two hours frees every old bucket, and the array's room;
     * register 0's entry stays (masked) until a rebase. */
    expect_i64(fg_uv_add(&uv, crafted(1, 2), start + 4 * 3600, &alloc), FG_UV_CHANGED);
    expect_i64(uv.buckets, 1);
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv) + 2 * list + sizeof(fg_uv_bucket *) + bucket);
    assert_true(fg_uv_storable(&uv));
    fg_uv_free(&uv, &alloc);
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv));

    /* The defaults, every bucket written: 139 buckets of one pair (arrays
     * of room 60, 48 and 31). */
    expect_status(fg_uv_init_tiers(&uv, FG_UV_DEFAULT_SPAN, FG_UV_DEFAULT_MINUTES, FG_UV_DEFAULT_HOURS,
                                   FG_UV_DEFAULT_DAYS, 0), FG_OK);
    for (int64_t t = start - 31 * 86400 + 60; t <= start; t += 60)
        expect_i64(fg_uv_add(&uv, crafted(0, 1), t, &alloc) >= 0, 1);
    expect_i64(uv.buckets, 60 + 48 + 31);
    expect_i64(fg_uv_bytes(&uv), sizeof(fg_uv) + list + (60 + 48 + 31) * sizeof(fg_uv_bucket *) + 139 * bucket);
    fg_uv_free(&uv, &alloc);
}

static void test_tier_allocation_failures_change_nothing(void **state) {
    (void)state;
    test_rng rng = {41};
    fg_uv uv;
    reference all = {0};
    expect_status(fg_uv_init_tiers(&uv, 120, 10, 4, 2, 0), FG_OK);
    int failures = 0;
    int64_t now = 1700000000;
    for (int i = 0; i < 2000; i++) {
        now += rng_range(&rng, 0, 40);
        uint64_t h = (rng_next(&rng) & ~(uint64_t)16383) | (uint64_t)rng_range(&rng, 0, 300);
        int64_t sec = now - (rng_range(&rng, 0, 3) == 0 ? rng_range(&rng, 0, 3 * 86400) : 0);
        size_t before_len, after_len;
        uint8_t *before = snapshot(&uv, &before_len);
        uint64_t bytes = fg_uv_bytes(&uv);
        heap.fail_in = rng_range(&rng, 1, 4);
        fg_uv_add_result r = fg_uv_add(&uv, h, sec, &alloc);
        heap.fail_in = 0;
        if (r == FG_UV_NOMEM) {
            failures++;
            uint8_t *after = snapshot(&uv, &after_len);
            expect_i64(after_len, before_len);
            assert_memory_equal(after, before, before_len);
            expect_i64(fg_uv_bytes(&uv), bytes);
            free(after);
            r = fg_uv_add(&uv, h, sec, &alloc);
        }
        assert_true(r == FG_UV_CHANGED || r == FG_UV_UNCHANGED);
        reference_add(&all, h, sec);
        free(before);
    }
    assert_true(failures > 10);
    assert_true(fg_uv_storable(&uv));
    int64_t minute = floor_by(now, 60);
    for (int m = 1; m <= 9; m++) expect_i64(check_between(&uv, &all, minute - 60 * m, minute), FG_UV_WINDOW_OK);

    /* Loads that run out of memory at each step give everything back. */
    size_t len;
    uint8_t *buf = snapshot(&uv, &len);
    fg_uv loaded;
    for (int fail = 1; fail <= 12; fail++) {
        heap.fail_in = fail;
        expect_status(fg_uv_deserialize(&loaded, buf, len, &alloc), FG_EOVERFLOW);
        heap.fail_in = 0;
    }
    free(buf);
    fg_uv_free(&uv, &alloc);
    reference_free(&all);
}

static void test_tier_serialization_round_trip(void **state) {
    (void)state;
    test_rng rng = {51};
    fg_uv uv, back;
    expect_status(fg_uv_init_tiers(&uv, 3600, 60, 48, 31, -3600), FG_OK);
    int64_t now = 1700000000;
    for (int i = 0; i < 20000; i++) {
        now += rng_range(&rng, 0, 20);
        fg_uv_add(&uv, rng_next(&rng), now - rng_range(&rng, 0, 5 * 86400), &alloc);
    }
    size_t len, len2;
    uint8_t *buf = snapshot(&uv, &len);
    expect_status(fg_uv_deserialize(&back, buf, len, &alloc), FG_OK);
    assert_true(fg_uv_storable(&back));
    expect_i64(back.buckets, uv.buckets);
    uint8_t *again = snapshot(&back, &len2);
    expect_i64(len2, len);
    assert_memory_equal(again, buf, len);
    static uint8_t a[FG_UV_REGISTERS], b[FG_UV_REGISTERS];
    int64_t edge, hour = floor_by(now - 3600, 3600) + 3600;
    for (int64_t t = hour - 47 * 3600; t < hour; t += 3600 * 5) {
        expect_i64(fg_uv_registers_between(&uv, t, hour, a, &edge), FG_UV_WINDOW_OK);
        expect_i64(fg_uv_registers_between(&back, t, hour, b, &edge), FG_UV_WINDOW_OK);
        assert_memory_equal(a, b, sizeof(a));
    }
    free(again);
    free(buf);
    fg_uv_free(&back, &alloc);
    fg_uv_free(&uv, &alloc);
}

static void test_loader_refuses_corruption(void **state) {
    (void)state;
    uint8_t good[128], bad[128];
    size_t len = small_payload(good);
    static const uint8_t expected[] = {
        2, 50, 0, 0, 0, 101, 0, 0, 0, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, /* header */
        5, 0, 100, 0, 0, 0, 9, 5, 0, 101, 0, 0, 0, 3, 70, 0, 101, 0, 0, 0, 1,          /* entries */
        2, 0, 1, 0, 0, 0, 0, 0, 0, 0,                                                  /* tiers, tz */
        1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 5, 0, 9, 70, 0, 1, /* minute 1: registers 5, 70 */
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 5, 0, 9, 70, 0, 1, /* hour 0 */
        0, 0,                                                  /* no days */
    };
    expect_i64(len, sizeof(expected));
    assert_memory_equal(good, expected, len);
    fg_uv uv;
    expect_status(fg_uv_deserialize(&uv, good, len, &alloc), FG_OK);
    fg_uv_free(&uv, &alloc);

#define CORRUPT(what, edit)            \
    do {                               \
        memcpy(bad, good, len);        \
        size_t n = len;                \
        edit;                          \
        expect_refused(bad, n, what);  \
    } while (0)
    CORRUPT("version 1", bad[0] = 1);
    CORRUPT("version 3", bad[0] = 3);
    CORRUPT("short", n = len - 1);
    CORRUPT("long", n = len + 1);
    CORRUPT("header only", n = HEADER - 1);
    CORRUPT("span 0", bad[1] = 0);
    CORRUPT("count too big", bad[21] = 4);
    CORRUPT("register >= 16384", (bad[ENTRY(2)] = 0, bad[ENTRY(2) + 1] = 0x40));
    CORRUPT("registers unsorted", bad[ENTRY(2)] = 4);
    CORRUPT("rank 0", bad[ENTRY(2) + 6] = 0);
    CORRUPT("rank 52", bad[ENTRY(2) + 6] = 52);
    CORRUPT("rank 64", bad[ENTRY(2) + 6] = 64);
    CORRUPT("ranks not descending", bad[ENTRY(1) + 6] = 9);
    CORRUPT("same second twice", bad[ENTRY(0) + 2] = 101);
    CORRUPT("seconds descending", (bad[ENTRY(0) + 2] = 101, bad[ENTRY(1) + 2] = 100));
    CORRUPT("second after newest", bad[ENTRY(2) + 2] = 102);
    CORRUPT("second before base", bad[ENTRY(0) + 2] = 49);
    CORRUPT("nothing at newest", bad[5] = 102);
    CORRUPT("base after newest - span", bad[13] = 52);
    /* base = -2^25: newest - base + 1 reaches the rebase limit. */
    CORRUPT("offsets beyond the rebase limit", (bad[13] = 0, bad[16] = 0xFE, bad[17] = 0xFF, bad[18] = 0xFF,
                                                bad[19] = 0xFF, bad[20] = 0xFF));
    /* base = INT64_MIN: newest - base overflowed (UBSan), found by the fuzzer. */
    CORRUPT("base at INT64_MIN", (memset(bad + 13, 0, 7), bad[20] = 0x80));
    /* The staircase and the buckets must agree (a crafted payload could
     * make windows contradict each other). */
    CORRUPT("bucket register below its entry", bad[MINUTE_TIER + 14] = 8);
    CORRUPT("bucket register above the staircase", bad[MINUTE_TIER + 14] = 10);
    CORRUPT("empty with a newest",
            (bad[21] = 0, memmove(bad + HEADER, good + TIERS, 10), memset(bad + HEADER + 10, 0, 6), n = HEADER + 16));
    CORRUPT("minutes beyond the limit", (bad[TIERS] = 0xA1, bad[TIERS + 1] = 0x05));
    CORRUPT("tzoffset beyond a day", (bad[TIERS + 6] = 0x81, bad[TIERS + 7] = 0x51, bad[TIERS + 8] = 0x01));
    CORRUPT("tzoffset not whole minutes", bad[TIERS + 6] = 30);
    CORRUPT("more buckets than slots", bad[MINUTE_TIER] = 3);
    CORRUPT("buckets in a tier without slots", bad[TIERS + 2] = 0);
    CORRUPT("bucket after newest", bad[MINUTE_TIER + 2] = 2);
    CORRUPT("bucket out of retention", memset(bad + MINUTE_TIER + 2, 0xFF, 8));
    CORRUPT("bucket without registers", bad[MINUTE_TIER + 10] = 0);
    CORRUPT("bucket register count too big", bad[MINUTE_TIER + 10] = 3);
    CORRUPT("bucket rank 0", bad[MINUTE_TIER + 14] = 0);
    CORRUPT("bucket rank 52", bad[MINUTE_TIER + 14] = 52);
    CORRUPT("bucket registers unsorted", bad[MINUTE_TIER + 15] = 4);
    CORRUPT("bucket register >= 16384", bad[MINUTE_TIER + 16] = 0x40);
    CORRUPT("missing day tier", n = len - 2);
#undef CORRUPT
}

/* FG.UVCREATE's options table: the order of fg_uv_create's parameters,
 * the defaults within the ranges, and whole-minute offsets. */
static void test_create_options(void **state) {
    (void)state;
    static const char *const names[FG_UV_OPTIONS] = {"SPAN", "MINUTES", "HOURS", "DAYS",
                                                     "TZOFFSET"};
    for (int i = 0; i < FG_UV_OPTIONS; i++) {
        assert_string_equal(fg_uv_options[i].name, names[i]);
        assert_true(fg_uv_options[i].min <= fg_uv_options[i].fallback);
        assert_true(fg_uv_options[i].fallback <= fg_uv_options[i].max);
    }
    assert_int_equal(fg_uv_options[FG_UV_OPT_SPAN].max, FG_UV_MAX_SPAN);
    assert_int_equal(fg_uv_options[FG_UV_OPT_TZOFFSET].min, -FG_UV_MAX_TZOFFSET);
    assert_true(fg_uv_tzoffset_valid(-3600));
    assert_true(fg_uv_tzoffset_valid(0));
    assert_false(fg_uv_tzoffset_valid(90));
    assert_false(fg_uv_tzoffset_valid(-30));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hash_registers_match_redis, setup, teardown),
        cmocka_unit_test_setup_teardown(test_estimates_match_pfcount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_saturated_registers_estimate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_is_redis_dense_string, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_and_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_windows_match_brute_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_kernels_agree_on_raw_tiles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_registers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_bound_and_shrink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_serialization_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loader_refuses_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_past_windows_match_brute_force, setup, teardown),
        cmocka_unit_test_setup_teardown(test_off_grid_and_bad_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_windows_and_their_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_and_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tier_allocation_failures_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tier_serialization_round_trip, setup, teardown),
        cmocka_unit_test(test_create_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
