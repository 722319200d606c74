/*
 * bloom.c - blocked Bloom filters sized for their real false-positive rate,
 * and the scalable chain built from them (see bloom.h for the design).
 *
 * Hash. Filters hash with XXH3 (64 bits, seed 0) from Debian's
 * libxxhash-dev, compiled into this file (XXH_INLINE_ALL), so nothing links
 * against libxxhash at run time. XXH3 is specified byte for byte (the same
 * value on every platform and version) and passes SMHasher. 64 bits are
 * enough: the probes are derived from them, and two items share all 64 with
 * probability 2^-64, far below any rate a filter is sized for. Not a keyed
 * hash: whoever knows it can craft colliding items, which is no worse than
 * searching for false positives.
 *
 * Filters stored before XXH3 keep the hash their bits were set with
 * (fg_bloom.hash, FG_BLOOM_HASH_LEGACY), kept here unchanged for them only:
 * a multiply-mix of its own whose short-item branch put the length in the
 * same word as the last 4 bytes, so items of 4 to 7 bytes collided (100,000
 * decimal IDs at 1e-5 measured 9e-4).
 *
 * Probes. Level i derives a 64-bit seed g from the item's hash: the hash
 * itself for level 0, a bijective remix of hash + i x step for i >= 1, so
 * two items that collide in one level are independent in the others. The
 * first block is the multiply-shift reduction of g (g x nblocks / 2^64, no
 * modulo); a two-block level takes its second block the same way from the
 * first word of a splitmix64 stream seeded with g, and the k bit positions
 * of each block come from the next words, seven 9-bit positions per word.
 * Positions may repeat, exactly as the sizing below assumes.
 *
 * Sizing. A block that holds i items (k uniform throws each, repeats
 * allowed) answers a random probe of k positions "present" with probability
 *
 *     e(i) = sum_d P(k throws cover d distinct bits) x A(d, k i),
 *
 * where A(d, t) is the probability that d given bits are all hit by t
 * throws. Block loads are Poisson(lambda) (items per block, or half-items
 * for two-block levels, whose rate is the square of a half's), so the rate
 * is F(lambda) = sum_i Pois(i; lambda) e(i). A is tabulated by its
 * recurrence over throws (applied k throws at a time, as a small matrix),
 *
 *     A(d, t + 1) = d/512 x A(d - 1, t) + (1 - d/512) x A(d, t),
 *
 * all terms positive: no cancelling alternating sums. This is the exact
 * expectation under the Poisson load model; the common shortcut
 * (1 - (1 - 1/512)^(k i))^k ignores that the k query bits of a block are
 * dependent and may repeat, and underestimates the rate by 1% (k = 6) to
 * 2% (k = 9) per block.
 *
 * A level is full after `capacity` adds that answered 1, and by then the
 * items that false positives hid were offered too: its blocks hold more
 * than capacity items. Offered load x adds (1 - F(x)) dx, so the load of
 * adds is lambda - integral_0^lambda F (8-point Gauss-Legendre): 10% below
 * lambda at a 25% target, 1.2% at 5%, 0.2% at 1%. Without this a full 25%
 * filter measures 28%.
 *
 * For each k, Newton's method on log F against log lambda (F increases,
 * nearly as a power of lambda), safeguarded by bisection, finds where F is
 * 0.97 x the target, and nblocks = ceil(capacity / load of adds). The k
 * with the fewest blocks wins (then the larger load, then fewer probes),
 * found by climbing from log2(1 / target): three values of k, about 40
 * evaluations of F of ~100 terms, 20 us. The 3% margin keeps the measured
 * rate of a full filter below its target.

 * A level's geometry is computed again by the loader's check (storable) and
 * must come out equal, so it depends only on (capacity, error) through
 * IEEE arithmetic and exp/log/log1p/expm1/sqrt. log m! is computed here
 * (Stirling's series), not with lgamma, which writes the global signgam.
 *
 * Chain. Adds go to the newest level; a level is full at items == capacity,
 * and the next add opens level nlevels with fg_bloom_level_plan's capacity
 * and rate. So every level but the newest holds exactly `capacity` items, and
 * the newest at most that. An add first checks every level (newest first):
 * an item that may be present anywhere changes nothing.
 *
 * Cardinality. An item that a false positive hid was offered but set no
 * bit, so neither the adds nor the bits count it. Each add of a level stands
 * for 1 / (1 - rate) offers at the rate of that moment (the older levels'
 * rates and this level's as it filled): the estimate integrates that.
 *
 * Memory. The bits of a level are nblocks x 64 bytes, zeroed by the
 * allocator's calloc, never by hand: an allocator hands out fresh pages
 * already zero, while writing zeros over a 1 GB array takes seconds and
 * commits all of it at once. From BLOOM_ALIGN_FROM_BYTES up the bits are
 * over-allocated by 64 bytes and aligned by hand (the byte just before the
 * aligned start holds the offset); smaller arrays are used as the allocator
 * returns them: they are few cache lines, and jemalloc (Redis's allocator)
 * returns multiples of 64 bytes aligned anyway. This keeps a tiny per-user
 * filter 64 bytes smaller.
 */

#include "bloom.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define XXH_INLINE_ALL /* compiled in: no libxxhash at run time */
#include <xxhash.h>

#define BLOCK_BITS 512
#define BLOCK_WORDS 8
#define POSITION_BITS 9 /* log2(BLOCK_BITS) */
#define POSITIONS_PER_WORD 7
#define MAX_K 32
#define MAX_NBLOCKS ((uint64_t)FG_BLOOM_MAX_BYTES / FG_BLOOM_BLOCK_BYTES)

/* Levels aim at 0.97 x their target, leaving room for the randomness of
 * one filter and of the queries that measure it. */
#define SIZING_MARGIN 0.97
/* Below this target a level probes two blocks per item. */
#define TWO_BLOCKS_BELOW 0.005

/* Level 0 of a scaling filter gets 0.8 of the target; the others share the
 * remaining 0.2 as 6 / (pi^2 i^2), which sums to 1 over i >= 1. (0.9 would
 * keep a reserved 1e-6 filter within 1.1 x the optimum memory, 1.105 now,
 * but costs a grown default filter 7% more memory.) */
#define FIRST_LEVEL_SHARE 0.8
#define LATER_LEVELS_SHARE (0.2 * 6.0 / (3.14159265358979323846 * 3.14159265358979323846))

/* fg_bloom_bytes: the struct sizes on 64-bit platforms, fixed so that
 * BF.INFO answers the same everywhere. */
#define FILTER_HEADER_BYTES 32 /* sizeof(fg_bloom) */
#define LEVEL_HEADER_BYTES 56  /* sizeof(fg_bloom_level) */
#define BLOOM_ALIGN_FROM_BYTES 4096

/* ------------------------------------------------------------------ hash */

/* The legacy hash's keys. */
#define HASH_SEED 0x819ce545fb485559ULL
#define HASH_K1 0xbdf40770954a20afULL
#define HASH_K2 0xf30afb44c3f86ae5ULL
#define GOLDEN 0x9e3779b97f4a7c15ULL     /* splitmix64's step, 2^64 / phi */
#define LEVEL_STEP 0x6d098147d3e00aa7ULL /* seeds level i >= 1 */

/* The 128-bit product of a and b. */
static inline void mul128(uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi) {
#ifdef __SIZEOF_INT128__
    unsigned __int128 r = (unsigned __int128)a * b;
    *lo = (uint64_t)r;
    *hi = (uint64_t)(r >> 64);
#else
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (mid << 32) | (p00 & 0xffffffffu);
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

static inline uint64_t fold_mul(uint64_t a, uint64_t b) {
    uint64_t lo, hi;
    mul128(a, b, &lo, &hi);
    return lo ^ hi;
}

/* floor(x * n / 2^64): a uniform x mapped onto [0, n) without a division. */
static inline uint64_t reduce(uint64_t x, uint64_t n) {
    uint64_t lo, hi;
    mul128(x, n, &lo, &hi);
    return hi;
}

/* splitmix64's output function: a bijection with full avalanche. */
static inline uint64_t scramble(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The n (at most 8) bytes at p as a little-endian integer, on any host:
 * memcpy fills the low-addressed bytes of v, which a big-endian host then
 * reverses into the low-order ones. */
static inline uint64_t read_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    memcpy(&v, p, n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* FG_BLOOM_HASH_LEGACY, for the filters stored with it: the item read 16
 * bytes at a time as two little-endian words, each pair folded with a
 * 64 x 64 -> 128-bit multiply (high and low halves xored), shorter items
 * with overlapping loads, the length xored into the state, and a
 * splitmix64 finalizer. Items of 4 to 7 bytes collide (see the top). */
static uint64_t legacy_hash(const void *item, size_t len) {
    const uint8_t *p = item;
    uint64_t state = HASH_SEED ^ (uint64_t)len, a, b;

    if (len > 16) {
        size_t left = len;
        for (; left > 16; p += 16, left -= 16)
            state = fold_mul(read_le(p, 8) ^ HASH_K1, read_le(p + 8, 8) ^ state);
        a = read_le(p + left - 16, 8); /* the last 16 bytes, overlapping the loop's */
        b = read_le(p + left - 8, 8);
    } else if (len >= 8) {
        a = read_le(p, 8);
        b = read_le(p + len - 8, 8);
    } else if (len >= 4) {
        a = read_le(p, 4);
        b = read_le(p + len - 4, 4);
    } else if (len > 0) {
        a = (uint64_t)p[0] | (uint64_t)p[len / 2] << 8 | (uint64_t)p[len - 1] << 16;
        b = 0;
    } else {
        a = b = 0;
    }
    return scramble(fold_mul(a ^ HASH_K2, b ^ state));
}

uint64_t fg_bloom_hash(fg_bloom_hash_id id, const void *item, size_t len) {
    return id == FG_BLOOM_HASH_LEGACY ? legacy_hash(item, len) : XXH3_64bits(item, len);
}

/* ---------------------------------------------------------------- probes */

typedef struct bloom_probe {
    uint64_t block[2]; /* word offsets of the blocks in the level's bits */
    uint64_t seed;     /* of the position stream */
} bloom_probe;

static void probe_make(const fg_bloom_level *l, uint32_t level, uint64_t hash, bloom_probe *p) {
    uint64_t g = level == 0 ? hash : scramble(hash + level * LEVEL_STEP);
    p->block[0] = reduce(g, l->nblocks) * BLOCK_WORDS;
    if (l->blocks == 2) {
        p->block[1] = reduce(scramble(g + GOLDEN), l->nblocks) * BLOCK_WORDS;
        g += GOLDEN; /* the stream goes on after the word just used */
    }
    p->seed = g;
}

/* Walks the k positions of each probed block. */
typedef struct position_stream {
    uint64_t state, word;
    unsigned left;
} position_stream;

static inline unsigned next_position(position_stream *s) {
    if (s->left == 0) {
        s->state += GOLDEN;
        s->word = scramble(s->state);
        s->left = POSITIONS_PER_WORD;
    }
    unsigned pos = (unsigned)(s->word & (BLOCK_BITS - 1));
    s->word >>= POSITION_BITS;
    s->left--;
    return pos;
}

/* One branch per block rather than per bit: whether a miss shows at the
 * first bit or the fifth is unpredictable, and a mispredicted branch costs
 * more than the few bits left to test in a cache line already loaded. */
static bool level_has(const fg_bloom_level *l, const bloom_probe *p) {
    position_stream s = {p->seed, 0, 0};
    for (unsigned b = 0; b < l->blocks; b++) {
        const uint64_t *block = l->bits + p->block[b];
        uint64_t all = 1;
        for (unsigned i = 0; i < l->k; i++) {
            unsigned pos = next_position(&s);
            all &= block[pos / 64] >> (pos % 64);
        }
        if (!(all & 1)) return false;
    }
    return true;
}

/* Sets the probe's bits; returns how many were 0. */
static unsigned level_set(fg_bloom_level *l, const bloom_probe *p) {
    position_stream s = {p->seed, 0, 0};
    unsigned flipped = 0;
    for (unsigned b = 0; b < l->blocks; b++) {
        uint64_t *block = l->bits + p->block[b];
        for (unsigned i = 0; i < l->k; i++) {
            unsigned pos = next_position(&s);
            uint64_t bit = (uint64_t)1 << (pos % 64);
            flipped += !(block[pos / 64] & bit);
            block[pos / 64] |= bit;
        }
    }
    return flipped;
}

/* --------------------------------------------------------------- sizing */

/* Loads (items per block) for which e(i) is tabulated; beyond, e is taken
 * as 1, which only overestimates the rate. Enough for every k >= 2 and for
 * k = 1 up to targets of about 0.9 (16 KiB of stack). */
#define TABLE_LOADS 2048

/* e(i) for one k, extended on demand. */
typedef struct occupancy {
    unsigned k, filled;                 /* e[0 .. filled) computed */
    double distinct[MAX_K + 1];         /* P(k throws cover exactly d distinct bits) */
    double item[MAX_K + 1][MAX_K + 1];  /* A(d, t + k) = sum_j item[d][j] A(j, t) */
    double hit[MAX_K + 1];              /* A(d, k x filled) */
    double e[TABLE_LOADS];
} occupancy;

static void occupancy_init(occupancy *o, unsigned k) {
    memset(o, 0, offsetof(occupancy, e));
    o->k = k;
    o->distinct[0] = 1;
    o->hit[0] = 1;
    for (unsigned d = 0; d <= k; d++) o->item[d][d] = 1;
    for (unsigned t = 0; t < k; t++) {
        /* One more throw: it lands on a bit seen before or on a new one. */
        for (unsigned d = t + 1; d >= 1; d--)
            o->distinct[d] = o->distinct[d] * d / BLOCK_BITS +
                             o->distinct[d - 1] * (BLOCK_BITS - (d - 1)) / BLOCK_BITS;
        o->distinct[0] = 0;
        /* The throw recurrence, applied to the item's matrix (one row per d;
         * row d only reads rows d and d - 1, so downwards in place). */
        for (unsigned d = k; d >= 1; d--)
            for (unsigned j = 0; j <= d; j++)
                o->item[d][j] = (double)d / BLOCK_BITS * o->item[d - 1][j] +
                                (1 - (double)d / BLOCK_BITS) * o->item[d][j];
    }
}

/* Tabulates e up to `load` (e = 1 from TABLE_LOADS on) and returns e(load). */
static double occupancy_extend(occupancy *o, uint64_t load) {
    if (load >= TABLE_LOADS) return 1;
    while (o->filled <= load) {
        double e = 0;
        for (unsigned d = 1; d <= o->k; d++) e += o->distinct[d] * o->hit[d];
        o->e[o->filled++] = e;
        /* The next item; row d reads hit[0 .. d], so downwards in place. */
        for (unsigned d = o->k; d >= 1; d--) {
            double h = 0;
            for (unsigned j = 0; j <= d; j++) h += o->item[d][j] * o->hit[j];
            o->hit[d] = h;
        }
    }
    return o->e[load];
}

static inline double occupancy_e(occupancy *o, uint64_t load) {
    return load < o->filled ? o->e[load] : occupancy_extend(o, load);
}

/* log(m!): exact sums for small m, Stirling's series (error < 1e-17 from
 * m = 16 on) above. */
static double log_factorial(uint64_t m) {
    if (m < 16) {
        double s = 0;
        for (uint64_t i = 2; i <= m; i++) s += log((double)i);
        return s;
    }
    double x = (double)m, x2 = x * x;
    return x * log(x) - x + 0.5 * log(2 * 3.14159265358979323846 * x) +
           (1.0 / 12 - (1.0 / 360 - 1.0 / (1260 * x2)) / x2) / x;
}

/* F(lambda) = sum_i Pois(i; lambda) e(i), and its derivative
 * sum_i Pois(i; lambda) (e(i + 1) - e(i)), summed outwards from the mode
 * until the terms no longer matter. */
static double blocked_rate(occupancy *o, double lambda, double *slope) {
    uint64_t mode = (uint64_t)lambda;
    double at_mode = exp(-lambda + (double)mode * log(lambda) - log_factorial(mode));
    double e_mode = occupancy_e(o, mode);
    double sum = 0, dsum = 0, pois = at_mode, e = e_mode;

    for (uint64_t i = mode;; i++) {
        double e_next = occupancy_e(o, i + 1);
        sum += pois * e;
        dsum += pois * (e_next - e);
        pois *= lambda / (double)(i + 1);
        e = e_next;
        if (((double)i > lambda && pois < 1e-18 * sum) || pois == 0) break;
    }
    pois = at_mode;
    e = e_mode;
    for (uint64_t i = mode; i > 0; i--) {
        double e_below = occupancy_e(o, i - 1);
        pois *= (double)i / lambda;
        sum += pois * e_below;
        dsum += pois * (e - e_below);
        if (pois * e_below < 1e-18 * sum) break; /* and the terms below are smaller */
        e = e_below;
    }
    *slope = dsum;
    return sum;
}

/* The load at which F reaches the target, within [lo, hi], where F(hi)
 * exceeds every target (0 when F(lo) already does). Newton on log F against
 * log load, kept inside a bracket that bisection shrinks whenever a step
 * would leave it. */
static double max_load(occupancy *o, double target, double lo, double hi) {
    double slope;
    if (blocked_rate(o, lo, &slope) > target) return 0;

    double u_lo = log(lo), u_hi = log(hi), log_target = log(target);
    /* Start from the classic estimate, which ignores block loads. */
    double guess = -log1p(-exp(log_target / o->k)) * BLOCK_BITS / o->k;
    double u = guess > lo && guess < hi ? log(guess) : 0.5 * (u_lo + u_hi);
    for (int iter = 0; iter < 200 && u_hi - u_lo > 1e-13; iter++) {
        double load = exp(u), f = blocked_rate(o, load, &slope);
        if (f <= target)
            u_lo = u;
        else
            u_hi = u;
        if (f > 0 && slope > 0) {
            double step = (log(f) - log_target) * f / (load * slope);
            if (fabs(step) < 1e-14) break;
            u -= step;
        }
        if (!(u > u_lo && u < u_hi)) u = 0.5 * (u_lo + u_hi);
    }
    return exp(u);
}

typedef struct sizing {
    double target;   /* the rate one probed block may have */
    double items;    /* per level: capacity, or 2 x capacity half-items */
    unsigned blocks;
} sizing;

/* Gauss-Legendre nodes and weights on [-1, 1], the positive half of 8:
 * exact for polynomials of degree 15; F is smooth, and the integral below
 * comes out within 1e-9 of a fine Simpson sum. */
static const double legendre8[4][2] = {
    {0.18343464249564981, 0.36268378337836199},
    {0.52553240991632899, 0.31370664587788738},
    {0.79666647741362684, 0.22238103445337445},
    {0.96028985649753629, 0.10122853629037618},
};

/* The load of adds (answered 1) that brings the offered load to `load`:
 * load - integral_0^load rate, the rate being F for one block per item, F^2
 * for two. */
static double added_load(occupancy *o, const sizing *s, double load) {
    double hidden = 0, slope;
    for (int i = 0; i < 4; i++)
        for (int side = -1; side <= 1; side += 2) {
            double f = blocked_rate(o, 0.5 * load * (1 + side * legendre8[i][0]), &slope);
            hidden += legendre8[i][1] * (s->blocks == 1 ? f : f * f);
        }
    return load - 0.5 * load * hidden;
}

/* What k gives: the load of adds per block it allows (0: none fits) and the
 * blocks that takes. */
typedef struct candidate {
    unsigned k;
    double load;
    uint64_t nblocks;
} candidate;

/* Solves for k: the load between the smallest a level may have (one item in
 * MAX_NBLOCKS blocks) and more than any k allows, then the adds it takes. */
static candidate try_k(occupancy *o, const sizing *s, unsigned k) {
    candidate c = {k, 0, 0};
    occupancy_init(o, k);
    double load = max_load(o, s->target, 1.0 / (double)MAX_NBLOCKS, 4.0 * TABLE_LOADS);
    if (load == 0) return c;
    c.load = added_load(o, s, load);
    double nblocks = ceil(s->items / c.load);
    if (nblocks > (double)MAX_NBLOCKS)
        c.load = 0;
    else
        c.nblocks = (uint64_t)nblocks;
    return c;
}

/* Whether a beats b: fewer blocks, then more room per block (the better k
 * for larger capacities), then fewer probes. */
static bool better(const candidate *a, const candidate *b) {
    if (a->load == 0 || b->load == 0) return a->load > b->load;
    if (a->nblocks != b->nblocks) return a->nblocks < b->nblocks;
    if (a->load != b->load) return a->load > b->load;
    return a->k < b->k;
}

/* The last geometries sized on this thread, as many as a chain has levels:
 * a loader checking thousands of filters made with the same parameters
 * (per-user filters) sizes their levels once. */
#define MEMO_SIZE FG_BLOOM_MAX_LEVELS

typedef struct memo_entry {
    uint64_t capacity; /* 0: empty */
    double error;
    uint64_t nblocks;
    uint8_t k, blocks;
} memo_entry;

static _Thread_local memo_entry memo[MEMO_SIZE];
static _Thread_local unsigned memo_next;

static fg_status size_level(uint64_t capacity, double error, memo_entry *out) {
    sizing s;
    s.blocks = error >= TWO_BLOCKS_BELOW ? 1 : 2;
    s.target = s.blocks == 1 ? SIZING_MARGIN * error : sqrt(SIZING_MARGIN * error);
    s.items = (double)capacity * s.blocks;

    /* Climb from the classic optimum, log2(1 / target), down while that
     * improves, else up. */
    occupancy o;
    long start = lround(-log2(s.target));
    candidate best = try_k(&o, &s, (unsigned)(start < 1 ? 1 : start > MAX_K ? MAX_K : start));
    bool descended = false;
    while (best.k > 1) {
        candidate c = try_k(&o, &s, best.k - 1);
        if (!better(&c, &best)) break;
        best = c;
        descended = true;
    }
    while (!descended && best.k < MAX_K) {
        candidate c = try_k(&o, &s, best.k + 1);
        if (!better(&c, &best)) break;
        best = c;
    }
    if (best.load == 0) return FG_EOVERFLOW;
    *out = (memo_entry){capacity, error, best.nblocks, (uint8_t)best.k, (uint8_t)s.blocks};
    return FG_OK;
}

fg_status fg_bloom_level_geometry(uint64_t capacity, double error, uint64_t *nblocks, uint8_t *k,
                                  uint8_t *blocks) {
    if (capacity < 1 || capacity > (uint64_t)FG_BLOOM_MAX_CAPACITY || !(error > 0 && error < 1))
        return FG_EINVAL;
    const memo_entry *hit = NULL;
    for (unsigned i = 0; i < MEMO_SIZE && hit == NULL; i++)
        if (memo[i].capacity == capacity && memo[i].error == error) hit = &memo[i];
    if (hit == NULL) {
        memo_entry sized;
        fg_status st = size_level(capacity, error, &sized);
        if (st != FG_OK) return st;
        memo[memo_next] = sized;
        hit = &memo[memo_next];
        memo_next = (memo_next + 1) % MEMO_SIZE;
    }
    *nblocks = hit->nblocks;
    *k = hit->k;
    *blocks = hit->blocks;
    return FG_OK;
}

fg_status fg_bloom_level_plan(double error, uint64_t capacity0, uint32_t expansion, uint32_t i,
                              uint64_t *capacity, double *level_error) {
    if (!(error > 0 && error < 1) || capacity0 < 1 ||
        capacity0 > (uint64_t)FG_BLOOM_MAX_CAPACITY || expansion > FG_BLOOM_MAX_EXPANSION ||
        i >= FG_BLOOM_MAX_LEVELS || (expansion == 0 && i > 0))
        return FG_EINVAL;
    uint64_t c = capacity0;
    for (uint32_t j = 0; j < i; j++) {
        if (c > (uint64_t)FG_BLOOM_MAX_CAPACITY / expansion) return FG_EOVERFLOW;
        c *= expansion;
    }
    *capacity = c;
    if (i == 0)
        *level_error = expansion == 0 ? error : FIRST_LEVEL_SHARE * error;
    else
        *level_error = LATER_LEVELS_SHARE * error / ((double)i * (double)i);
    return FG_OK;
}

fg_status fg_bloom_first_level_bytes(double error, uint64_t capacity0, uint32_t expansion,
                                     uint64_t *bytes) {
    uint64_t capacity, nblocks;
    double level_error;
    uint8_t k, blocks;
    if (fg_bloom_level_plan(error, capacity0, expansion, 0, &capacity, &level_error) != FG_OK ||
        fg_bloom_level_geometry(capacity, level_error, &nblocks, &k, &blocks) != FG_OK)
        return FG_EINVAL;
    *bytes = fg_bloom_level_bytes(nblocks);
    return FG_OK;
}

/* ---------------------------------------------------------------- memory */

static bool bits_aligned_by_hand(uint64_t nblocks) {
    return nblocks * FG_BLOOM_BLOCK_BYTES >= BLOOM_ALIGN_FROM_BYTES;
}

uint64_t fg_bloom_level_bytes(uint64_t nblocks) {
    return nblocks * FG_BLOOM_BLOCK_BYTES + (bits_aligned_by_hand(nblocks) ? 64 : 0);
}

/* Zeroed bits for nblocks blocks, or NULL. The zeros come from the
 * allocator's calloc, which takes them from fresh pages where it can. */
static uint64_t *bits_alloc(uint64_t nblocks, const fg_bloom_allocator *a) {
    size_t bytes = (size_t)(nblocks * FG_BLOOM_BLOCK_BYTES);
    if ((uint64_t)bytes != nblocks * FG_BLOOM_BLOCK_BYTES || bytes > SIZE_MAX - 64) return NULL;
    if (!bits_aligned_by_hand(nblocks)) return a->calloc(1, bytes);
    uint8_t *raw = a->calloc(1, bytes + 64);
    if (raw == NULL) return NULL;
    size_t offset = 64 - (size_t)((uintptr_t)raw % 64); /* 1 .. 64 */
    uint8_t *bits = raw + offset;
    bits[-1] = (uint8_t)offset;
    return (uint64_t *)(void *)bits;
}

static void bits_free(uint64_t *bits, uint64_t nblocks, const fg_bloom_allocator *a) {
    if (bits == NULL) return;
    uint8_t *p = (uint8_t *)bits;
    a->heap.free(bits_aligned_by_hand(nblocks) ? p - p[-1] : p);
}

static bool geometry_in_range(const fg_bloom_level *g) {
    return g->nblocks >= 1 && g->nblocks <= MAX_NBLOCKS && g->k >= 1 && g->k <= MAX_K &&
           (g->blocks == 1 || g->blocks == 2);
}

fg_status fg_bloom_push_level(fg_bloom *f, const fg_bloom_level *geometry,
                              const fg_bloom_allocator *a) {
    if (f == NULL || geometry == NULL || a == NULL || !geometry_in_range(geometry) ||
        f->nlevels >= FG_BLOOM_MAX_LEVELS)
        return FG_EINVAL;
    uint64_t *bits = bits_alloc(geometry->nblocks, a);
    if (bits == NULL) return FG_EOVERFLOW;
    fg_bloom_level *levels = a->heap.realloc(f->levels, (f->nlevels + 1) * sizeof(*levels));
    if (levels == NULL) {
        bits_free(bits, geometry->nblocks, a);
        return FG_EOVERFLOW;
    }
    fg_bloom_level *l = &levels[f->nlevels];
    *l = *geometry;
    l->bits = bits;
    l->items = 0;
    l->bits_set = 0;
    f->levels = levels;
    f->nlevels++;
    return FG_OK;
}

/* The geometry of level `i` as planned. */
static fg_status planned_level(const fg_bloom *f, uint32_t i, fg_bloom_level *l) {
    *l = (fg_bloom_level){0};
    fg_status st =
        fg_bloom_level_plan(f->error, f->capacity0, f->expansion, i, &l->capacity, &l->error);
    if (st == FG_OK)
        st = fg_bloom_level_geometry(l->capacity, l->error, &l->nblocks, &l->k, &l->blocks);
    return st;
}

/* Level `i` as planned, appended. */
static fg_status push_planned_level(fg_bloom *f, uint32_t i, const fg_bloom_allocator *a) {
    fg_bloom_level l;
    fg_status st = planned_level(f, i, &l);
    return st == FG_OK ? fg_bloom_push_level(f, &l, a) : st;
}

fg_status fg_bloom_init(fg_bloom *f, double error, uint64_t capacity, uint32_t expansion,
                        const fg_bloom_allocator *a) {
    if (f == NULL || a == NULL || !(error >= FG_BLOOM_MIN_ERROR && error < 1) || capacity < 1 ||
        capacity > (uint64_t)FG_BLOOM_MAX_CAPACITY || expansion > FG_BLOOM_MAX_EXPANSION)
        return FG_EINVAL;
    fg_bloom made = {error, capacity, expansion, 0, FG_BLOOM_HASH_XXH3, NULL};
    fg_status st = push_planned_level(&made, 0, a);
    if (st != FG_OK) return st;
    *f = made;
    return FG_OK;
}

void fg_bloom_free(fg_bloom *f, const fg_bloom_allocator *a) {
    for (uint32_t i = 0; i < f->nlevels; i++) bits_free(f->levels[i].bits, f->levels[i].nblocks, a);
    if (f->levels != NULL) a->heap.free(f->levels);
    memset(f, 0, sizeof(*f));
}

/* ------------------------------------------------------------ add, query */

/* Every level's probe of the item. The blocks are prefetched before any is
 * tested, so that the cache misses of a long chain overlap instead of
 * queueing. */
static void locate(const fg_bloom *f, uint64_t hash, bloom_probe *probes) {
    for (uint32_t i = 0; i < f->nlevels; i++) {
        const fg_bloom_level *l = &f->levels[i];
        probe_make(l, i, hash, &probes[i]);
        __builtin_prefetch(l->bits + probes[i].block[0]);
        if (l->blocks == 2) __builtin_prefetch(l->bits + probes[i].block[1]);
    }
}

/* Whether a level other than `skip` may hold the item, newest first. */
static bool any_level_has(const fg_bloom *f, const bloom_probe *probes, uint32_t skip) {
    for (uint32_t i = f->nlevels; i-- > 0;)
        if (i != skip && level_has(&f->levels[i], &probes[i])) return true;
    return false;
}

bool fg_bloom_contains(const fg_bloom *f, uint64_t hash) {
    bloom_probe probes[FG_BLOOM_MAX_LEVELS];
    locate(f, hash, probes);
    return any_level_has(f, probes, UINT32_MAX);
}

fg_bloom_add_result fg_bloom_add(fg_bloom *f, uint64_t hash, const fg_bloom_allocator *a) {
    bloom_probe probes[FG_BLOOM_MAX_LEVELS];
    uint32_t newest = f->nlevels - 1;
    fg_bloom_level *l = &f->levels[newest];
    locate(f, hash, probes);
    if (any_level_has(f, probes, newest)) return FG_BLOOM_PRESENT;

    bloom_probe *p = &probes[newest];
    if (l->items >= l->capacity) {
        if (level_has(l, p)) return FG_BLOOM_PRESENT;
        if (f->expansion == 0) return FG_BLOOM_FULL;
        if (push_planned_level(f, ++newest, a) != FG_OK) return FG_BLOOM_NOMEM;
        l = &f->levels[newest];
        p = &probes[newest];
        probe_make(l, newest, hash, p);
    }
    /* Setting bits that are all set already changes nothing: that is the
     * newest level's "present", found in the same pass. */
    unsigned flipped = level_set(l, p);
    if (flipped == 0) return FG_BLOOM_PRESENT;
    l->bits_set += flipped;
    l->items++;
    return FG_BLOOM_ADDED;
}

uint64_t fg_bloom_growth_bytes(const fg_bloom *f) {
    const fg_bloom_level *newest = &f->levels[f->nlevels - 1];
    fg_bloom_level next;
    if (newest->items < newest->capacity || f->expansion == 0 ||
        planned_level(f, f->nlevels, &next) != FG_OK)
        return 0;
    return fg_bloom_level_bytes(next.nblocks);
}

/* ----------------------------------------------------------------- info */

uint64_t fg_bloom_items(const fg_bloom *f) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < f->nlevels; i++) n += f->levels[i].items;
    return n;
}

/* The rate of a level after n adds, by the classic formula over its K = k x
 * blocks bits per item (blocking raises it a little; this is only used to
 * correct the count of distinct items, where that is second order). */
static double level_rate(const fg_bloom_level *l, double n) {
    double m = (double)l->nblocks * BLOCK_BITS, K = (double)l->k * l->blocks;
    return pow(-expm1(-K * n / m), K);
}

/* Distinct items offered to a level while it took `items` adds: an item
 * hidden by a false positive (of this level or an older one, whose rate is
 * older_rate) was not added, so each add stands for 1 / (1 - rate) offers
 * at the rate of that moment. Integrated in steps of the level's fill. */
static double level_offers(const fg_bloom_level *l, double older_rate) {
    const int steps = 64;
    double n = (double)l->items, offers = 0;
    for (int s = 0; s < steps; s++) {
        double at = n * (s + 0.5) / steps;
        double hidden = older_rate + (1 - older_rate) * level_rate(l, at);
        offers += (n / steps) / (hidden < 0.999 ? 1 - hidden : 0.001);
    }
    return offers;
}

uint64_t fg_bloom_cardinality(const fg_bloom *f) {
    double n = 0, pass = 1; /* the chance that a new item passes the older levels */
    for (uint32_t i = 0; i < f->nlevels; i++) {
        const fg_bloom_level *l = &f->levels[i];
        n += level_offers(l, 1 - pass);
        pass *= 1 - level_rate(l, (double)l->items);
    }
    uint64_t items = fg_bloom_items(f);
    if (!(n < 0x1p63)) return UINT64_C(1) << 63;
    uint64_t estimate = (uint64_t)llround(n);
    return estimate > items ? estimate : items;
}

uint64_t fg_bloom_capacity(const fg_bloom *f) {
    uint64_t c = 0;
    for (uint32_t i = 0; i < f->nlevels; i++) c += f->levels[i].capacity;
    return c;
}

uint64_t fg_bloom_bytes(const fg_bloom *f) {
    uint64_t bytes = FILTER_HEADER_BYTES;
    for (uint32_t i = 0; i < f->nlevels; i++)
        bytes += LEVEL_HEADER_BYTES + fg_bloom_level_bytes(f->levels[i].nblocks);
    return bytes;
}

/* ------------------------------------------------------------- checking */

static uint64_t popcount64(uint64_t x) {
    x -= (x >> 1) & 0x5555555555555555ULL;
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (x * 0x0101010101010101ULL) >> 56;
}

/* Level i as fg_bloom_add would have made and filled it. */
static bool level_storable(const fg_bloom *f, uint32_t i) {
    const fg_bloom_level *l = &f->levels[i];
    uint64_t capacity, nblocks;
    double error;
    uint8_t k, blocks;
    if (fg_bloom_level_plan(f->error, f->capacity0, f->expansion, i, &capacity, &error) != FG_OK ||
        l->capacity != capacity || l->error != error)
        return false;
    if (fg_bloom_level_geometry(capacity, error, &nblocks, &k, &blocks) != FG_OK ||
        l->nblocks != nblocks || l->k != k || l->blocks != blocks || l->bits == NULL)
        return false;
    /* Only the newest level takes adds; the others filled up exactly. */
    if (l->items > l->capacity || (i + 1 < f->nlevels && l->items != l->capacity)) return false;
    /* Every add flipped between 1 and k x blocks bits. */
    if (l->bits_set < l->items || l->bits_set > l->items * l->k * l->blocks) return false;
    uint64_t set = 0;
    for (uint64_t w = 0; w < l->nblocks * BLOCK_WORDS; w++) set += popcount64(l->bits[w]);
    return set == l->bits_set;
}

/* The checks, in order: the parameters as fg_bloom_init takes them, a known
 * hash, 1 to FG_BLOOM_MAX_LEVELS levels, one only for a non-scaling filter;
 * then per level, its capacity and rate as planned, its geometry as sized, items <=
 * capacity (== for all but the newest), items <= bits_set <=
 * items x k x blocks, and bits_set the count of its 1 bits. The bit arrays
 * must have been allocated for the levels' nblocks (fg_bloom_push_level). */
bool fg_bloom_storable(const fg_bloom *f) {
    if (f == NULL || !(f->error > 0 && f->error < 1) || f->capacity0 < 1 ||
        f->capacity0 > (uint64_t)FG_BLOOM_MAX_CAPACITY || f->expansion > FG_BLOOM_MAX_EXPANSION ||
        f->nlevels < 1 || f->nlevels > FG_BLOOM_MAX_LEVELS || f->levels == NULL ||
        (f->expansion == 0 && f->nlevels != 1) ||
        (f->hash != FG_BLOOM_HASH_LEGACY && f->hash != FG_BLOOM_HASH_XXH3))
        return false;
    for (uint32_t i = 0; i < f->nlevels; i++)
        if (!level_storable(f, i)) return false;
    return true;
}
