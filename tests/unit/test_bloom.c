/*
 * test_bloom.c - blocked Bloom filters and their chain: the hash, the sizing
 * (checked against an independent computation of the blocked rate), false
 * positive rates measured on a million items, growth, cardinality, memory
 * failures, and the loader's check.
 *
 * Every key is derived from a counter, so each run measures the same rates.
 */
#include "test_heap.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bloom.h"

#define BLOCK_BITS 512

/* The test heap for filters: calloc through its realloc (counted, and
 * failing when told to), whose garbage shows bits the core did not get
 * zeroed. */
static void *heap_calloc(size_t nmemb, size_t size) {
    void *p = heap_realloc(NULL, nmemb * size);
    if (p != NULL) memset(p, 0, nmemb * size);
    return p;
}

static const fg_bloom_allocator bloom_alloc = {{heap_realloc, heap_free}, heap_calloc};

/* ------------------------------------------------------------- helpers */

/* A 16-byte key: the counter and a salted copy, so that two key sets
 * (members and strangers) never overlap. */
static uint64_t key_hash(uint64_t i, uint64_t set) {
    uint8_t key[16];
    for (int b = 0; b < 8; b++) {
        key[b] = (uint8_t)(i >> (8 * b));
        key[8 + b] = (uint8_t)((i * 0x9E3779B97F4A7C15ULL ^ set) >> (8 * b));
    }
    return fg_bloom_hash(FG_BLOOM_HASH_XXH3, key, sizeof(key));
}

#define MEMBERS 1
#define STRANGERS 2

static uint64_t popcount_level(const fg_bloom_level *l) {
    uint64_t n = 0;
    for (uint64_t w = 0; w < l->nblocks * 8; w++) n += (uint64_t)__builtin_popcountll(l->bits[w]);
    return n;
}

static void expect_level_counts_exact(const fg_bloom *f) {
    for (uint32_t i = 0; i < f->nlevels; i++)
        expect_i64(f->levels[i].bits_set, popcount_level(&f->levels[i]));
}

/* Adds distinct members from *next until the filter holds `items` items. */
static void fill_to(fg_bloom *f, uint64_t items, uint64_t *next) {
    while (fg_bloom_items(f) < items) {
        fg_bloom_add_result r = fg_bloom_add(f, key_hash((*next)++, MEMBERS), &bloom_alloc);
        assert_true(r == FG_BLOOM_ADDED || r == FG_BLOOM_PRESENT);
    }
}

static double measured_rate(const fg_bloom *f, uint64_t queries) {
    uint64_t hits = 0;
    for (uint64_t i = 0; i < queries; i++) hits += fg_bloom_contains(f, key_hash(i, STRANGERS));
    return (double)hits / (double)queries;
}

static void expect_no_false_negatives(const fg_bloom *f, uint64_t members) {
    for (uint64_t i = 0; i < members; i++)
        if (!fg_bloom_contains(f, key_hash(i, MEMBERS))) fail_msg("member %llu lost", (unsigned long long)i);
}

/* ------------------------------------------------ an independent formula */

/* The blocked rate computed another way than bloom.c does: inclusion-
 * exclusion over the bits a probe needs, whose Poisson mixture has a closed
 * form, sum_j (-1)^j C(d, j) exp(-lambda (1 - (1 - j/512)^k)). It cancels
 * badly for large k, and is exact enough for k <= 10. */
static double reference_block_rate(double lambda, unsigned k) {
    double distinct[16] = {1};
    for (unsigned t = 0; t < k; t++) {
        for (unsigned d = t + 1; d >= 1; d--)
            distinct[d] = distinct[d] * d / BLOCK_BITS +
                          distinct[d - 1] * (BLOCK_BITS - (d - 1)) / BLOCK_BITS;
        distinct[0] = 0;
    }
    double rate = 0;
    for (unsigned d = 1; d <= k; d++) {
        double all_set = 0, binom = 1;
        for (unsigned j = 0; j <= d; j++) {
            double reach = -expm1((double)k * log1p(-(double)j / BLOCK_BITS));
            all_set += (j % 2 ? -binom : binom) * exp(-lambda * reach);
            binom = binom * (d - j) / (j + 1);
        }
        rate += distinct[d] * all_set;
    }
    return rate;
}

/* The rate of a level whose probed blocks hold `load` items on average:
 * one block's, or the square of a half's. */
static double reference_load_rate(double load, unsigned k, unsigned blocks) {
    double rate = reference_block_rate(load, k);
    return blocks == 1 ? rate : rate * rate;
}

/* A level's expected rate once `items` distinct items went into it. */
static double reference_rate(uint64_t items, uint64_t nblocks, unsigned k, unsigned blocks) {
    return reference_load_rate((double)items * blocks / (double)nblocks, k, blocks);
}

/* Adds that answered 1 while the load grew to `load`: each offered item is
 * added unless it is a false positive (Simpson's rule). */
static double reference_added_load(double load, unsigned k, unsigned blocks) {
    enum { STEPS = 400 };
    double h = load / STEPS, hidden = 0;
    for (int i = 0; i <= STEPS; i++) {
        double w = i == 0 || i == STEPS ? 1 : i % 2 ? 4 : 2;
        hidden += w * reference_load_rate(i * h, k, blocks);
    }
    return load - hidden * h / 3;
}

/* A level's expected rate once `adds` adds answered 1 (its capacity when it
 * is full): the load is found by Newton's method. */
static double reference_rate_after(uint64_t adds, uint64_t nblocks, unsigned k, unsigned blocks) {
    double added = (double)adds * blocks / (double)nblocks, load = added;
    for (int i = 0; i < 20; i++) {
        double rate = reference_load_rate(load, k, blocks);
        load -= (reference_added_load(load, k, blocks) - added) / (1 - rate);
    }
    return reference_load_rate(load, k, blocks);
}

/* A level's rate given its bits: the k positions of a probed block are
 * uniform and independent (repeats allowed), so a block with c bits set
 * answers yes with probability (c / 512)^k; blocks are uniform too. */
static double realized_rate(const fg_bloom_level *l) {
    double sum = 0;
    for (uint64_t b = 0; b < l->nblocks; b++) {
        int set = 0;
        for (int w = 0; w < 8; w++) set += __builtin_popcountll(l->bits[b * 8 + w]);
        sum += pow(set / (double)BLOCK_BITS, l->k);
    }
    double block = sum / (double)l->nblocks;
    return l->blocks == 1 ? block : block * block;
}

/* The whole chain: fooled by at least one level. */
static double realized_chain_rate(const fg_bloom *f) {
    double none = 1;
    for (uint32_t i = 0; i < f->nlevels; i++) none *= 1 - realized_rate(&f->levels[i]);
    return 1 - none;
}

static double binomial_sd(double rate, uint64_t queries) {
    return sqrt(rate * (1 - rate) / (double)queries);
}

/* Whether a measured rate is what the bits predict, within 4.5 standard
 * deviations of the queries' binomial noise. */
static void expect_rate_of_bits(double measured, double predicted, uint64_t queries) {
    double sd = binomial_sd(predicted, queries);
    if (fabs(measured - predicted) > 4.5 * sd)
        fail_msg("measured %.6f, the bits predict %.6f (sd %.6f)", measured, predicted, sd);
}

static double optimum_bits_per_item(double p) { return -log(p) / (log(2) * log(2)); }

/* ------------------------------------------------------------------ hash */

static void test_hash_known_values(void **state) {
    (void)state;
    /* Stored filters depend on these: they may never change. XXH3's are
     * those of Debian's libxxhash (XXH3_64bits), the legacy hash's those it
     * always had. */
    static const struct {
        const char *item;
        uint64_t xxh3, legacy;
    } known[] = {
        {"", 0x2d06800538d394c2ULL, 0x2fa19518a7082d9fULL},
        {"a", 0xe6c632b61e964e1fULL, 0xbd1f49268c14e3a0ULL},
        {"ab", 0xa873719c24d5735cULL, 0x7e3a7272919c2bd6ULL},
        {"abc", 0x78af5f94892f3950ULL, 0x303c35768522760fULL},
        {"abcd", 0x6497a96f53a89890ULL, 0x6673023d592f8bd5ULL},
        {"user:1", 0x3b577afd7fed9501ULL, 0x8a79cb512f153570ULL},
        {"user:12345678", 0x6234b26291d82f17ULL, 0x8dd2d61122cc5958ULL},
        {"0123456789abcdef", 0x64439946d8fa212dULL, 0xa5aee19bbd170561ULL},
        {"0123456789abcdefg", 0xd2e63ed5466f5c32ULL, 0x8e5d5df761fe5dd4ULL},
        {"The quick brown fox jumps over the lazy dog", 0xce7d19a5418fb365ULL,
         0xccdc0ecae48a5689ULL},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        size_t len = strlen(known[i].item);
        assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_XXH3, known[i].item, len), known[i].xxh3);
        assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_LEGACY, known[i].item, len),
                         known[i].legacy);
    }
    uint8_t bytes[300];
    for (int i = 0; i < 300; i++) bytes[i] = (uint8_t)i;
    assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_XXH3, bytes, 100), 0x004e4f921a64bd1cULL);
    assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_XXH3, bytes, 300), 0xd44052f5a3485425ULL);
    assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_LEGACY, bytes, 100), 0xd998e85e342d9362ULL);
    /* An empty item may be given as NULL. */
    assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_XXH3, NULL, 0), known[0].xxh3);
    assert_int_equal(fg_bloom_hash(FG_BLOOM_HASH_LEGACY, NULL, 0), known[0].legacy);
}

/* What the legacy hash got wrong: the length shared a word with the last 4
 * bytes of items of 4 to 7 bytes. */
static void test_hash_tells_short_items_apart(void **state) {
    (void)state;
    expect_i64(fg_bloom_hash(FG_BLOOM_HASH_LEGACY, "10330", 5),
               fg_bloom_hash(FG_BLOOM_HASH_LEGACY, "103330", 6));
    assert_true(fg_bloom_hash(FG_BLOOM_HASH_XXH3, "10330", 5) !=
                fg_bloom_hash(FG_BLOOM_HASH_XXH3, "103330", 6));
}

static uint64_t xxh3(const void *item, size_t len) {
    return fg_bloom_hash(FG_BLOOM_HASH_XXH3, item, len);
}

static void test_hash_reads_every_byte_and_the_length(void **state) {
    (void)state;
    uint8_t buf[80];
    for (size_t len = 0; len <= 70; len++) {
        for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (uint8_t)(i * 7 + len);
        uint64_t h = xxh3(buf, len);
        /* A trailing zero byte is a different item. */
        buf[len] = 0;
        assert_true(xxh3(buf, len + 1) != h);
        for (size_t at = 0; at < len; at++)
            for (int bit = 0; bit < 8; bit++) {
                buf[at] ^= (uint8_t)(1u << bit);
                if (xxh3(buf, len) == h)
                    fail_msg("len %zu: bit %d of byte %zu ignored", len, bit, at);
                buf[at] ^= (uint8_t)(1u << bit);
            }
    }
}

static void test_hash_ignores_alignment(void **state) {
    (void)state;
    uint8_t buf[64 + 8];
    const char *item = "an item read from an odd address";
    size_t len = strlen(item);
    for (fg_bloom_hash_id id = FG_BLOOM_HASH_LEGACY; id <= FG_BLOOM_HASH_XXH3; id++) {
        uint64_t h = fg_bloom_hash(id, item, len);
        for (size_t offset = 0; offset < 8; offset++) {
            memcpy(buf + offset, item, len);
            assert_int_equal(fg_bloom_hash(id, buf + offset, len), h);
        }
    }
}

/* Flipping one input bit flips each output bit half the time. */
static void check_avalanche(size_t len, int samples) {
    test_rng rng = {len};
    int flips[128][64];
    memset(flips, 0, sizeof(flips));
    uint8_t key[16];
    for (int s = 0; s < samples; s++) {
        for (size_t i = 0; i < len; i++) key[i] = (uint8_t)rng_next(&rng);
        uint64_t h = xxh3(key, len);
        for (size_t bit = 0; bit < len * 8; bit++) {
            key[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            uint64_t diff = h ^ xxh3(key, len);
            key[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            for (int out = 0; out < 64; out++) flips[bit][out] += (int)(diff >> out & 1);
        }
    }
    /* 6 standard deviations of a fair coin. */
    double tolerance = 6 * sqrt(samples * 0.25);
    for (size_t bit = 0; bit < len * 8; bit++)
        for (int out = 0; out < 64; out++)
            if (fabs(flips[bit][out] - samples / 2.0) > tolerance)
                fail_msg("len %zu: input bit %zu flips output bit %d %d times in %d", len, bit,
                         out, flips[bit][out], samples);
}

static void test_hash_avalanche(void **state) {
    (void)state;
    check_avalanche(16, 4000);
    check_avalanche(8, 4000);
    check_avalanche(5, 4000);
    check_avalanche(3, 4000);
}

/* Pearson's chi-square of counts against a uniform spread. */
static double chi_square(const uint32_t *counts, unsigned buckets, uint64_t total) {
    double expected = (double)total / buckets, chi = 0;
    for (unsigned b = 0; b < buckets; b++)
        chi += (counts[b] - expected) * (counts[b] - expected) / expected;
    return chi;
}

/* Sequential keys spread evenly over the buckets by the high bits (block
 * choice, a multiply-shift reduction) and by the low bits. */
static void check_uniform(uint64_t (*hash_of)(uint64_t), const char *what) {
    enum { BUCKETS = 1024, KEYS = 1 << 20 };
    static uint32_t high[BUCKETS], low[BUCKETS];
    memset(high, 0, sizeof(high));
    memset(low, 0, sizeof(low));
    for (uint64_t i = 0; i < KEYS; i++) {
        uint64_t h = hash_of(i);
        high[(uint64_t)(((unsigned __int128)h * BUCKETS) >> 64)]++;
        low[h % BUCKETS]++;
    }
    /* 1023 degrees of freedom: mean 1023, sd 45; allow 6 sd. */
    double limit = 1023 + 6 * 45.2;
    double chi_high = chi_square(high, BUCKETS, KEYS), chi_low = chi_square(low, BUCKETS, KEYS);
    if (chi_high > limit || chi_low > limit)
        fail_msg("%s: chi-square %.0f (high bits), %.0f (low bits), limit %.0f", what, chi_high,
                 chi_low, limit);
}

static uint64_t hash_of_integer(uint64_t i) {
    uint8_t le[8];
    for (int b = 0; b < 8; b++) le[b] = (uint8_t)(i >> (8 * b));
    return xxh3(le, sizeof(le));
}

static uint64_t hash_of_user(uint64_t i) {
    char name[32];
    int len = snprintf(name, sizeof(name), "user:%llu", (unsigned long long)i);
    return xxh3(name, (size_t)len);
}

static void test_hash_spreads_sequential_keys(void **state) {
    (void)state;
    check_uniform(hash_of_integer, "integers");
    check_uniform(hash_of_user, "user:%d");
}

/* -------------------------------------------------------------- geometry */

typedef struct pinned_geometry {
    uint64_t capacity;
    double error;
    uint64_t nblocks;
    unsigned k, blocks;
} pinned_geometry;

/* The sizing is part of the stored format (a loader recomputes it and
 * compares), so it is pinned. */
static const pinned_geometry pinned[] = {
    {1, 0.25, 1, 2, 1},
    {1000, 0.25, 7, 2, 1},
    {1000000, 0.25, 6377, 2, 1},
    {1000000000, 0.25, 6376446, 2, 1},
    {1000, 0.1, 10, 3, 1},
    {1000000, 0.1, 9869, 3, 1},
    {1, 0.01, 1, 6, 1},
    {100, 0.01, 2, 6, 1},
    {1000, 0.01, 20, 6, 1},
    {1000000, 0.01, 19550, 6, 1},
    {1000000000, 0.01, 19549742, 6, 1},
    {100, 0.008, 3, 7, 1},
    {1000000, 0.008, 20532, 7, 1},
    {100, 0.001, 3, 5, 2},
    {1000000, 0.001, 28702, 5, 2},
    {1000000000, 0.001, 28701258, 5, 2},
    {1000000, 0.0001, 38886, 6, 2},
    {1000000, 1e-05, 49507, 8, 2},
    {100, 1e-06, 7, 9, 2},
    {1000000, 1e-06, 60883, 9, 2},
    {1000000000, 1e-06, 60882328, 9, 2},
};

static void test_geometry_pinned(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) {
        uint64_t nblocks;
        uint8_t k, blocks;
        expect_status(fg_bloom_level_geometry(pinned[i].capacity, pinned[i].error, &nblocks, &k,
                                              &blocks),
                      FG_OK);
        if (nblocks != pinned[i].nblocks || k != pinned[i].k || blocks != pinned[i].blocks)
            fail_msg("capacity %llu at %g: %llu blocks, k %u, %u per item",
                     (unsigned long long)pinned[i].capacity, pinned[i].error,
                     (unsigned long long)nblocks, k, blocks);
    }
}

/* The smallest nblocks meeting 0.97 x the target, by the reference formula:
 * this one does, one block fewer does not. */
static void test_geometry_is_the_smallest_that_meets_the_target(void **state) {
    (void)state;
    const double errors[] = {0.25, 0.1, 0.05, 0.01, 0.005, 0.0049, 0.001, 1e-4, 1e-5, 1e-6};
    const uint64_t capacities[] = {1, 7, 100, 1000, 54321, 1000000, 123456789};
    for (size_t e = 0; e < sizeof(errors) / sizeof(errors[0]); e++) {
        for (size_t c = 0; c < sizeof(capacities) / sizeof(capacities[0]); c++) {
            uint64_t nblocks, cap = capacities[c];
            uint8_t k, blocks;
            expect_status(fg_bloom_level_geometry(cap, errors[e], &nblocks, &k, &blocks), FG_OK);
            expect_i64(blocks, errors[e] >= 0.005 ? 1 : 2);
            double target = 0.97 * errors[e];
            double rate = reference_rate_after(cap, nblocks, k, blocks);
            if (rate > target * (1 + 1e-7))
                fail_msg("capacity %llu at %g: rate %g over %g", (unsigned long long)cap,
                         errors[e], rate, target);
            if (nblocks > 1 &&
                reference_rate_after(cap, nblocks - 1, k, blocks) <= target * (1 - 1e-7))
                fail_msg("capacity %llu at %g: %llu blocks would do", (unsigned long long)cap,
                         errors[e], (unsigned long long)(nblocks - 1));
        }
    }
}

/* k is the best: neither neighbour fits the same capacity in fewer blocks. */
static void test_geometry_picks_the_best_k(void **state) {
    (void)state;
    const double errors[] = {0.25, 0.1, 0.01, 0.001, 1e-4, 1e-6};
    for (size_t e = 0; e < sizeof(errors) / sizeof(errors[0]); e++) {
        uint64_t nblocks, cap = 10000000;
        uint8_t k, blocks;
        expect_status(fg_bloom_level_geometry(cap, errors[e], &nblocks, &k, &blocks), FG_OK);
        for (int other = k - 1; other <= k + 1; other += 2) {
            if (other < 1) continue;
            double rate = reference_rate_after(cap, nblocks, (unsigned)other, blocks);
            if (rate < reference_rate_after(cap, nblocks, k, blocks))
                fail_msg("at %g, k = %d beats k = %u", errors[e], other, k);
        }
    }
}

/* Within 1.1 x -ln p / ln^2 2 bits per item. At 25% the items a false
 * positive hides before the level counts `capacity` adds are 10% more (the
 * classic formula counts distinct items): 1.13 x there. */
static void test_geometry_bits_per_item_near_the_optimum(void **state) {
    (void)state;
    const double errors[] = {0.25, 0.1, 0.01, 0.001, 1e-4, 1e-5, 1e-6};
    const uint64_t capacities[] = {100000, 1000000, 1000000000};
    for (size_t e = 0; e < sizeof(errors) / sizeof(errors[0]); e++)
        for (size_t c = 0; c < sizeof(capacities) / sizeof(capacities[0]); c++) {
            uint64_t nblocks;
            uint8_t k, blocks;
            expect_status(fg_bloom_level_geometry(capacities[c], errors[e], &nblocks, &k, &blocks),
                          FG_OK);
            double bits = (double)nblocks * BLOCK_BITS / (double)capacities[c];
            double allowed = errors[e] > 0.1 ? 1.14 : 1.1;
            if (bits > allowed * optimum_bits_per_item(errors[e]))
                fail_msg("%g: %.3f bits per item, optimum %.3f", errors[e], bits,
                         optimum_bits_per_item(errors[e]));
        }
}

static void test_geometry_rejects_bad_parameters(void **state) {
    (void)state;
    uint64_t nblocks = 77;
    uint8_t k = 7, blocks = 7;
    expect_status(fg_bloom_level_geometry(0, 0.01, &nblocks, &k, &blocks), FG_EINVAL);
    expect_status(fg_bloom_level_geometry(FG_BLOOM_MAX_CAPACITY + 1, 0.01, &nblocks, &k, &blocks),
                  FG_EINVAL);
    const double bad[] = {0, 1, -0.01, 1.5, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_status(fg_bloom_level_geometry(100, bad[i], &nblocks, &k, &blocks), FG_EINVAL);
    expect_i64(nblocks, 77);
    expect_i64(k, 7);
    expect_i64(blocks, 7);
}

static void test_geometry_too_big(void **state) {
    (void)state;
    uint64_t nblocks;
    uint8_t k, blocks;
    /* 2^40 items at 1% need 1.2 TiB. */
    expect_status(fg_bloom_level_geometry(FG_BLOOM_MAX_CAPACITY, 0.01, &nblocks, &k, &blocks),
                  FG_EOVERFLOW);
    /* Just under 1 TiB fits: 2^40 items at 25% take 2.95 bits each. */
    expect_status(fg_bloom_level_geometry(FG_BLOOM_MAX_CAPACITY, 0.25, &nblocks, &k, &blocks),
                  FG_OK);
    assert_true(nblocks * 64 <= (uint64_t)FG_BLOOM_MAX_BYTES);
    /* Absurd rates are sized, as long as they fit. */
    expect_status(fg_bloom_level_geometry(1000, 1e-40, &nblocks, &k, &blocks), FG_OK);
    expect_i64(k, 32);
    expect_status(fg_bloom_level_geometry(1000, 0.999, &nblocks, &k, &blocks), FG_OK);
    expect_i64(k, 1);
}

/* The per-thread memo never answers for other parameters, also once more
 * parameters than it holds went through it. */
static void test_geometry_memo_answers_only_its_own(void **state) {
    (void)state;
    enum { SETS = 80 };
    uint64_t first[SETS];
    uint8_t k[SETS], blocks;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < SETS; i++) {
            uint64_t nblocks;
            uint8_t kk;
            double error = 0.3 / (i + 1);
            expect_status(fg_bloom_level_geometry(100000 + (uint64_t)i, error, &nblocks, &kk,
                                                  &blocks),
                          FG_OK);
            if (round == 0) {
                first[i] = nblocks;
                k[i] = kk;
            }
            expect_i64(nblocks, first[i]);
            expect_i64(kk, k[i]);
        }
    /* Same capacity, another error; same error, another capacity. */
    uint64_t a, b;
    expect_status(fg_bloom_level_geometry(1000000, 0.01, &a, k, &blocks), FG_OK);
    expect_status(fg_bloom_level_geometry(1000000, 0.02, &b, k, &blocks), FG_OK);
    assert_true(a > b);
    expect_status(fg_bloom_level_geometry(2000000, 0.01, &b, k, &blocks), FG_OK);
    assert_true(b > a);
}

/* ------------------------------------------------------------------ plan */

static void test_plan_of_a_scaling_filter(void **state) {
    (void)state;
    uint64_t capacity;
    double error, total = 0;
    expect_status(fg_bloom_level_plan(0.01, 100, 2, 0, &capacity, &error), FG_OK);
    expect_i64(capacity, 100);
    assert_true(error == 0.8 * 0.01);
    total += error;
    for (uint32_t i = 1; i < 30; i++) {
        expect_status(fg_bloom_level_plan(0.01, 100, 2, i, &capacity, &error), FG_OK);
        expect_i64(capacity, 100ULL << i);
        assert_true(fabs(error - 0.2 * 0.01 * 6 / (M_PI * M_PI * i * i)) < 1e-18);
        total += error;
    }
    /* The whole chain stays within the target however long it grows. */
    assert_true(total < 0.01);
    assert_true(total > 0.0099);
}

static void test_plan_of_a_non_scaling_filter(void **state) {
    (void)state;
    uint64_t capacity = 0;
    double error = 0;
    expect_status(fg_bloom_level_plan(0.01, 1000, 0, 0, &capacity, &error), FG_OK);
    expect_i64(capacity, 1000);
    assert_true(error == 0.01);
    expect_status(fg_bloom_level_plan(0.01, 1000, 0, 1, &capacity, &error), FG_EINVAL);
}

static void test_plan_limits(void **state) {
    (void)state;
    uint64_t capacity;
    double error;
    /* Expansion 1: every level the same. */
    expect_status(fg_bloom_level_plan(0.01, 5, 1, 63, &capacity, &error), FG_OK);
    expect_i64(capacity, 5);
    expect_status(fg_bloom_level_plan(0.01, 5, 1, 64, &capacity, &error), FG_EINVAL);
    /* Capacities stop at FG_BLOOM_MAX_CAPACITY. */
    expect_status(fg_bloom_level_plan(0.01, 1ULL << 39, 2, 1, &capacity, &error), FG_OK);
    expect_i64(capacity, 1ULL << 40);
    expect_status(fg_bloom_level_plan(0.01, 1ULL << 39, 2, 2, &capacity, &error), FG_EOVERFLOW);
    expect_status(fg_bloom_level_plan(0.01, 1, 32768, 2, &capacity, &error), FG_OK);
    expect_i64(capacity, 1ULL << 30);
    expect_status(fg_bloom_level_plan(0.01, 1, 32768, 3, &capacity, &error), FG_EOVERFLOW);
    /* Bad parameters. */
    expect_status(fg_bloom_level_plan(0, 1, 2, 0, &capacity, &error), FG_EINVAL);
    expect_status(fg_bloom_level_plan(1, 1, 2, 0, &capacity, &error), FG_EINVAL);
    expect_status(fg_bloom_level_plan(NAN, 1, 2, 0, &capacity, &error), FG_EINVAL);
    expect_status(fg_bloom_level_plan(0.01, 0, 2, 0, &capacity, &error), FG_EINVAL);
    expect_status(fg_bloom_level_plan(0.01, (1ULL << 40) + 1, 2, 0, &capacity, &error),
                  FG_EINVAL);
    expect_status(fg_bloom_level_plan(0.01, 1, 32769, 0, &capacity, &error), FG_EINVAL);
}

/* ------------------------------------------------------------------ init */

static void test_init_makes_level_zero(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 1000, 2, &bloom_alloc), FG_OK);
    expect_i64(f.nlevels, 1);
    expect_i64(f.capacity0, 1000);
    expect_i64(f.expansion, 2);
    assert_true(f.error == 0.01);
    const fg_bloom_level *l = &f.levels[0];
    uint64_t nblocks;
    uint8_t k, blocks;
    expect_status(fg_bloom_level_geometry(1000, 0.008, &nblocks, &k, &blocks), FG_OK);
    expect_i64(l->nblocks, nblocks);
    expect_i64(l->k, k);
    expect_i64(l->blocks, blocks);
    expect_i64(l->capacity, 1000);
    assert_true(l->error == 0.008);
    expect_i64(l->items, 0);
    expect_i64(l->bits_set, 0);
    /* Zeroed: from calloc, the heap's realloc hands out garbage. */
    expect_i64(popcount_level(l), 0);
    assert_true(fg_bloom_storable(&f));
    expect_i64(fg_bloom_items(&f), 0);
    expect_i64(fg_bloom_cardinality(&f), 0);
    expect_i64(fg_bloom_capacity(&f), 1000);
    fg_bloom_free(&f, &bloom_alloc);
    expect_i64(f.nlevels, 0);
    assert_null(f.levels);
}

static void test_init_rejects_bad_parameters(void **state) {
    (void)state;
    fg_bloom f;
    memset(&f, 0x5A, sizeof(f));
    fg_bloom before = f;
    expect_status(fg_bloom_init(&f, 0, 100, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, 1, 100, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, NAN, 100, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, FG_BLOOM_MIN_ERROR / 2, 100, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, 0.01, 0, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, 0.01, FG_BLOOM_MAX_CAPACITY + 1, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, 0.01, 100, FG_BLOOM_MAX_EXPANSION + 1, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(NULL, 0.01, 100, 2, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_init(&f, 0.01, 100, 2, NULL), FG_EINVAL);
    /* Too big to size: refused before any allocation. */
    expect_status(fg_bloom_init(&f, 0.01, FG_BLOOM_MAX_CAPACITY, 2, &bloom_alloc), FG_EOVERFLOW);
    expect_i64(heap.calls, 0);
    assert_memory_equal(&f, &before, sizeof(f));
}

static void test_init_allocation_failures_change_nothing(void **state) {
    (void)state;
    for (int failing = 1; failing <= 2; failing++) {
        fg_bloom f;
        memset(&f, 0x5A, sizeof(f));
        fg_bloom before = f;
        heap.fail_in = failing;
        expect_status(fg_bloom_init(&f, 0.01, 100000, 2, &bloom_alloc), FG_EOVERFLOW);
        assert_memory_equal(&f, &before, sizeof(f));
        expect_i64(heap.blocks, 0);
    }
    heap.fail_in = 0;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 100000, 2, &bloom_alloc), FG_OK);
    fg_bloom_free(&f, &bloom_alloc);
}

/* ------------------------------------------------------------- add, query */

static void test_add_then_present(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 1000, 2, &bloom_alloc), FG_OK);
    uint64_t h = fg_bloom_hash(f.hash, "alice", 5);
    assert_false(fg_bloom_contains(&f, h));
    expect_i64(fg_bloom_add(&f, h, &bloom_alloc), FG_BLOOM_ADDED);
    assert_true(fg_bloom_contains(&f, h));
    const fg_bloom_level *l = &f.levels[0];
    expect_i64(l->items, 1);
    /* k bits in one block, fewer if positions repeat. */
    assert_true(l->bits_set >= 1 && l->bits_set <= l->k);
    expect_level_counts_exact(&f);

    uint64_t set_before = l->bits_set;
    expect_i64(fg_bloom_add(&f, h, &bloom_alloc), FG_BLOOM_PRESENT);
    expect_i64(l->items, 1);
    expect_i64(l->bits_set, set_before);
    expect_i64(fg_bloom_items(&f), 1);
    expect_i64(fg_bloom_cardinality(&f), 1);
    fg_bloom_free(&f, &bloom_alloc);
}

/* A PRESENT answer writes nothing, in any level. */
static void test_present_changes_no_bit(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 50, 2, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 400, &next); /* several levels */
    assert_true(f.nlevels >= 3);
    size_t bytes = (size_t)f.levels[0].nblocks * 64;
    uint8_t *copy = malloc(bytes);
    memcpy(copy, f.levels[0].bits, bytes);
    uint64_t items = fg_bloom_items(&f);
    for (uint64_t i = 0; i < 40; i++) expect_i64(fg_bloom_add(&f, key_hash(i, MEMBERS), &bloom_alloc), FG_BLOOM_PRESENT);
    assert_memory_equal(copy, f.levels[0].bits, bytes);
    expect_i64(fg_bloom_items(&f), items);
    expect_level_counts_exact(&f);
    free(copy);
    fg_bloom_free(&f, &bloom_alloc);
}

static void test_non_scaling_filter_fills_up(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 20, 0, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 20, &next);
    expect_i64(f.levels[0].items, 20);
    /* Full: a new item is refused, an old one is still present. */
    uint64_t stranger = 0;
    while (fg_bloom_contains(&f, key_hash(stranger, STRANGERS))) stranger++;
    uint64_t set = f.levels[0].bits_set;
    expect_i64(fg_bloom_add(&f, key_hash(stranger, STRANGERS), &bloom_alloc), FG_BLOOM_FULL);
    expect_i64(f.levels[0].bits_set, set);
    assert_false(fg_bloom_contains(&f, key_hash(stranger, STRANGERS)));
    expect_i64(fg_bloom_add(&f, key_hash(0, MEMBERS), &bloom_alloc), FG_BLOOM_PRESENT);
    expect_i64(f.nlevels, 1);
    expect_i64(fg_bloom_items(&f), 20);
    assert_true(fg_bloom_storable(&f));
    fg_bloom_free(&f, &bloom_alloc);
}

static void test_scaling_adds_planned_levels(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 100, 3, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 100, &next);
    expect_i64(f.nlevels, 1);
    fill_to(&f, 101, &next);
    expect_i64(f.nlevels, 2);
    fill_to(&f, 100 + 300 + 900 + 1, &next);
    expect_i64(f.nlevels, 4);
    for (uint32_t i = 0; i < f.nlevels; i++) {
        const fg_bloom_level *l = &f.levels[i];
        uint64_t capacity, nblocks;
        double error;
        uint8_t k, blocks;
        expect_status(fg_bloom_level_plan(0.01, 100, 3, i, &capacity, &error), FG_OK);
        expect_status(fg_bloom_level_geometry(capacity, error, &nblocks, &k, &blocks), FG_OK);
        expect_i64(l->capacity, capacity);
        assert_true(l->error == error);
        expect_i64(l->nblocks, nblocks);
        expect_i64(l->k, k);
        expect_i64(l->blocks, blocks);
        /* Full levels hold exactly their capacity. */
        expect_i64(l->items, i + 1 < f.nlevels ? capacity : 1);
    }
    expect_i64(fg_bloom_capacity(&f), 100 + 300 + 900 + 2700);
    expect_level_counts_exact(&f);
    assert_true(fg_bloom_storable(&f));
    expect_no_false_negatives(&f, next);
    fg_bloom_free(&f, &bloom_alloc);
}

/* Expansion 1 and capacity 1: one item per level, 64 levels, then no more. */
static void test_chain_stops_at_the_level_limit(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 1, 1, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, FG_BLOOM_MAX_LEVELS, &next);
    expect_i64(f.nlevels, FG_BLOOM_MAX_LEVELS);
    assert_true(fg_bloom_storable(&f));
    uint64_t stranger = 0;
    while (fg_bloom_contains(&f, key_hash(stranger, STRANGERS))) stranger++;
    int64_t calls = heap.calls;
    expect_i64(fg_bloom_add(&f, key_hash(stranger, STRANGERS), &bloom_alloc), FG_BLOOM_NOMEM);
    expect_i64(heap.calls, calls);
    expect_i64(f.nlevels, FG_BLOOM_MAX_LEVELS);
    expect_i64(fg_bloom_items(&f), FG_BLOOM_MAX_LEVELS);
    expect_no_false_negatives(&f, next);
    expect_i64(fg_bloom_growth_bytes(&f), 0); /* no level to come */
    fg_bloom_free(&f, &bloom_alloc);
}

/* fg_bloom_growth_bytes, which the module checks against its memory bounds
 * before an add, is what the add then allocates for the bits: 0 while the
 * newest level has room or the filter cannot grow. */
static void test_growth_bytes_is_what_the_add_allocates(void **state) {
    (void)state;
    const uint32_t expansions[] = {0, 2, 300};
    for (size_t e = 0; e < 3; e++) {
        fg_bloom f;
        expect_status(fg_bloom_init(&f, 0.001, 1000, expansions[e], &bloom_alloc), FG_OK);
        uint64_t next = 0;
        fill_to(&f, 999, &next);
        expect_i64(fg_bloom_growth_bytes(&f), 0);
        fill_to(&f, 1000, &next);
        uint64_t growth = fg_bloom_growth_bytes(&f), before = fg_bloom_bytes(&f);
        if (expansions[e] == 0) {
            expect_i64(growth, 0);
        } else {
            uint64_t capacity, nblocks;
            double error;
            uint8_t k, blocks;
            expect_status(fg_bloom_level_plan(0.001, 1000, expansions[e], 1, &capacity, &error),
                          FG_OK);
            expect_status(fg_bloom_level_geometry(capacity, error, &nblocks, &k, &blocks), FG_OK);
            expect_i64(growth, fg_bloom_level_bytes(nblocks));
            fill_to(&f, 1001, &next);
            expect_i64(f.nlevels, 2);
            expect_i64(fg_bloom_bytes(&f) - before, growth + 56); /* and a level header */
        }
        fg_bloom_free(&f, &bloom_alloc);
    }
}

static void test_add_allocation_failures_change_nothing(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 100, 2, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 100, &next);
    uint64_t stranger = 0;
    while (fg_bloom_contains(&f, key_hash(stranger, STRANGERS))) stranger++;
    uint64_t h = key_hash(stranger, STRANGERS);
    /* The bits, then the level array. */
    for (int failing = 1; failing <= 2; failing++) {
        fg_bloom before = f;
        fg_bloom_level level0 = f.levels[0];
        int64_t blocks = heap.blocks;
        heap.fail_in = failing;
        expect_i64(fg_bloom_add(&f, h, &bloom_alloc), FG_BLOOM_NOMEM);
        assert_memory_equal(&f, &before, sizeof(f));
        assert_memory_equal(&f.levels[0], &level0, sizeof(level0));
        expect_i64(heap.blocks, blocks);
        assert_false(fg_bloom_contains(&f, h));
    }
    heap.fail_in = 0;
    expect_i64(fg_bloom_add(&f, h, &bloom_alloc), FG_BLOOM_ADDED);
    expect_i64(f.nlevels, 2);
    assert_true(fg_bloom_contains(&f, h));
    fg_bloom_free(&f, &bloom_alloc);
}

/* Items that level 0 mistakes for members are no more likely to fool
 * level 1: the levels probe independently. */
static void test_levels_probe_independently(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.05, 20000, 1, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 40000, &next); /* two full levels */
    expect_i64(f.nlevels, 2);
    /* Views asking one level each, level 1 still probed as level 1 (behind
     * an empty level 0). */
    fg_bloom_level empty = f.levels[0];
    empty.bits = calloc(empty.nblocks, 64);
    fg_bloom_level pair[2] = {empty, f.levels[1]};
    fg_bloom only0 = f, only1 = f;
    only0.nlevels = 1;
    only1.levels = pair;
    uint64_t in0 = 0, in1 = 0, both = 0, queries = 400000;
    for (uint64_t i = 0; i < queries; i++) {
        uint64_t h = key_hash(i, STRANGERS);
        bool a = fg_bloom_contains(&only0, h), b = fg_bloom_contains(&only1, h);
        in0 += a;
        in1 += b;
        both += a && b;
    }
    double expected = (double)in0 * (double)in1 / (double)queries;
    if (fabs((double)both - expected) > 5 * sqrt(expected) + 5)
        fail_msg("fooled by level 0: %llu, level 1: %llu, both: %llu (independent: %.0f)",
                 (unsigned long long)in0, (unsigned long long)in1, (unsigned long long)both,
                 expected);
    free(empty.bits);
    fg_bloom_free(&f, &bloom_alloc);
}

/* -------------------------------------------- false positives, measured */

static void check_rate_at_capacity(double error, uint64_t capacity, uint64_t queries) {
    fg_bloom f;
    expect_status(fg_bloom_init(&f, error, capacity, 0, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, capacity, &next);
    expect_no_false_negatives(&f, next);
    const fg_bloom_level *l = &f.levels[0];
    double rate = measured_rate(&f, queries);
    /* The probes are uniform: the rate is what the bits predict. */
    expect_rate_of_bits(rate, realized_rate(l), queries);
    /* The bits hold every distinct item offered (`next`), false positives
     * included, so that is the load to expect the rate from; one filter
     * differs from the expectation by about 1 / sqrt(nblocks). */
    double expected = reference_rate(next, l->nblocks, l->k, l->blocks);
    double tolerance = 4 * binomial_sd(expected, queries) + 5 * expected / sqrt((double)l->nblocks);
    if (rate > error || fabs(rate - expected) > tolerance)
        fail_msg("%g at %llu: measured %.6f, expected %.6f, target %g", error,
                 (unsigned long long)capacity, rate, expected, error);

    /* Cardinality: the distinct items offered, within 2%. */
    uint64_t card = fg_bloom_cardinality(&f);
    assert_true(card >= fg_bloom_items(&f));
    if (fabs((double)card - (double)next) > 0.02 * (double)next)
        fail_msg("cardinality %llu for %llu items", (unsigned long long)card,
                 (unsigned long long)next);
    expect_level_counts_exact(&f);
    assert_true(fg_bloom_storable(&f));
    fg_bloom_free(&f, &bloom_alloc);
}

static void test_rate_at_capacity_1m_at_1_percent(void **state) {
    (void)state;
    check_rate_at_capacity(0.01, 1000000, 1000000);
}

/* 10M queries: at 0.1% the measurement's own noise is then 1%, well inside
 * the 3% the sizing leaves (this filter's bits give 0.0967%). */
static void test_rate_at_capacity_200k_at_0_1_percent(void **state) {
    (void)state;
    check_rate_at_capacity(0.001, 200000, 10000000);
}

static void test_rate_at_capacity_of_other_targets(void **state) {
    (void)state;
    check_rate_at_capacity(0.25, 20000, 200000);
    check_rate_at_capacity(0.05, 20000, 200000);
    check_rate_at_capacity(0.005, 50000, 400000);
    check_rate_at_capacity(0.0049, 50000, 400000);
}

/* Many tiny filters: a few blocks each, where block loads are far from
 * Poisson. The sizing stays on the safe side. */
static void test_rate_of_tiny_filters(void **state) {
    (void)state;
    uint64_t hits = 0, queries = 0;
    for (uint64_t filter = 0; filter < 300; filter++) {
        fg_bloom f;
        expect_status(fg_bloom_init(&f, 0.01, 100, 0, &bloom_alloc), FG_OK);
        for (uint64_t i = 0; fg_bloom_items(&f) < 100; i++)
            fg_bloom_add(&f, key_hash(i, filter << 32 | MEMBERS), &bloom_alloc);
        for (uint64_t i = 0; i < 5000; i++, queries++)
            hits += fg_bloom_contains(&f, key_hash(i, filter << 32 | STRANGERS));
        fg_bloom_free(&f, &bloom_alloc);
    }
    double rate = (double)hits / (double)queries;
    if (rate > 0.01) fail_msg("tiny filters: %.5f", rate);
}

/* Items as applications name them, from a counter. */
typedef size_t (*item_namer)(uint64_t i, char *buf);

static size_t decimal_id(uint64_t i, char *buf) {
    return (size_t)sprintf(buf, "%llu", (unsigned long long)i);
}

/* 3 little-endian bytes: short binary keys. */
static size_t short_key(uint64_t i, char *buf) {
    for (int b = 0; b < 3; b++) buf[b] = (char)(i >> (8 * b));
    return 3;
}

static size_t prefixed_key(uint64_t i, char *buf) {
    return (size_t)sprintf(buf, "tenant:acme:region:eu-west-1:session:%llu",
                           (unsigned long long)i);
}

/* The rate of a filter reserved as BF.RESERVE does (scaling, x2) for
 * 100,000 items at `error`, holding items 0..99,999, over 1M lookups of
 * items 100,000..1,099,999, its items hashed with `hash`. */
static double rate_of_named_items(fg_bloom_hash_id hash, item_namer name, double error) {
    enum { MEMBERS_N = 100000, QUERIES_N = 1000000 };
    fg_bloom f;
    expect_status(fg_bloom_init(&f, error, MEMBERS_N, 2, &bloom_alloc), FG_OK);
    f.hash = (uint8_t)hash; /* as a filter loaded with that hash */
    char buf[64];
    for (uint64_t i = 0; i < MEMBERS_N; i++) {
        size_t len = name(i, buf);
        fg_bloom_add(&f, fg_bloom_hash(hash, buf, len), &bloom_alloc);
    }
    uint64_t hits = 0;
    for (uint64_t i = MEMBERS_N; i < MEMBERS_N + QUERIES_N; i++) {
        size_t len = name(i, buf);
        hits += fg_bloom_contains(&f, fg_bloom_hash(hash, buf, len));
    }
    fg_bloom_free(&f, &bloom_alloc);
    return (double)hits / QUERIES_N;
}

/* Decimal IDs, short keys and keys sharing a long prefix meet the rate
 * within 2 x (one filter and 1M lookups: about 10 false positives
 * expected at 1e-5). */
static void test_rate_of_decimal_short_and_prefixed_items(void **state) {
    (void)state;
    const struct {
        item_namer name;
        const char *what;
    } kinds[] = {{decimal_id, "decimal IDs"}, {short_key, "3-byte keys"},
                 {prefixed_key, "prefixed keys"}};
    const double errors[] = {1e-5, 1e-3};
    for (size_t k = 0; k < 3; k++)
        for (size_t e = 0; e < 2; e++) {
            double rate = rate_of_named_items(FG_BLOOM_HASH_XXH3, kinds[k].name, errors[e]);
            if (rate > 2 * errors[e])
                fail_msg("%s at %g: measured %g", kinds[k].what, errors[e], rate);
        }
}

/* The legacy hash, which stored filters may still use, is 90 x off on
 * decimal IDs: the check above tells the hashes apart. */
static void test_rate_of_decimal_ids_under_the_legacy_hash(void **state) {
    (void)state;
    double rate = rate_of_named_items(FG_BLOOM_HASH_LEGACY, decimal_id, 1e-5);
    if (rate < 20 * 1e-5) fail_msg("legacy hash on decimal IDs: %g", rate);
}

/* The default filter of BF.ADD (1%, 100, x2) grown to 1M items: 14 levels,
 * the whole chain still within 1%. */
static void test_chain_grown_from_100_to_1m(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 100, 2, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 1000000, &next);
    expect_i64(f.nlevels, 14);
    expect_no_false_negatives(&f, next);
    double rate = measured_rate(&f, 1000000);
    if (rate > 0.01) fail_msg("chain: %.5f", rate);
    expect_rate_of_bits(rate, realized_chain_rate(&f), 1000000);
    /* Every level's expected rate is within its target too. */
    for (uint32_t i = 0; i < f.nlevels; i++) {
        const fg_bloom_level *l = &f.levels[i];
        assert_true(reference_rate_after(l->items, l->nblocks, l->k, l->blocks) <= l->error);
    }
    /* RedisBloom's chain takes 46.4 bits per item here (5,804,920 bytes). */
    expect_i64(fg_bloom_bytes(&f), 5269360);
    expect_i64(fg_bloom_capacity(&f), 100 * ((1 << 14) - 1));
    uint64_t card = fg_bloom_cardinality(&f);
    assert_true(fabs((double)card - (double)next) < 0.02 * (double)next);
    assert_true(fg_bloom_storable(&f));
    fg_bloom_free(&f, &bloom_alloc);
}

/* ------------------------------------------------------------ cardinality */

static void test_cardinality_of_small_sets(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 1000, 2, &bloom_alloc), FG_OK);
    for (uint64_t n = 1; n <= 300; n++) {
        expect_i64(fg_bloom_add(&f, key_hash(n, MEMBERS), &bloom_alloc), FG_BLOOM_ADDED);
        int64_t card = (int64_t)fg_bloom_cardinality(&f);
        if (card < (int64_t)n || card > (int64_t)n + 1)
            fail_msg("%llu items: cardinality %lld", (unsigned long long)n, (long long)card);
    }
    fg_bloom_free(&f, &bloom_alloc);
}

/* Items hidden by false positives are counted back: a 10% chain grown to
 * 100k distinct items answers within 2% of 100k (its adds alone are 2.4%
 * short), and a nearly useless 90% level stays finite and never below its
 * adds. */
static void test_cardinality_counts_the_hidden_items(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.1, 100, 2, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    for (uint64_t n = 0; n < 100000; n++)
        fg_bloom_add(&f, key_hash(next++, MEMBERS), &bloom_alloc);
    uint64_t items = fg_bloom_items(&f), card = fg_bloom_cardinality(&f);
    if (items > 98000) fail_msg("adds %llu: nothing hidden to count", (unsigned long long)items);
    if (fabs((double)card - 100000) > 2000) fail_msg("cardinality %llu", (unsigned long long)card);
    fg_bloom_free(&f, &bloom_alloc);

    expect_status(fg_bloom_init(&f, 0.9, 100000, 0, &bloom_alloc), FG_OK);
    fg_bloom_level *l = &f.levels[0];
    l->items = 100000;
    card = fg_bloom_cardinality(&f);
    assert_true(card >= 100000 && card < (UINT64_C(1) << 40));
    l->items = 7;
    assert_true(fg_bloom_cardinality(&f) >= 7);
    fg_bloom_free(&f, &bloom_alloc);
}

/* ---------------------------------------------------------------- memory */

static void test_bytes_and_alignment(void **state) {
    (void)state;
    fg_bloom f;
    /* 100 items at 0.8%: 3 blocks, taken as the allocator gives them. */
    expect_status(fg_bloom_init(&f, 0.01, 100, 2, &bloom_alloc), FG_OK);
    expect_i64(f.levels[0].nblocks, 3);
    expect_i64(fg_bloom_bytes(&f), 32 + 56 + 3 * 64);
    fg_bloom_free(&f, &bloom_alloc);

    /* 1M at 1%: 19550 blocks, 64 more bytes to align them. */
    expect_status(fg_bloom_init(&f, 0.01, 1000000, 0, &bloom_alloc), FG_OK);
    expect_i64(f.levels[0].nblocks, 19550);
    expect_i64(fg_bloom_bytes(&f), 32 + 56 + 19550 * 64 + 64);
    expect_i64((uintptr_t)f.levels[0].bits % 64, 0);
    fg_bloom_free(&f, &bloom_alloc);

    /* From 64 blocks (4 KiB) on, aligned; below, not necessarily. */
    const uint64_t sizes[] = {63, 64, 65, 1000};
    for (size_t i = 0; i < 4; i++) {
        fg_bloom g = {0.01, 1, 2, 0, FG_BLOOM_HASH_XXH3, NULL};
        fg_bloom_level geometry = {NULL, sizes[i], 1, 0, 0, 0.01, 6, 1};
        expect_status(fg_bloom_push_level(&g, &geometry, &bloom_alloc), FG_OK);
        expect_i64(popcount_level(&g.levels[0]), 0);
        uint64_t extra = sizes[i] >= 64 ? 64 : 0;
        expect_i64(fg_bloom_bytes(&g), 32 + 56 + sizes[i] * 64 + extra);
        if (extra) expect_i64((uintptr_t)g.levels[0].bits % 64, 0);
        fg_bloom_free(&g, &bloom_alloc);
    }
}

/* ------------------------------------------------------ loading, checking */

/* What a loader does: parameters, then each level's geometry pushed, then
 * its bits and counters copied in. */
static void restore(fg_bloom *copy, const fg_bloom *f) {
    fg_bloom made = {f->error, f->capacity0, f->expansion, 0, f->hash, NULL};
    for (uint32_t i = 0; i < f->nlevels; i++) {
        expect_status(fg_bloom_push_level(&made, &f->levels[i], &bloom_alloc), FG_OK);
        fg_bloom_level *l = &made.levels[i];
        expect_i64(l->items, 0);
        expect_i64(popcount_level(l), 0);
        memcpy(l->bits, f->levels[i].bits, f->levels[i].nblocks * 64);
        l->items = f->levels[i].items;
        l->bits_set = f->levels[i].bits_set;
    }
    *copy = made;
}

static void test_restored_filter_answers_the_same(void **state) {
    (void)state;
    fg_bloom f, copy;
    expect_status(fg_bloom_init(&f, 0.02, 100, 2, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 5000, &next);
    restore(&copy, &f);
    assert_true(fg_bloom_storable(&copy));
    for (uint64_t i = 0; i < 20000; i++) {
        uint64_t h = key_hash(i, STRANGERS);
        assert_true(fg_bloom_contains(&f, h) == fg_bloom_contains(&copy, h));
    }
    expect_i64(fg_bloom_cardinality(&copy), fg_bloom_cardinality(&f));
    expect_i64(fg_bloom_bytes(&copy), fg_bloom_bytes(&f));
    /* And it goes on growing the same way. */
    for (uint64_t i = next; i < next + 3000; i++)
        expect_i64(fg_bloom_add(&copy, key_hash(i, MEMBERS), &bloom_alloc),
                   fg_bloom_add(&f, key_hash(i, MEMBERS), &bloom_alloc));
    expect_i64(copy.nlevels, f.nlevels);
    fg_bloom_free(&copy, &bloom_alloc);
    fg_bloom_free(&f, &bloom_alloc);
}

static void test_push_level_checks_the_geometry(void **state) {
    (void)state;
    fg_bloom f = {0.01, 100, 2, 0, FG_BLOOM_HASH_XXH3, NULL};
    fg_bloom_level good = {NULL, 0, 100, 0, 0, 0.008, 0, 0};
    expect_status(fg_bloom_level_geometry(100, 0.008, &good.nblocks, &good.k, &good.blocks), FG_OK);
    fg_bloom_level bad[] = {
        {NULL, 0, 100, 0, 0, 0.008, 6, 1},
        {NULL, ((uint64_t)FG_BLOOM_MAX_BYTES / 64) + 1, 100, 0, 0, 0.008, 6, 1},
        {NULL, 2, 100, 0, 0, 0.008, 0, 1},
        {NULL, 2, 100, 0, 0, 0.008, 33, 1},
        {NULL, 2, 100, 0, 0, 0.008, 6, 0},
        {NULL, 2, 100, 0, 0, 0.008, 6, 3},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_status(fg_bloom_push_level(&f, &bad[i], &bloom_alloc), FG_EINVAL);
    expect_i64(heap.calls, 0);
    expect_status(fg_bloom_push_level(NULL, &good, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_push_level(&f, NULL, &bloom_alloc), FG_EINVAL);
    expect_status(fg_bloom_push_level(&f, &good, NULL), FG_EINVAL);

    /* Allocation failures: the bits, then the level array. */
    for (int failing = 1; failing <= 2; failing++) {
        heap.fail_in = failing;
        expect_status(fg_bloom_push_level(&f, &good, &bloom_alloc), FG_EOVERFLOW);
        expect_i64(f.nlevels, 0);
        assert_null(f.levels);
        expect_i64(heap.blocks, 0);
    }
    heap.fail_in = 0;
    /* The counters start at zero whatever the geometry says. */
    good.items = 5;
    good.bits_set = 9;
    good.bits = (uint64_t *)&f;
    expect_status(fg_bloom_push_level(&f, &good, &bloom_alloc), FG_OK);
    expect_i64(f.levels[0].items, 0);
    expect_i64(f.levels[0].bits_set, 0);
    assert_true(f.levels[0].bits != (uint64_t *)&f);
    assert_true(fg_bloom_storable(&f));

    /* No more than FG_BLOOM_MAX_LEVELS. */
    for (uint32_t i = 1; i < FG_BLOOM_MAX_LEVELS; i++)
        expect_status(fg_bloom_push_level(&f, &good, &bloom_alloc), FG_OK);
    expect_status(fg_bloom_push_level(&f, &good, &bloom_alloc), FG_EINVAL);
    fg_bloom_free(&f, &bloom_alloc);
}

/* A valid three-level filter, broken one rule at a time. */
static void test_storable_rejects_each_broken_rule(void **state) {
    (void)state;
    fg_bloom f;
    expect_status(fg_bloom_init(&f, 0.01, 100, 2, &bloom_alloc), FG_OK);
    uint64_t next = 0;
    fill_to(&f, 100 + 200 + 50, &next);
    expect_i64(f.nlevels, 3);
    assert_true(fg_bloom_storable(&f));
    fg_bloom saved = f;
    fg_bloom_level levels[3];
    memcpy(levels, f.levels, sizeof(levels));

#define BROKEN(change)                                      \
    do {                                                    \
        change;                                             \
        if (fg_bloom_storable(&f)) fail_msg("accepted: %s", #change); \
        f = saved;                                          \
        memcpy(f.levels, levels, sizeof(levels));          \
        assert_true(fg_bloom_storable(&f));                 \
    } while (0)

    /* The parameters. */
    BROKEN(f.error = 0);
    BROKEN(f.error = 1);
    BROKEN(f.error = NAN);
    BROKEN(f.error = 0.02);
    BROKEN(f.error = nextafter(0.01, 1));
    BROKEN(f.capacity0 = 0);
    BROKEN(f.capacity0 = 101);
    BROKEN(f.capacity0 = FG_BLOOM_MAX_CAPACITY + 1);
    BROKEN(f.expansion = 3);
    BROKEN(f.expansion = FG_BLOOM_MAX_EXPANSION + 1);
    BROKEN(f.expansion = 0); /* non-scaling with three levels */
    BROKEN(f.nlevels = 0);
    BROKEN(f.nlevels = FG_BLOOM_MAX_LEVELS + 1);
    BROKEN(f.levels = NULL);
    /* A level's plan and geometry. */
    BROKEN(f.levels[1].capacity = 201);
    BROKEN(f.levels[1].error = nextafter(f.levels[1].error, 1));
    BROKEN(f.levels[1].nblocks -= 1);
    BROKEN(f.levels[1].nblocks += 1);
    BROKEN(f.levels[2].k -= 1);
    BROKEN(f.levels[2].k += 1);
    BROKEN(f.levels[2].blocks = 1);
    BROKEN(f.levels[0].blocks = 2);
    BROKEN(f.levels[2].bits = NULL);
    /* The counters. */
    BROKEN(f.levels[2].items = f.levels[2].capacity + 1);
    BROKEN(f.levels[0].items -= 1); /* an older level not full */
    BROKEN(f.levels[1].items += 1);
    BROKEN(f.levels[2].bits_set += 1);
    BROKEN(f.levels[2].bits_set -= 1);
    BROKEN(f.levels[2].items = 0); /* bits without items */
    BROKEN(f.levels[2].items = f.levels[2].bits_set + 1); /* fewer bits than adds */
    /* More bits than the adds could set. */
    BROKEN(f.levels[2].items = f.levels[2].bits_set / (f.levels[2].k * 2u) - 1);
    /* A bit that is not counted. */
    uint64_t *word = &f.levels[1].bits[3];
    uint64_t was = *word;
    *word ^= 1;
    assert_false(fg_bloom_storable(&f));
    *word = was;
    assert_true(fg_bloom_storable(&f));
#undef BROKEN

    /* A full newest level is fine (the next add grows the chain). */
    fg_bloom_free(&f, &bloom_alloc);
    expect_status(fg_bloom_init(&f, 0.01, 30, 0, &bloom_alloc), FG_OK);
    next = 0;
    fill_to(&f, 30, &next);
    assert_true(fg_bloom_storable(&f));
    assert_false(fg_bloom_storable(NULL));
    fg_bloom_free(&f, &bloom_alloc);
}

/* A filter's first level: its bytes as the plan and geometry give them,
 * and FG_EINVAL for one too big to be planned (BF.RESERVE's "too big",
 * told apart from a lack of memory). */
static void test_first_level_bytes(void **state) {
    (void)state;
    uint64_t bytes, capacity, nblocks;
    double error;
    uint8_t k, blocks;
    expect_status(fg_bloom_first_level_bytes(0.01, 1000, 2, &bytes), FG_OK);
    expect_status(fg_bloom_level_plan(0.01, 1000, 2, 0, &capacity, &error), FG_OK);
    expect_status(fg_bloom_level_geometry(capacity, error, &nblocks, &k, &blocks), FG_OK);
    assert_int_equal(bytes, fg_bloom_level_bytes(nblocks));
    assert_true(bytes > 1000);
    expect_status(fg_bloom_first_level_bytes(1e-9, FG_BLOOM_MAX_CAPACITY, 2, &bytes), FG_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hash_known_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_tells_short_items_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_reads_every_byte_and_the_length, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hash_ignores_alignment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_avalanche, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_spreads_sequential_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_geometry_pinned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_geometry_is_the_smallest_that_meets_the_target,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_geometry_picks_the_best_k, setup, teardown),
        cmocka_unit_test_setup_teardown(test_geometry_bits_per_item_near_the_optimum, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_geometry_rejects_bad_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_geometry_too_big, setup, teardown),
        cmocka_unit_test_setup_teardown(test_geometry_memo_answers_only_its_own, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_of_a_scaling_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_of_a_non_scaling_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_makes_level_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_rejects_bad_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_allocation_failures_change_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_add_then_present, setup, teardown),
        cmocka_unit_test_setup_teardown(test_present_changes_no_bit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_scaling_filter_fills_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scaling_adds_planned_levels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain_stops_at_the_level_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_bytes_is_what_the_add_allocates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_add_allocation_failures_change_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_levels_probe_independently, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_at_capacity_1m_at_1_percent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_at_capacity_200k_at_0_1_percent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rate_at_capacity_of_other_targets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_of_tiny_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_of_decimal_short_and_prefixed_items, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rate_of_decimal_ids_under_the_legacy_hash, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chain_grown_from_100_to_1m, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cardinality_of_small_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cardinality_counts_the_hidden_items, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_and_alignment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restored_filter_answers_the_same, setup, teardown),
        cmocka_unit_test_setup_teardown(test_push_level_checks_the_geometry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_storable_rejects_each_broken_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_level_bytes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
