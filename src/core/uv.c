/*
 * uv.c - the sliding HyperLogLog staircase and Redis's HLL arithmetic (see
 * uv.h and docs/design-uv.md).
 *
 * Hash. MurmurHash64A (Austin Appleby, public domain) as Redis uses it: the
 * 8-byte blocks read little-endian whatever the host, so the value is the
 * same everywhere, and the seed 0xadc83b19.
 *
 * Estimator. Ertl's improved estimator, computed in the same order as
 * Redis's hllCount so that the double rounding, and so the count, is equal:
 * histogram C[0..51], z = m tau((m - C[51]) / m), z = (z + C[k]) / 2 for
 * k = 50 .. 1, z += m sigma(C[0] / m), count = round(alpha m^2 / z).
 *
 * Encoding. An entry is a uint32 (second - base + 1) << 6 | rank, 0 for an
 * empty slot, so "time >= t1" is one integer compare with
 * (t1 - base + 1) << 6 and a window's register is the maximum of
 * (entry >= threshold ? entry & 63 : 0) over the register's slots: the scan
 * needs no per-register lengths and vectorises. Offsets stay below 2^25
 * (so entries stay below 2^31, for SSE2's signed compare): when the
 * newest second would reach that offset, base moves to newest - span and
 * every entry is re-encoded (dropping those older than newest - span), which
 * with span <= 180 days happens at most every ~194 days. Base depends only
 * on the seconds added, never on a clock, so replicas agree.
 *
 * Queries. A window ending now scans every row of every tile, whatever its
 * length (~8 rows of 256 bytes per tile at 10M items a day): SSE2 on x86-64
 * (its baseline), AVX2 when the CPU has it (asked at each query: a load),
 * a portable loop elsewhere. All give the same bytes; the unit tests hold
 * each against the portable one. The estimator's histogram is four
 * interleaved ones, which keeps it at about one store per register.
 *
 * Adds. The register's staircase is rebuilt into a small buffer (at most 51
 * pairs): older pairs with a higher rank stay, the new pair goes in, newer
 * pairs stay; pairs at the same second with a lower rank, older pairs with
 * a lower or equal rank, and pairs older than newest - span go. Memory is
 * had (a longer list, the tiles, a new row) before anything is written, so a failed add changes
 * nothing. Rows shrink again when the tile's longest staircase gets shorter
 * (a failed shrink keeps the larger block: harmless).
 *
 * Staircase forms. While the staircase has at most FG_UV_LIST_MAX
 * entries it is one sorted array of register << 32 | entry words: an add
 * rebuilds its register's run and moves the tail (at most 32 KB), a query
 * walks it. The add that would pass FG_UV_LIST_MAX builds the tiles from
 * it, once: past that size a query over the list would cost more than
 * scanning rows, and an add would move too much.
 *
 * Tiers. An add raises one register of one bucket per tier whose retention
 * holds its second: (newest bucket - count, newest bucket]. A tier holds
 * its buckets in an array by number, so a quiet counter pays for the
 * buckets it has, not for `count` slots; the newest is the last, where
 * adds go. Blocks (a new bucket, a larger one, a larger array) are had
 * before anything changes and swapped in after; buckets falling out of
 * retention are freed when newest moves on.
 */

#include "uv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "messages.h"
#ifdef __SSE2__
#include <immintrin.h>
#endif

const fg_uv_option fg_uv_options[FG_UV_OPTIONS] = {
    {"SPAN", 1, FG_UV_MAX_SPAN, FG_UV_DEFAULT_SPAN},
    {"MINUTES", 0, FG_UV_MAX_MINUTES, FG_UV_DEFAULT_MINUTES},
    {"HOURS", 0, FG_UV_MAX_HOURS, FG_UV_DEFAULT_HOURS},
    {"DAYS", 0, FG_UV_MAX_DAYS, FG_UV_DEFAULT_DAYS},
    {"TZOFFSET", -FG_UV_MAX_TZOFFSET, FG_UV_MAX_TZOFFSET, 0},
};

bool fg_uv_tzoffset_valid(int64_t tzoffset_s) {
    return tzoffset_s % 60 == 0;
}

#define INDEX_BITS 14
#define RANK_BITS 6
#define RANK_MASK 63u
#define LEN_WORDS 16 /* the 64 length bytes at the head of a tile block */
#define REBASE_AT (1LL << 25)
#define MAX_STAIR (FG_UV_MAX_RANK + 1)
#define SERIAL_VERSION 2
#define SERIAL_TIERS (2 + 2 + 2 + 4)
#define SERIAL_BUCKET (8 + 2)
#define SERIAL_PAIR (2 + 1)
#define SERIAL_HEADER (1 + 4 + 8 + 8 + 4)
#define SERIAL_ENTRY (2 + 4 + 1)
#define US_PER_SEC 1000000LL /* the commands speak unix microseconds */
#define GRID_TEXT_MAX 160    /* fg_uv_describe_grid's longest, with room to spare */

/* A BETWEEN edge older than anything the counter keeps: the edge and the
 * oldest time it keeps in unix microseconds (%lld), the key's name (%.*s)
 * and its grid in words (%s). Not "off the grid": a UTC midnight 40 days
 * ago is on the day grid, but no day bucket is kept that far back. */
#define ERR_UV_RETENTION                                                                           \
    "ERR BETWEEN edge %lld is older than what '%.*s' keeps: its oldest time is %lld (%s)"

/* ------------------------------------------------------------------ hash */

#define MURMUR_M 0xc6a4a7935bd1e995ULL
#define MURMUR_R 47
#define HLL_SEED 0xadc83b19ULL

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

uint64_t fg_uv_hash(const void *item, size_t len) {
    const uint8_t *p = item;
    uint64_t h = HLL_SEED ^ ((uint64_t)len * MURMUR_M);
    size_t blocks = len / 8;
    for (size_t i = 0; i < blocks; i++, p += 8) {
        uint64_t k = load_le64(p);
        k *= MURMUR_M;
        k ^= k >> MURMUR_R;
        k *= MURMUR_M;
        h ^= k;
        h *= MURMUR_M;
    }
    size_t tail = len & 7;
    if (tail) {
        for (size_t i = tail; i-- > 0;) h ^= (uint64_t)p[i] << (8 * i);
        h *= MURMUR_M;
    }
    h ^= h >> MURMUR_R;
    h *= MURMUR_M;
    h ^= h >> MURMUR_R;
    return h;
}

/* ------------------------------------------------------------- estimator */

/* sigma(x) = x + sum_k x^(2^k) 2^(k-1), for the empty registers. */
static double hll_sigma(double x) {
    if (x == 1.0) return INFINITY;
    double y = 1, z = x, previous;
    do {
        x *= x;
        previous = z;
        z += x * y;
        y += y;
    } while (previous != z);
    return z;
}

/* tau(x) = (1 - x - sum_k (1 - x^(2^-k))^2 2^-k) / 3, for the saturated ones. */
static double hll_tau(double x) {
    if (x == 0.0 || x == 1.0) return 0.0;
    double y = 1, z = 1 - x, previous;
    do {
        x = sqrt(x);
        previous = z;
        y *= 0.5;
        z -= (1 - x) * (1 - x) * y;
    } while (previous != z);
    return z / 3;
}

/* Four interleaved histograms, summed at the end: one histogram stalls
 * on a run of equal registers (each increment waits for the last store). */
static void histogram_of(const uint8_t regs[FG_UV_REGISTERS], uint32_t histogram[64]) {
    uint32_t part[4][64] = {{0}};
    for (int i = 0; i < FG_UV_REGISTERS; i += 4) {
        part[0][regs[i] & RANK_MASK]++;
        part[1][regs[i + 1] & RANK_MASK]++;
        part[2][regs[i + 2] & RANK_MASK]++;
        part[3][regs[i + 3] & RANK_MASK]++;
    }
    for (int k = 0; k < 64; k++) histogram[k] = part[0][k] + part[1][k] + part[2][k] + part[3][k];
}

uint64_t fg_uv_estimate(const uint8_t regs[FG_UV_REGISTERS]) {
    uint32_t histogram[64];
    histogram_of(regs, histogram);
    const double m = FG_UV_REGISTERS;
    const int q = 64 - INDEX_BITS;
    double z = m * hll_tau((m - histogram[q + 1]) / m);
    for (int k = q; k >= 1; k--) {
        z += histogram[k];
        z *= 0.5;
    }
    z += m * hll_sigma(histogram[0] / m);
    return (uint64_t)llround(0.721347520444481703680 * m * m / z);
}

void fg_uv_to_redis_hll(const uint8_t regs[FG_UV_REGISTERS], uint8_t out[FG_UV_HLL_BYTES]) {
    memset(out, 0, 16);
    memcpy(out, "HYLL", 4); /* then encoding 0 (dense) and 3 unused bytes */
    out[15] = 0x80;         /* the cached count is invalid: PFCOUNT computes it */
    uint8_t *p = out + 16;
    for (int i = 0; i < FG_UV_REGISTERS; i += 4, p += 3) {
        p[0] = (uint8_t)(regs[i] | regs[i + 1] << 6);
        p[1] = (uint8_t)(regs[i + 1] >> 2 | regs[i + 2] << 4);
        p[2] = (uint8_t)(regs[i + 2] >> 4 | regs[i + 3] << 2);
    }
}

void fg_uv_merge_registers(uint8_t acc[FG_UV_REGISTERS], const uint8_t regs[FG_UV_REGISTERS]) {
#ifdef __SSE2__
    for (int i = 0; i < FG_UV_REGISTERS; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(acc + i));
        __m128i r = _mm_loadu_si128((const __m128i *)(regs + i));
        _mm_storeu_si128((__m128i *)(acc + i), _mm_max_epu8(a, r));
    }
#else
    for (int i = 0; i < FG_UV_REGISTERS; i++) acc[i] = acc[i] > regs[i] ? acc[i] : regs[i];
#endif
}

/* ------------------------------------------------------------- entries */

static inline int64_t entry_second(const fg_uv *uv, uint32_t e) { return uv->base + (e >> RANK_BITS) - 1; }
static inline uint32_t entry_on(int64_t base, int64_t sec, unsigned rank) {
    return (uint32_t)(sec - base + 1) << RANK_BITS | rank;
}
static inline uint32_t entry_make(const fg_uv *uv, int64_t sec, unsigned rank) {
    return entry_on(uv->base, sec, rank);
}

/* The oldest second a window may see. */
static inline int64_t oldest_kept(const fg_uv *uv) { return uv->newest - uv->span; }

static const int64_t tier_widths[FG_UV_TIERS] = {60, 3600, 86400};
static const int64_t tier_limits[FG_UV_TIERS] = {FG_UV_MAX_MINUTES, FG_UV_MAX_HOURS, FG_UV_MAX_DAYS};

fg_status fg_uv_init(fg_uv *uv, int64_t span) {
    if (span < 1 || span > FG_UV_MAX_SPAN) return FG_EINVAL;
    memset(uv, 0, sizeof(*uv));
    uv->span = span;
    for (int k = 0; k < FG_UV_TIERS; k++) uv->tiers[k].width = (int32_t)tier_widths[k];
    return FG_OK;
}

fg_status fg_uv_init_tiers(fg_uv *uv, int64_t span, int64_t minutes, int64_t hours, int64_t days,
                           int64_t tzoffset) {
    const int64_t counts[FG_UV_TIERS] = {minutes, hours, days};
    for (int k = 0; k < FG_UV_TIERS; k++)
        if (counts[k] < 0 || counts[k] > tier_limits[k]) return FG_EINVAL;
    /* Whole minutes, so hour and day edges are on the minute grid. */
    if (tzoffset < -FG_UV_MAX_TZOFFSET || tzoffset > FG_UV_MAX_TZOFFSET || tzoffset % 60 != 0) return FG_EINVAL;
    if (fg_uv_init(uv, span) != FG_OK) return FG_EINVAL;
    uv->tzoffset = tzoffset;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        uv->tiers[k].count = (uint32_t)counts[k];
        uv->tiers[k].offset = k == 0 ? 0 : (int32_t)tzoffset; /* minutes need no shift */
    }
    return FG_OK;
}

/* The room a block of n items gets: n rounded up to 2^k or 3 * 2^(k-1),
 * at least `least` (0 for none): at most a third unused, and the same for
 * the same n whatever the history, so a loaded counter takes the memory
 * the live one did. */
static uint32_t room_for(uint32_t n, uint32_t least) {
    if (n <= least) return n == 0 ? 0 : least;
    uint32_t p = 1u << (31 - __builtin_clz(n));
    if (n == p) return p;
    return n <= p + p / 2 ? p + p / 2 : 2 * p;
}

/* ------------------------------------------------------------- buckets */

/* Sparse pairs that take as much as a dense bucket: one more, and it is dense. */
#define SPARSE_MAX ((uint32_t)(FG_UV_REGISTERS / sizeof(uint32_t)))
#define SPARSE_LEAST 4 /* pairs of a new bucket's room */
#define PAIR(reg, rank) ((uint32_t)(reg) << 8 | (uint32_t)(rank))
#define PAIR_REG(w) ((w) >> 8)
#define PAIR_RANK(w) ((w) & 0xff)

static inline bool bucket_dense(const fg_uv_bucket *b) { return b->pairs == FG_UV_DENSE; }
static inline uint8_t *dense_regs(fg_uv_bucket *b) { return (uint8_t *)b->data; }
static inline const uint8_t *dense_regs_of(const fg_uv_bucket *b) { return (const uint8_t *)b->data; }

static size_t bucket_bytes(const fg_uv_bucket *b) {
    return sizeof(*b) + (bucket_dense(b) ? FG_UV_REGISTERS : (size_t)b->room * sizeof(uint32_t));
}

/* The index of the first pair of register reg or above. */
static uint32_t pair_index(const fg_uv_bucket *b, uint32_t reg) {
    uint32_t lo = 0, hi = b->pairs;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (PAIR_REG(b->data[mid]) < reg) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static unsigned bucket_rank(const fg_uv_bucket *b, uint32_t reg) {
    if (bucket_dense(b)) return dense_regs_of(b)[reg];
    uint32_t i = pair_index(b, reg);
    return i < b->pairs && PAIR_REG(b->data[i]) == reg ? PAIR_RANK(b->data[i]) : 0;
}

/* Raises register reg to rank, in a bucket with room for a new pair. */
static void bucket_raise(fg_uv_bucket *b, uint32_t reg, unsigned rank) {
    if (bucket_dense(b)) {
        dense_regs(b)[reg] = (uint8_t)rank;
        return;
    }
    uint32_t i = pair_index(b, reg);
    if (i == b->pairs || PAIR_REG(b->data[i]) != reg) {
        memmove(b->data + i + 1, b->data + i, (b->pairs - i) * sizeof(uint32_t));
        b->pairs++;
    }
    b->data[i] = PAIR(reg, rank);
}

/* The registers of a bucket, merged into regs (maxima). */
static void bucket_merge_into(const fg_uv_bucket *b, uint8_t regs[FG_UV_REGISTERS]) {
    if (bucket_dense(b)) {
        fg_uv_merge_registers(regs, dense_regs_of(b));
        return;
    }
    for (uint32_t i = 0; i < b->pairs; i++) {
        uint32_t reg = PAIR_REG(b->data[i]);
        uint8_t rank = (uint8_t)PAIR_RANK(b->data[i]);
        if (rank > regs[reg]) regs[reg] = rank;
    }
}

static uint32_t bucket_nonzero(const fg_uv_bucket *b) {
    if (!bucket_dense(b)) return b->pairs;
    uint32_t n = 0;
    for (int i = 0; i < FG_UV_REGISTERS; i++) n += dense_regs_of(b)[i] != 0;
    return n;
}

/* An empty bucket: sparse with room for `room` pairs, or dense. */
static fg_uv_bucket *bucket_new(int64_t number, uint32_t room, bool dense, const fg_allocator *a) {
    size_t data = dense ? FG_UV_REGISTERS : (size_t)room * sizeof(uint32_t);
    fg_uv_bucket *b = a->realloc(NULL, sizeof(*b) + data);
    if (b == NULL) return NULL;
    b->number = (int32_t)number; /* a retained bucket's number, within range */
    b->pairs = dense ? FG_UV_DENSE : 0;
    b->room = (uint16_t)(dense ? 0 : room);
    if (dense) memset(b->data, 0, FG_UV_REGISTERS);
    return b;
}

/* A copy of b with room for one more pair, or dense once sparse would
 * take more. NULL without memory. */
static fg_uv_bucket *bucket_grown(const fg_uv_bucket *b, const fg_allocator *a) {
    bool dense = b->pairs >= SPARSE_MAX;
    uint32_t room = room_for(b->pairs + 1, SPARSE_LEAST);
    fg_uv_bucket *g = bucket_new(b->number, room < SPARSE_MAX ? room : SPARSE_MAX, dense, a);
    if (g == NULL) return NULL;
    if (!dense) {
        memcpy(g->data, b->data, b->pairs * sizeof(uint32_t));
        g->pairs = b->pairs;
    } else {
        for (uint32_t i = 0; i < b->pairs; i++) dense_regs(g)[PAIR_REG(b->data[i])] = (uint8_t)PAIR_RANK(b->data[i]);
    }
    return g;
}

/* ------------------------------------------------------------ the tiers */

static inline int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
static inline int64_t bucket_of(const fg_uv_tier *tier, int64_t sec) {
    return floor_div(sec + tier->offset, tier->width);
}
static inline int64_t bucket_start(const fg_uv_tier *tier, int64_t b) { return b * tier->width - tier->offset; }
static inline uint32_t slot_of(const fg_uv_tier *tier, int64_t b) {
    int64_t n = tier->count, s = b % n;
    return (uint32_t)(s < 0 ? s + n : s);
}

/* The oldest bucket kept while the newest second is `newest`. */
static inline int64_t first_kept(const fg_uv_tier *tier, int64_t newest) {
    return bucket_of(tier, newest) - (int64_t)tier->count + 1;
}

static inline bool retained(const fg_uv_tier *tier, int64_t b, int64_t newest) {
    return tier->count > 0 && b >= first_kept(tier, newest);
}

/* The room of a tier's array for n buckets: never more than it keeps. */
static uint32_t array_room(const fg_uv_tier *tier, uint32_t n) {
    uint32_t room = room_for(n, 1);
    return room < tier->count ? room : tier->count;
}

/* The index of the first held bucket numbered b or above. */
static uint32_t held_index(const fg_uv_tier *tier, int64_t b) {
    uint32_t lo = 0, hi = tier->held;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tier->bucket[mid]->number < b) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static fg_uv_bucket *held_bucket(const fg_uv_tier *tier, int64_t b) {
    uint32_t i = held_index(tier, b);
    return i < tier->held && tier->bucket[i]->number == b ? tier->bucket[i] : NULL;
}

/* What an add does to the tiers, with the memory it needs, had first. */
typedef struct tier_plan {
    bool touch[FG_UV_TIERS];
    bool adds[FG_UV_TIERS];            /* a new bucket goes into the array */
    int64_t number[FG_UV_TIERS];
    fg_uv_bucket *block[FG_UV_TIERS];  /* a new bucket, or a grown copy of the held one */
    fg_uv_bucket **array[FG_UV_TIERS]; /* a larger array for a new bucket */
    uint32_t array_room[FG_UV_TIERS];
    bool changes;
} tier_plan;

static void plan_release(tier_plan *plan, const fg_allocator *a) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        a->free(plan->block[k]);
        a->free(plan->array[k]);
    }
}

/* Plans raising register reg to rank at second sec, newest being the
 * newest second after the add. False (nothing held) without memory. */
static bool plan_tiers(const fg_uv *uv, uint32_t reg, uint8_t rank, int64_t sec, int64_t newest, tier_plan *plan,
                       const fg_allocator *a) {
    memset(plan, 0, sizeof(*plan));
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        int64_t b = bucket_of(tier, sec);
        if (!retained(tier, b, newest)) continue;
        const fg_uv_bucket *bucket = held_bucket(tier, b);
        unsigned now = bucket != NULL ? bucket_rank(bucket, reg) : 0;
        if (now >= rank) continue;
        plan->touch[k] = plan->changes = true;
        plan->number[k] = b;
        if (bucket == NULL) {
            plan->adds[k] = true;
            plan->block[k] = bucket_new(b, room_for(1, SPARSE_LEAST), false, a);
            if (plan->block[k] == NULL) goto nomem;
            /* the buckets newest leaves behind go first (expire_buckets) */
            uint32_t gone = held_index(tier, first_kept(tier, newest));
            uint32_t room = array_room(tier, tier->held - gone + 1);
            if (room != tier->room) {
                plan->array_room[k] = room;
                plan->array[k] = a->realloc(NULL, room * sizeof(fg_uv_bucket *));
                if (plan->array[k] == NULL) goto nomem;
            }
        } else if (now == 0 && !bucket_dense(bucket) && bucket->pairs == bucket->room) {
            if ((plan->block[k] = bucket_grown(bucket, a)) == NULL) goto nomem;
        }
    }
    return true;
nomem:
    plan_release(plan, a);
    return false;
}

static void apply_tiers(fg_uv *uv, const tier_plan *plan, uint32_t reg, uint8_t rank, const fg_allocator *a) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        if (!plan->touch[k]) continue;
        fg_uv_tier *tier = &uv->tiers[k];
        uint32_t i = held_index(tier, plan->number[k]);
        bool held = i < tier->held && tier->bucket[i]->number == plan->number[k];
        if (plan->array[k] != NULL) {
            if (tier->held > 0) memcpy(plan->array[k], tier->bucket, tier->held * sizeof(fg_uv_bucket *));
            a->free(tier->bucket);
            tier->bucket = plan->array[k];
            tier->room = (uint16_t)plan->array_room[k];
        }
        if (plan->block[k] != NULL && held) {
            a->free(tier->bucket[i]); /* grown: the copy replaces it */
            tier->bucket[i] = plan->block[k];
        } else if (plan->block[k] != NULL) {
            memmove(tier->bucket + i + 1, tier->bucket + i, (tier->held - i) * sizeof(fg_uv_bucket *));
            tier->bucket[i] = plan->block[k];
            tier->held++;
            uv->buckets++;
        }
        bucket_raise(tier->bucket[i], reg, rank);
    }
}

/* Frees the buckets that newest has left behind, the oldest of each tier,
 * and gives back the room of their array that neither the buckets left nor
 * the one the plan adds need (a failed shrink keeps the larger block:
 * harmless); a tier that gets a new array from the plan keeps the old
 * until it is swapped. */
static void expire_buckets(fg_uv *uv, const tier_plan *plan, const fg_allocator *a) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        fg_uv_tier *tier = &uv->tiers[k];
        uint32_t gone = held_index(tier, first_kept(tier, uv->newest));
        if (gone == 0) continue;
        for (uint32_t i = 0; i < gone; i++) a->free(tier->bucket[i]);
        memmove(tier->bucket, tier->bucket + gone, (tier->held - gone) * sizeof(fg_uv_bucket *));
        tier->held -= gone;
        uv->buckets -= gone;
        if (plan->array[k] != NULL) continue;
        uint32_t room = array_room(tier, tier->held + plan->adds[k]);
        if (room == 0) {
            a->free(tier->bucket);
            tier->bucket = NULL;
            tier->room = 0;
        } else if (room < tier->room) {
            fg_uv_bucket **smaller = a->realloc(tier->bucket, room * sizeof(fg_uv_bucket *));
            if (smaller != NULL) {
                tier->bucket = smaller;
                tier->room = (uint16_t)room;
            }
        }
    }
}

/* ------------------------------------------------------------ the tiles */

static inline uint8_t *tile_lens(uint32_t *block) { return (uint8_t *)block; }
static inline const uint8_t *tile_lens_of(const uint32_t *block) { return (const uint8_t *)block; }
static inline uint32_t *tile_rows(uint32_t *block) { return block + LEN_WORDS; }
static inline const uint32_t *tile_rows_of(const uint32_t *block) { return block + LEN_WORDS; }
static inline size_t tile_bytes(unsigned nrows) {
    return (LEN_WORDS + (size_t)nrows * FG_UV_TILE_REGISTERS) * sizeof(uint32_t);
}

/* Resizes tile t to nrows (>= its longest staircase); new rows are zeroed,
 * and 0 rows frees it. False (nothing changed) without memory. */
static bool tile_resize(fg_uv_tiles *tiles, int t, unsigned nrows, const fg_allocator *a) {
    if (nrows == 0) {
        a->free(tiles->tile[t]);
        tiles->tile[t] = NULL;
        tiles->nrows[t] = 0;
        return true;
    }
    uint32_t *block = a->realloc(tiles->tile[t], tile_bytes(nrows));
    if (block == NULL) return false;
    if (tiles->tile[t] == NULL) memset(tile_lens(block), 0, FG_UV_TILE_REGISTERS);
    if (nrows > tiles->nrows[t])
        memset(tile_rows(block) + (size_t)tiles->nrows[t] * FG_UV_TILE_REGISTERS, 0,
               (size_t)(nrows - tiles->nrows[t]) * FG_UV_TILE_REGISTERS * sizeof(uint32_t));
    tiles->tile[t] = block;
    tiles->nrows[t] = (uint8_t)nrows;
    return true;
}

/* Gives back rows no staircase of tile t uses any more. */
static void tile_shrink(fg_uv_tiles *tiles, int t, const fg_allocator *a) {
    const uint8_t *lens = tile_lens(tiles->tile[t]);
    unsigned longest = 0;
    for (int j = 0; j < FG_UV_TILE_REGISTERS; j++) longest = lens[j] > longest ? lens[j] : longest;
    if (longest < tiles->nrows[t]) (void)tile_resize(tiles, t, longest, a);
}

static void tiles_free(fg_uv_tiles *tiles, const fg_allocator *a) {
    if (tiles == NULL) return;
    for (int t = 0; t < FG_UV_TILES; t++) a->free(tiles->tile[t]);
    a->free(tiles);
}

/* Appends entry e to register j of tile block (rows enough). */
static inline void tile_push(uint32_t *block, unsigned j, uint32_t e) {
    uint8_t *lens = tile_lens(block);
    tile_rows(block)[lens[j]++ * FG_UV_TILE_REGISTERS + j] = e;
}

/* ------------------------------------------------------------ the list */

#define LIST_WORD(reg, e) ((uint64_t)(reg) << 32 | (e))
#define LIST_REG(w) ((uint32_t)((w) >> 32))

/* The index of the first list entry of register reg or above. */
static uint32_t list_index(const fg_uv *uv, uint32_t reg) {
    uint32_t lo = 0, hi = (uint32_t)uv->entries;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (LIST_REG(uv->list[mid]) < reg) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Tiles holding the list's staircases, with room for `extra` entries in
 * register reg's tile; NULL without memory. */
static fg_uv_tiles *tiles_from_list(const fg_uv *uv, uint32_t reg, unsigned extra, const fg_allocator *a) {
    fg_uv_tiles *tiles = a->realloc(NULL, sizeof(*tiles));
    if (tiles == NULL) return NULL;
    memset(tiles, 0, sizeof(*tiles));
    uint8_t longest[FG_UV_TILES] = {0};
    for (uint32_t i = 0, run = 0; i < uv->entries; i++) {
        uint32_t r = LIST_REG(uv->list[i]);
        run = i > 0 && LIST_REG(uv->list[i - 1]) == r ? run + 1 : 1;
        if (run > longest[r / FG_UV_TILE_REGISTERS]) longest[r / FG_UV_TILE_REGISTERS] = (uint8_t)run;
    }
    if (extra > longest[reg / FG_UV_TILE_REGISTERS]) longest[reg / FG_UV_TILE_REGISTERS] = (uint8_t)extra;
    for (int t = 0; t < FG_UV_TILES; t++)
        if (longest[t] > 0 && !tile_resize(tiles, t, longest[t], a)) {
            tiles_free(tiles, a);
            return NULL;
        }
    for (uint32_t i = 0; i < uv->entries; i++) {
        uint32_t r = LIST_REG(uv->list[i]);
        tile_push(tiles->tile[r / FG_UV_TILE_REGISTERS], r % FG_UV_TILE_REGISTERS, (uint32_t)uv->list[i]);
    }
    return tiles;
}

/* ------------------------------------------------------- the staircases */

/* Register reg's staircase: its entries, oldest first; how many. */
static unsigned stair_entries(const fg_uv *uv, uint32_t reg, uint32_t out[MAX_STAIR]) {
    unsigned n = 0;
    if (uv->tiles == NULL) {
        for (uint32_t i = list_index(uv, reg); i < uv->entries && LIST_REG(uv->list[i]) == reg; i++)
            out[n++] = (uint32_t)uv->list[i];
        return n;
    }
    const uint32_t *block = uv->tiles->tile[reg / FG_UV_TILE_REGISTERS];
    if (block == NULL) return 0;
    unsigned j = reg % FG_UV_TILE_REGISTERS;
    for (; n < tile_lens_of(block)[j]; n++) out[n] = tile_rows_of(block)[n * FG_UV_TILE_REGISTERS + j];
    return n;
}

/* Moves base to newest - span: drops the entries older than that and
 * re-encodes the others. No allocation; the caller shrinks the rows. */
static void rebase(fg_uv *uv, int64_t newest) {
    int64_t base = newest - uv->span;
    if (uv->tiles == NULL) {
        uint32_t kept = 0;
        for (uint32_t i = 0; i < uv->entries; i++) {
            uint32_t e = (uint32_t)uv->list[i];
            int64_t sec = entry_second(uv, e);
            if (sec < base) continue;
            uv->list[kept++] = LIST_WORD(LIST_REG(uv->list[i]), entry_on(base, sec, e & RANK_MASK));
        }
        uv->entries = kept;
        uv->base = base;
        return;
    }
    for (int t = 0; t < FG_UV_TILES; t++) {
        if (uv->tiles->tile[t] == NULL) continue;
        uint8_t *lens = tile_lens(uv->tiles->tile[t]);
        uint32_t *rows = tile_rows(uv->tiles->tile[t]);
        for (int j = 0; j < FG_UV_TILE_REGISTERS; j++) {
            unsigned kept = 0;
            for (unsigned s = 0; s < lens[j]; s++) {
                uint32_t e = rows[s * FG_UV_TILE_REGISTERS + j];
                int64_t sec = entry_second(uv, e);
                rows[s * FG_UV_TILE_REGISTERS + j] = 0;
                if (sec < base) continue;
                rows[kept++ * FG_UV_TILE_REGISTERS + j] = entry_on(base, sec, e & RANK_MASK);
            }
            uv->entries -= lens[j] - kept;
            lens[j] = (uint8_t)kept;
        }
    }
    uv->base = base;
}

typedef struct stair {
    int64_t sec[MAX_STAIR];
    uint8_t rank[MAX_STAIR];
    unsigned len, old_len;
} stair;

/* Register reg's staircase after adding (sec, rank) with the counter's
 * newest second at `newest`. False when the pair is dominated. */
static bool stair_after_add(const fg_uv *uv, uint32_t reg, int64_t sec, unsigned rank, int64_t newest,
                            stair *out) {
    uint32_t now[MAX_STAIR];
    unsigned len = stair_entries(uv, reg, now);
    bool placed = false;
    out->len = 0;
    out->old_len = len;
    for (unsigned s = 0; s < len; s++) {
        int64_t at = entry_second(uv, now[s]);
        unsigned r = now[s] & RANK_MASK;
        if (at >= sec && !placed) {
            if (r >= rank) return false; /* a pair no older and no lower */
            out->sec[out->len] = sec;
            out->rank[out->len++] = (uint8_t)rank;
            placed = true;
        }
        if (at < newest - uv->span || at == sec || (at < sec && r <= rank)) continue;
        out->sec[out->len] = at;
        out->rank[out->len++] = (uint8_t)r;
    }
    if (!placed) {
        out->sec[out->len] = sec;
        out->rank[out->len++] = (uint8_t)rank;
    }
    return true;
}

/* The memory a new staircase needs, had before anything is written: a
 * larger list, the tiles the list turns into, or more rows in a tile. */
typedef struct stair_plan {
    uint64_t *list;
    uint32_t list_room;
    fg_uv_tiles *tiles;
} stair_plan;

static bool plan_stair(fg_uv *uv, uint32_t reg, const stair *next, stair_plan *plan, const fg_allocator *a) {
    memset(plan, 0, sizeof(*plan));
    if (uv->tiles != NULL) {
        int t = (int)(reg / FG_UV_TILE_REGISTERS);
        /* grows in place: nothing else can fail after it */
        return next->len <= uv->tiles->nrows[t] || tile_resize(uv->tiles, t, next->len, a);
    }
    uint64_t need = uv->entries - next->old_len + next->len;
    if (need > FG_UV_LIST_MAX) return (plan->tiles = tiles_from_list(uv, reg, next->len, a)) != NULL;
    if (need <= uv->list_room) return true;
    uint32_t room = room_for((uint32_t)need, 1);
    plan->list_room = room < FG_UV_LIST_MAX ? room : FG_UV_LIST_MAX;
    return (plan->list = a->realloc(NULL, plan->list_room * sizeof(uint64_t))) != NULL;
}

static void apply_stair_plan(fg_uv *uv, const stair_plan *plan, const fg_allocator *a) {
    if (plan->tiles != NULL) {
        a->free(uv->list);
        uv->list = NULL;
        uv->list_room = 0;
        uv->tiles = plan->tiles;
    } else if (plan->list != NULL) {
        if (uv->entries > 0) memcpy(plan->list, uv->list, uv->entries * sizeof(uint64_t));
        a->free(uv->list);
        uv->list = plan->list;
        uv->list_room = plan->list_room;
    }
}

/* Writes register reg's new staircase into the list, then gives back the
 * room fewer entries no longer need (a failed shrink keeps the larger
 * block: harmless). */
static void list_write(fg_uv *uv, uint32_t reg, const stair *next, const fg_allocator *a) {
    uint32_t lo = list_index(uv, reg), hi = lo;
    while (hi < uv->entries && LIST_REG(uv->list[hi]) == reg) hi++;
    memmove(uv->list + lo + next->len, uv->list + hi, (uv->entries - hi) * sizeof(uint64_t));
    for (unsigned s = 0; s < next->len; s++)
        uv->list[lo + s] = LIST_WORD(reg, entry_make(uv, next->sec[s], next->rank[s]));
    uv->entries = uv->entries - (hi - lo) + next->len;
    uint32_t room = room_for((uint32_t)uv->entries, 1);
    if (room < uv->list_room) {
        uint64_t *smaller = a->realloc(uv->list, room * sizeof(uint64_t));
        if (smaller != NULL) {
            uv->list = smaller;
            uv->list_room = room;
        }
    }
}

/* Writes register reg's new staircase into its tile. */
static void tile_write(fg_uv *uv, uint32_t reg, const stair *next, bool rebased, const fg_allocator *a) {
    int t = (int)(reg / FG_UV_TILE_REGISTERS), j = (int)(reg % FG_UV_TILE_REGISTERS);
    uint8_t *lens = tile_lens(uv->tiles->tile[t]);
    uint32_t *rows = tile_rows(uv->tiles->tile[t]);
    unsigned old_len = lens[j];
    for (unsigned s = 0; s < old_len; s++) rows[s * FG_UV_TILE_REGISTERS + j] = 0;
    for (unsigned s = 0; s < next->len; s++)
        rows[s * FG_UV_TILE_REGISTERS + j] = entry_make(uv, next->sec[s], next->rank[s]);
    lens[j] = (uint8_t)next->len;
    uv->entries = uv->entries - old_len + next->len;
    if (rebased) {
        for (int i = 0; i < FG_UV_TILES; i++)
            if (uv->tiles->tile[i] != NULL) tile_shrink(uv->tiles, i, a);
    } else if (next->len < old_len && old_len == uv->tiles->nrows[t]) {
        tile_shrink(uv->tiles, t, a);
    }
}

/* Writes register reg's new staircase, moving newest (and base). */
static void write_stair(fg_uv *uv, uint32_t reg, const stair *next, int64_t newest, bool empty,
                        const fg_allocator *a) {
    if (empty) uv->base = newest - uv->span;
    bool rebased = newest - uv->base + 1 >= REBASE_AT;
    if (rebased) rebase(uv, newest);
    uv->newest = newest;
    if (uv->tiles == NULL) list_write(uv, reg, next, a);
    else tile_write(uv, reg, next, rebased, a);
}

fg_uv_add_result fg_uv_add(fg_uv *uv, uint64_t hash, int64_t sec, const fg_allocator *a) {
    if (sec < 0 || sec > FG_UV_MAX_SECOND) return FG_UV_BADTIME;
    bool empty = uv->entries == 0;
    uint32_t reg = fg_uv_register(hash);
    uint8_t rank = fg_uv_rank(hash);
    int64_t newest = empty || sec > uv->newest ? sec : uv->newest;
    stair next;
    next.len = next.old_len = 0; /* set by stair_after_add; this calms -Wmaybe-uninitialized */
    /* A newer second always changes the staircase, so only it moves newest. */
    bool stair_changes = (empty || sec >= oldest_kept(uv)) && stair_after_add(uv, reg, sec, rank, newest, &next);
    tier_plan plan;
    if (!plan_tiers(uv, reg, rank, sec, newest, &plan, a)) return FG_UV_NOMEM;
    if (!stair_changes && !plan.changes) return FG_UV_UNCHANGED;
    stair_plan room;
    if (stair_changes && !plan_stair(uv, reg, &next, &room, a)) {
        plan_release(&plan, a);
        return FG_UV_NOMEM;
    }
    bool advanced = newest != uv->newest;
    if (stair_changes) {
        apply_stair_plan(uv, &room, a);
        write_stair(uv, reg, &next, newest, empty, a);
    }
    if (advanced) expire_buckets(uv, &plan, a);
    apply_tiers(uv, &plan, reg, rank, a);
    return FG_UV_CHANGED;
}

/* ---------------------------------------------------------------- query */

/* The scan. Register j of a tile gets the largest rank among its entries
 * at or after the threshold: the maximum over the rows of (entry >=
 * threshold ? entry & 63 : 0). Empty slots are 0, below every threshold,
 * so the scan needs neither lengths nor branches. */
typedef void scan_tile_fn(const uint32_t *rows, unsigned nrows, int32_t threshold,
                          uint8_t out[FG_UV_TILE_REGISTERS]);

/* The portable kernel, for hosts without SSE2; branch-free, so compilers
 * can vectorise it. Built everywhere: the unit tests hold it against the
 * SIMD kernel. */
static void scan_tile_portable(const uint32_t *rows, unsigned nrows, int32_t threshold,
                               uint8_t out[FG_UV_TILE_REGISTERS]) {
    uint32_t best[FG_UV_TILE_REGISTERS] = {0};
    for (unsigned s = 0; s < nrows; s++, rows += FG_UV_TILE_REGISTERS)
        for (int j = 0; j < FG_UV_TILE_REGISTERS; j++) {
            int32_t e = (int32_t)rows[j];
            uint32_t r = (uint32_t)-(int32_t)(e >= threshold) & (uint32_t)e & RANK_MASK;
            best[j] = best[j] > r ? best[j] : r;
        }
    for (int j = 0; j < FG_UV_TILE_REGISTERS; j++) out[j] = (uint8_t)best[j];
}

#ifdef __SSE2__
/* SSE2, the x86-64 baseline: per row and 16 registers, 4 signed compares
 * (entries stay below 2^31), the entries below the threshold zeroed and
 * the others cut to their rank, 3 packs to bytes and one pmaxub into the
 * running maxima, which are already the output bytes. */
static void scan_tile_sse2(const uint32_t *rows, unsigned nrows, int32_t threshold,
                           uint8_t out[FG_UV_TILE_REGISTERS]) {
    const __m128i limit = _mm_set1_epi32(threshold), rank = _mm_set1_epi32(RANK_MASK);
    __m128i best[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(),
                       _mm_setzero_si128()};
    for (unsigned s = 0; s < nrows; s++, rows += FG_UV_TILE_REGISTERS)
        for (int g = 0; g < 4; g++) {
            __m128i r[4];
            for (int q = 0; q < 4; q++) {
                __m128i e = _mm_loadu_si128((const __m128i *)(rows + 16 * g + 4 * q));
                r[q] = _mm_and_si128(_mm_andnot_si128(_mm_cmpgt_epi32(limit, e), e), rank);
            }
            __m128i bytes =
                _mm_packus_epi16(_mm_packs_epi32(r[0], r[1]), _mm_packs_epi32(r[2], r[3]));
            best[g] = _mm_max_epu8(best[g], bytes);
        }
    for (int g = 0; g < 4; g++) _mm_storeu_si128((__m128i *)(out + 16 * g), best[g]);
}

/* AVX2, where the CPU has it: 32 registers per step, packed the same way.
 * AVX2's packs work within each 128-bit half, so the bytes come out in
 * the order of groups of 4 registers 0, 2, 4, 6, 1, 3, 5, 7; the maxima
 * are kept in that order and put back once, at the end. */
__attribute__((target("avx2"))) static void scan_tile_avx2(const uint32_t *rows, unsigned nrows,
                                                           int32_t threshold,
                                                           uint8_t out[FG_UV_TILE_REGISTERS]) {
    const __m256i limit = _mm256_set1_epi32(threshold), rank = _mm256_set1_epi32(RANK_MASK);
    __m256i best[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (unsigned s = 0; s < nrows; s++, rows += FG_UV_TILE_REGISTERS)
        for (int g = 0; g < 2; g++) {
            __m256i r[4];
            for (int q = 0; q < 4; q++) {
                __m256i e = _mm256_loadu_si256((const __m256i *)(rows + 32 * g + 8 * q));
                r[q] = _mm256_and_si256(_mm256_andnot_si256(_mm256_cmpgt_epi32(limit, e), e), rank);
            }
            __m256i bytes =
                _mm256_packus_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
            best[g] = _mm256_max_epu8(best[g], bytes);
        }
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int g = 0; g < 2; g++)
        _mm256_storeu_si256((__m256i *)(out + 32 * g), _mm256_permutevar8x32_epi32(best[g], order));
}
#endif

/* The scan kernels by number (0 portable, 1 SSE2, 2 AVX2), the fastest
 * last; NULL when this build or this CPU has no such kernel. */
#define SCAN_KERNELS 3
static scan_tile_fn *scan_kernel(int kernel) {
    switch (kernel) {
    case 0: return scan_tile_portable;
#ifdef __SSE2__
    case 1: return scan_tile_sse2;
    case 2: return __builtin_cpu_supports("avx2") ? scan_tile_avx2 : NULL;
#endif
    default: return NULL;
    }
}

static void registers_since(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS],
                            scan_tile_fn *scan) {
    if (uv->entries == 0 || t1 > uv->newest) {
        memset(regs, 0, FG_UV_REGISTERS);
        return;
    }
    if (t1 < oldest_kept(uv)) t1 = oldest_kept(uv);
    int32_t threshold = (int32_t)entry_make(uv, t1, 0);
    if (uv->tiles == NULL) {
        memset(regs, 0, FG_UV_REGISTERS);
        for (uint32_t i = 0; i < uv->entries; i++) {
            uint32_t e = (uint32_t)uv->list[i], reg = LIST_REG(uv->list[i]);
            uint8_t rank = (int32_t)e >= threshold ? (uint8_t)(e & RANK_MASK) : 0;
            if (rank > regs[reg]) regs[reg] = rank;
        }
        return;
    }
    for (int t = 0; t < FG_UV_TILES; t++) {
        uint8_t *out = regs + t * FG_UV_TILE_REGISTERS;
        if (uv->tiles->tile[t] == NULL) memset(out, 0, FG_UV_TILE_REGISTERS);
        else scan(tile_rows_of(uv->tiles->tile[t]), uv->tiles->nrows[t], threshold, out);
    }
}

void fg_uv_registers_since(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS]) {
    int kernel = SCAN_KERNELS - 1;
    while (scan_kernel(kernel) == NULL) kernel--; /* the portable one is always there */
    registers_since(uv, t1, regs, scan_kernel(kernel));
}

/* The registers as one kernel finds them, for the unit tests, which hold
 * every kernel the host has against the portable one. False (regs
 * untouched) when there is no such kernel here. The tests declare it: it
 * is no part of the API. */
bool fg_uv_registers_since_kernel(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS],
                                  int kernel) {
    scan_tile_fn *scan = scan_kernel(kernel);
    if (scan == NULL) return false;
    registers_since(uv, t1, regs, scan);
    return true;
}

fg_status fg_uv_registers_last(const fg_uv *uv, int64_t n, int64_t now, uint8_t regs[FG_UV_REGISTERS]) {
    if (n < 1 || n > uv->span || now < 0 || now > FG_UV_MAX_SECOND) return FG_EINVAL;
    fg_uv_registers_since(uv, now - n + 1, regs);
    return FG_OK;
}

/* The tier and number of the coarsest retained bucket that starts at
 * cursor and ends by t2; -1 when there is none. */
static int bucket_at(const fg_uv *uv, int64_t cursor, int64_t t2, int64_t *number) {
    for (int k = FG_UV_TIERS - 1; k >= 0; k--) {
        const fg_uv_tier *tier = &uv->tiers[k];
        int64_t b = bucket_of(tier, cursor);
        if (tier->count == 0 || bucket_start(tier, b) != cursor || cursor + tier->width > t2 ||
            !retained(tier, b, uv->newest))
            continue;
        *number = b;
        return k;
    }
    return -1;
}

/* Whether a retained bucket of some tier starts at t. */
static bool on_kept_grid(const fg_uv *uv, int64_t t) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        int64_t b = bucket_of(tier, t);
        if (tier->count > 0 && bucket_start(tier, b) == t && retained(tier, b, uv->newest)) return true;
    }
    return false;
}

fg_uv_window_result fg_uv_registers_between(const fg_uv *uv, int64_t t1, int64_t t2,
                                            uint8_t regs[FG_UV_REGISTERS], int64_t *bad_edge) {
    if (t1 < 0 || t2 > FG_UV_MAX_SECOND + 1 || t1 >= t2) return FG_UV_WINDOW_BAD;
    memset(regs, 0, FG_UV_REGISTERS);
    if (uv->entries == 0) return FG_UV_WINDOW_OK;
    for (int64_t cursor = t1; cursor < t2;) {
        if (t2 > uv->newest && cursor >= oldest_kept(uv)) {
            uint8_t rest[FG_UV_REGISTERS];
            fg_uv_registers_since(uv, cursor, rest);
            fg_uv_merge_registers(regs, rest);
            break;
        }
        int64_t b;
        int k = bucket_at(uv, cursor, t2, &b);
        if (k < 0) {
            /* t1 is at fault only when no kept grid has it; else the cut
             * from t1 cannot end at t2. */
            *bad_edge = cursor == t1 && !on_kept_grid(uv, t1) ? t1 : t2;
            return FG_UV_WINDOW_OFF_GRID;
        }
        const fg_uv_tier *tier = &uv->tiers[k];
        const fg_uv_bucket *bucket = held_bucket(tier, b);
        if (bucket != NULL) bucket_merge_into(bucket, regs);
        cursor = bucket_start(tier, b + 1);
    }
    return FG_UV_WINDOW_OK;
}

uint64_t fg_uv_bytes(const fg_uv *uv) {
    uint64_t bytes = sizeof(*uv) + (uint64_t)uv->list_room * sizeof(uint64_t);
    if (uv->tiles != NULL) {
        bytes += sizeof(*uv->tiles);
        for (int t = 0; t < FG_UV_TILES; t++)
            if (uv->tiles->tile[t] != NULL) bytes += tile_bytes(uv->tiles->nrows[t]);
    }
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        bytes += (uint64_t)tier->room * sizeof(fg_uv_bucket *);
        for (uint32_t i = 0; i < tier->held; i++) bytes += bucket_bytes(tier->bucket[i]);
    }
    return bytes;
}

/* -------------------------------------------------------------- checking */

/* Whether every retained bucket of the entry's second holds its rank: an
 * add raises the bucket of each tier that keeps its second, and a kept
 * bucket is never lowered or replaced. */
static bool entry_in_buckets(const fg_uv *uv, uint32_t reg, int64_t sec, unsigned rank) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        int64_t b = bucket_of(tier, sec);
        if (!retained(tier, b, uv->newest)) continue;
        const fg_uv_bucket *bucket = held_bucket(tier, b);
        if (bucket == NULL || bucket_rank(bucket, reg) < rank) return false;
    }
    return true;
}

/* One register's staircase: times strictly ascending, ranks strictly
 * descending within 1..51, times in [base, newest], each entry in its
 * buckets; notes whether one is at newest. */
static bool stair_storable(const fg_uv *uv, uint32_t reg, const uint32_t *entries, unsigned len,
                           bool *has_newest) {
    for (unsigned s = 0; s < len; s++) {
        int64_t sec = entry_second(uv, entries[s]);
        unsigned r = entries[s] & RANK_MASK;
        if (r < 1 || r > FG_UV_MAX_RANK || sec < uv->base || sec > uv->newest ||
            !entry_in_buckets(uv, reg, sec, r))
            return false;
        if (s > 0 && (entry_second(uv, entries[s - 1]) >= sec || (entries[s - 1] & RANK_MASK) <= r))
            return false;
        *has_newest |= sec == uv->newest;
    }
    return true;
}

/* The list: sorted by register, at most FG_UV_LIST_MAX entries in its
 * room, each register's run a staircase. */
static bool list_storable(const fg_uv *uv, bool *has_newest) {
    if (uv->entries > uv->list_room || uv->list_room > FG_UV_LIST_MAX || (uv->list == NULL) != (uv->list_room == 0))
        return false;
    for (uint32_t i = 0; i < uv->entries;) {
        uint32_t reg = LIST_REG(uv->list[i]), run[MAX_STAIR];
        unsigned len = 0;
        if (reg >= FG_UV_REGISTERS || (i > 0 && LIST_REG(uv->list[i - 1]) >= reg)) return false;
        for (; i < uv->entries && LIST_REG(uv->list[i]) == reg; i++) {
            if (len == FG_UV_MAX_RANK) return false;
            run[len++] = (uint32_t)uv->list[i];
        }
        if (!stair_storable(uv, reg, run, len, has_newest)) return false;
    }
    return true;
}

/* The tiles: each tile's rows at least its longest staircase, empty slots
 * zero, every staircase storable; counts their entries. */
static bool tiles_storable(const fg_uv *uv, uint64_t *entries, bool *has_newest) {
    if (uv->list != NULL || uv->list_room != 0) return false;
    for (int t = 0; t < FG_UV_TILES; t++) {
        const uint32_t *block = uv->tiles->tile[t];
        unsigned nrows = uv->tiles->nrows[t];
        if ((block == NULL) != (nrows == 0) || nrows > FG_UV_MAX_RANK) return false;
        if (block == NULL) continue;
        for (int j = 0; j < FG_UV_TILE_REGISTERS; j++) {
            unsigned len = tile_lens_of(block)[j];
            uint32_t run[MAX_STAIR];
            if (len > nrows) return false;
            for (unsigned s = 0; s < nrows; s++) {
                uint32_t e = tile_rows_of(block)[s * FG_UV_TILE_REGISTERS + j];
                if (s < len) run[s] = e;
                else if (e != 0) return false;
            }
            if (!stair_storable(uv, (uint32_t)(t * FG_UV_TILE_REGISTERS + j), run, len, has_newest))
                return false;
            *entries += len;
        }
    }
    return true;
}

/* A bucket: retained, not after newest, its registers ranks 1..51 (sparse:
 * sorted, within its room; dense exactly when sparse would be larger). */
static bool bucket_storable(const fg_uv *uv, const fg_uv_tier *tier, const fg_uv_bucket *bucket) {
    if (!retained(tier, bucket->number, uv->newest) || bucket->number > bucket_of(tier, uv->newest))
        return false;
    if (bucket_dense(bucket)) {
        uint8_t top = 0;
        for (int i = 0; i < FG_UV_REGISTERS; i++) top = dense_regs_of(bucket)[i] > top ? dense_regs_of(bucket)[i] : top;
        return bucket->room == 0 && top <= FG_UV_MAX_RANK && bucket_nonzero(bucket) > SPARSE_MAX;
    }
    if (bucket->pairs == 0 || bucket->pairs > bucket->room || bucket->room > SPARSE_MAX) return false;
    for (uint32_t i = 0; i < bucket->pairs; i++) {
        uint32_t reg = PAIR_REG(bucket->data[i]), rank = PAIR_RANK(bucket->data[i]);
        if (reg >= FG_UV_REGISTERS || rank < 1 || rank > FG_UV_MAX_RANK ||
            (i > 0 && PAIR_REG(bucket->data[i - 1]) >= reg))
            return false;
    }
    return true;
}

static bool tiers_storable(const fg_uv *uv) {
    if (uv->tzoffset < -FG_UV_MAX_TZOFFSET || uv->tzoffset > FG_UV_MAX_TZOFFSET || uv->tzoffset % 60 != 0)
        return false;
    uint64_t buckets = 0;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        if (tier->width != tier_widths[k] || tier->offset != (k == 0 ? 0 : uv->tzoffset) ||
            tier->count > tier_limits[k] || tier->held > tier->room || tier->room > tier->count ||
            (tier->bucket == NULL) != (tier->room == 0))
            return false;
        if (tier->room == 0) continue;
        if (tier->count == 0 || uv->entries == 0) return false;
        for (uint32_t i = 0; i < tier->held; i++) {
            if (!bucket_storable(uv, tier, tier->bucket[i])) return false;
            if (i > 0 && tier->bucket[i - 1]->number >= tier->bucket[i]->number) return false;
        }
        buckets += tier->held;
    }
    return buckets == uv->buckets;
}

/* Whether no bucket that starts within the span holds more than the
 * staircase: each of its items is there, or dominated by a later one, since
 * nothing that recent was pruned. */
static bool buckets_within_stairs(const fg_uv *uv) {
    uint8_t since[FG_UV_REGISTERS], held[FG_UV_REGISTERS];
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        for (uint32_t i = 0; i < tier->held; i++) {
            const fg_uv_bucket *bucket = tier->bucket[i];
            int64_t start = bucket_start(tier, bucket->number);
            if (start < oldest_kept(uv)) continue;
            fg_uv_registers_since(uv, start, since);
            memset(held, 0, sizeof(held));
            bucket_merge_into(bucket, held);
            for (int r = 0; r < FG_UV_REGISTERS; r++)
                if (held[r] > since[r]) return false;
        }
    }
    return true;
}

bool fg_uv_storable(const fg_uv *uv) {
    if (uv == NULL || uv->span < 1 || uv->span > FG_UV_MAX_SPAN || !tiers_storable(uv)) return false;
    if (uv->entries == 0) return uv->newest == 0 && uv->base == 0 && fg_uv_bytes(uv) == sizeof(*uv);
    if (uv->newest < 0 || uv->newest > FG_UV_MAX_SECOND) return false;
    /* Written so that no difference can overflow, whatever base holds. */
    if (uv->base > uv->newest - uv->span || uv->base <= uv->newest + 1 - REBASE_AT) return false;
    uint64_t entries = uv->tiles == NULL ? uv->entries : 0;
    bool has_newest = false;
    if (uv->tiles == NULL ? !list_storable(uv, &has_newest) : !tiles_storable(uv, &entries, &has_newest))
        return false;
    if (entries != uv->entries || !has_newest) return false;
    return buckets_within_stairs(uv);
}

/* --------------------------------------------------------- serialization */

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint64_t get_le(const uint8_t **p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | (*p)[i];
    *p += bytes;
    return v;
}

size_t fg_uv_serialized_size(const fg_uv *uv) {
    size_t size = SERIAL_HEADER + (size_t)uv->entries * SERIAL_ENTRY + SERIAL_TIERS;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        size += 2;
        for (uint32_t i = 0; i < tier->held; i++)
            size += SERIAL_BUCKET + (size_t)bucket_nonzero(tier->bucket[i]) * SERIAL_PAIR;
    }
    return size;
}

/* The held bucket that comes first in slot order (b mod count), the order
 * of the serialized form (version 2 kept a ring). The held numbers lie
 * within `count` consecutive ones, so slot order is number order turned
 * at the one place the slots wrap. */
static uint32_t first_in_slot_order(const fg_uv_tier *tier) {
    uint32_t first = 0;
    for (uint32_t i = 1; i < tier->held; i++)
        if (slot_of(tier, tier->bucket[i]->number) < slot_of(tier, tier->bucket[first]->number)) first = i;
    return first;
}

static uint8_t *serialize_bucket(const fg_uv_bucket *bucket, uint8_t *p) {
    p = put_le(p, (uint64_t)bucket->number, 8);
    p = put_le(p, bucket_nonzero(bucket), 2);
    if (!bucket_dense(bucket)) {
        for (uint32_t i = 0; i < bucket->pairs; i++) {
            p = put_le(p, PAIR_REG(bucket->data[i]), 2);
            *p++ = (uint8_t)PAIR_RANK(bucket->data[i]);
        }
        return p;
    }
    for (int i = 0; i < FG_UV_REGISTERS; i++) {
        if (dense_regs_of(bucket)[i] == 0) continue;
        p = put_le(p, (uint64_t)i, 2);
        *p++ = dense_regs_of(bucket)[i];
    }
    return p;
}

static uint8_t *serialize_tier(const fg_uv_tier *tier, uint8_t *p) {
    p = put_le(p, tier->held, 2);
    uint32_t first = first_in_slot_order(tier);
    for (uint32_t n = 0; n < tier->held; n++) p = serialize_bucket(tier->bucket[(first + n) % tier->held], p);
    return p;
}

static uint8_t *serialize_entry(uint8_t *p, const fg_uv *uv, uint32_t reg, uint32_t e) {
    p = put_le(p, reg, 2);
    p = put_le(p, (uint64_t)entry_second(uv, e), 4);
    *p++ = (uint8_t)(e & RANK_MASK);
    return p;
}

void fg_uv_serialize(const fg_uv *uv, uint8_t *out) {
    uint8_t *p = out;
    *p++ = SERIAL_VERSION;
    p = put_le(p, (uint64_t)uv->span, 4);
    p = put_le(p, (uint64_t)uv->newest, 8);
    p = put_le(p, (uint64_t)uv->base, 8);
    p = put_le(p, uv->entries, 4);
    if (uv->tiles == NULL) {
        for (uint32_t i = 0; i < uv->entries; i++)
            p = serialize_entry(p, uv, LIST_REG(uv->list[i]), (uint32_t)uv->list[i]);
    } else {
        for (int t = 0; t < FG_UV_TILES; t++) {
            const uint32_t *block = uv->tiles->tile[t];
            for (int j = 0; block != NULL && j < FG_UV_TILE_REGISTERS; j++)
                for (unsigned s = 0; s < tile_lens_of(block)[j]; s++)
                    p = serialize_entry(p, uv, (uint32_t)(t * FG_UV_TILE_REGISTERS + j),
                                        tile_rows_of(block)[s * FG_UV_TILE_REGISTERS + j]);
        }
    }
    for (int k = 0; k < FG_UV_TIERS; k++) p = put_le(p, uv->tiers[k].count, 2);
    p = put_le(p, (uint64_t)uv->tzoffset, 4);
    for (int k = 0; k < FG_UV_TIERS; k++) p = serialize_tier(&uv->tiers[k], p);
}

/* Places the entries, sorted by register then second, into a list, or
 * into tiles sized for them past FG_UV_LIST_MAX; the staircases' shape is
 * checked afterwards by fg_uv_storable. */
static fg_status load_entries(fg_uv *uv, const uint8_t *p, uint64_t count, const fg_allocator *a) {
    uint8_t longest[FG_UV_TILES] = {0};
    const uint8_t *q = p;
    int64_t prev_reg = -1;
    unsigned run = 0;
    for (uint64_t i = 0; i < count; i++) {
        int64_t reg = (int64_t)get_le(&q, 2);
        int64_t sec = (int64_t)get_le(&q, 4);
        q++;
        if (reg >= FG_UV_REGISTERS || reg < prev_reg || sec < uv->base || sec > uv->newest) return FG_EINVAL;
        run = reg == prev_reg ? run + 1 : 1;
        if (run > FG_UV_MAX_RANK) return FG_EINVAL;
        prev_reg = reg;
        if (run > longest[reg / FG_UV_TILE_REGISTERS]) longest[reg / FG_UV_TILE_REGISTERS] = (uint8_t)run;
    }
    if (count <= FG_UV_LIST_MAX && count > 0) {
        uint32_t room = room_for((uint32_t)count, 1); /* as the adds would have left it */
        if (room > FG_UV_LIST_MAX) room = FG_UV_LIST_MAX;
        if ((uv->list = a->realloc(NULL, room * sizeof(uint64_t))) == NULL) return FG_EOVERFLOW;
        uv->list_room = room;
    } else if (count > 0) {
        if ((uv->tiles = a->realloc(NULL, sizeof(*uv->tiles))) == NULL) return FG_EOVERFLOW;
        memset(uv->tiles, 0, sizeof(*uv->tiles));
        for (int t = 0; t < FG_UV_TILES; t++)
            if (longest[t] > 0 && !tile_resize(uv->tiles, t, longest[t], a)) return FG_EOVERFLOW;
    }
    for (uint64_t i = 0; i < count; i++) {
        uint32_t reg = (uint32_t)get_le(&p, 2);
        int64_t sec = (int64_t)get_le(&p, 4);
        unsigned rank = *p++;
        /* a rank the encoding cannot hold becomes an empty entry, which
         * fg_uv_storable refuses */
        uint32_t e = rank > RANK_MASK ? 0 : entry_make(uv, sec, rank);
        if (uv->tiles == NULL) uv->list[i] = LIST_WORD(reg, e);
        else tile_push(uv->tiles->tile[reg / FG_UV_TILE_REGISTERS], reg % FG_UV_TILE_REGISTERS, e);
    }
    uv->entries = count;
    return FG_OK;
}

/* One bucket of nonzero sorted (register, rank) pairs at *p: sparse, or
 * dense when sparse would be larger, as an add would have built it. */
static fg_status load_bucket(int64_t number, uint64_t nonzero, const uint8_t **p, fg_uv_bucket **out,
                             const fg_allocator *a) {
    bool dense = nonzero > SPARSE_MAX;
    uint32_t room = room_for((uint32_t)nonzero, SPARSE_LEAST); /* as the adds would have left it */
    fg_uv_bucket *bucket = bucket_new(number, room < SPARSE_MAX ? room : SPARSE_MAX, dense, a);
    if ((*out = bucket) == NULL) return FG_EOVERFLOW;
    int64_t prev_reg = -1;
    for (uint64_t n = 0; n < nonzero; n++) {
        int64_t reg = (int64_t)get_le(p, 2);
        uint8_t rank = *(*p)++;
        if (reg >= FG_UV_REGISTERS || reg <= prev_reg || rank < 1 || rank > FG_UV_MAX_RANK) return FG_EINVAL;
        if (dense) dense_regs(bucket)[reg] = rank;
        else bucket->data[bucket->pairs++] = PAIR(reg, rank);
        prev_reg = reg;
    }
    return FG_OK;
}

/* One tier's buckets, from *p (at most `end`): each retained, in slot
 * order, with sorted registers of ranks 1..51; held by number. */
static fg_status load_tier(fg_uv *uv, fg_uv_tier *tier, const uint8_t **p, const uint8_t *end,
                           const fg_allocator *a) {
    if (end - *p < 2) return FG_EINVAL;
    uint64_t held = get_le(p, 2);
    if (held > tier->count) return FG_EINVAL;
    if (held > 0) {
        uint32_t room = array_room(tier, (uint32_t)held);
        if ((tier->bucket = a->realloc(NULL, room * sizeof(fg_uv_bucket *))) == NULL) return FG_EOVERFLOW;
        tier->room = (uint16_t)room;
    }
    int64_t prev_slot = -1;
    for (uint64_t i = 0; i < held; i++) {
        if (end - *p < SERIAL_BUCKET) return FG_EINVAL;
        int64_t number = (int64_t)get_le(p, 8);
        uint64_t nonzero = get_le(p, 2);
        if (!retained(tier, number, uv->newest) || number > bucket_of(tier, uv->newest) ||
            (int64_t)slot_of(tier, number) <= prev_slot || nonzero == 0 || nonzero > FG_UV_REGISTERS ||
            (uint64_t)(end - *p) < nonzero * SERIAL_PAIR)
            return FG_EINVAL;
        prev_slot = slot_of(tier, number);
        fg_uv_bucket *bucket;
        fg_status st = load_bucket(number, nonzero, p, &bucket, a);
        if (bucket != NULL) { /* held, so that freeing the tier frees it */
            uint32_t at = held_index(tier, number);
            memmove(tier->bucket + at + 1, tier->bucket + at, (tier->held - at) * sizeof(fg_uv_bucket *));
            tier->bucket[at] = bucket;
            tier->held++;
            uv->buckets++;
        }
        if (st != FG_OK) return st;
    }
    return FG_OK;
}

/* The tiers' parameters and buckets, which must end the payload exactly. */
static fg_status load_tiers(fg_uv *uv, const uint8_t *p, const uint8_t *end, const fg_allocator *a) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        fg_status st = load_tier(uv, &uv->tiers[k], &p, end, a);
        if (st != FG_OK) return st;
    }
    return p == end ? FG_OK : FG_EINVAL;
}

fg_status fg_uv_deserialize(fg_uv *uv, const uint8_t *in, size_t len, const fg_allocator *a) {
    if (len < SERIAL_HEADER + SERIAL_TIERS || in[0] != SERIAL_VERSION) return FG_EINVAL;
    const uint8_t *p = in + 1;
    int64_t span = (int64_t)get_le(&p, 4), newest = (int64_t)get_le(&p, 8), base = (int64_t)get_le(&p, 8);
    uint64_t count = get_le(&p, 4);
    if (count > (len - SERIAL_HEADER - SERIAL_TIERS) / SERIAL_ENTRY) return FG_EINVAL;
    const uint8_t *tiers = p + count * SERIAL_ENTRY;
    int64_t counts[FG_UV_TIERS];
    for (int k = 0; k < FG_UV_TIERS; k++) counts[k] = (int64_t)get_le(&tiers, 2);
    int64_t tzoffset = (int32_t)(uint32_t)get_le(&tiers, 4);
    fg_uv loaded;
    if (fg_uv_init_tiers(&loaded, span, counts[0], counts[1], counts[2], tzoffset) != FG_OK) return FG_EINVAL;
    loaded.newest = newest;
    loaded.base = base;
    /* Offsets must fit before anything is encoded. */
    if (loaded.newest < 0 || loaded.newest > FG_UV_MAX_SECOND || loaded.base > loaded.newest ||
        loaded.base <= loaded.newest + 1 - REBASE_AT)
        return FG_EINVAL;
    fg_status st = load_entries(&loaded, p, count, a);
    if (st == FG_OK) st = load_tiers(&loaded, tiers, in + len, a);
    if (st == FG_OK && !fg_uv_storable(&loaded)) st = FG_EINVAL;
    if (st != FG_OK) {
        fg_uv_free(&loaded, a);
        return st;
    }
    *uv = loaded;
    return FG_OK;
}

void fg_uv_free(fg_uv *uv, const fg_allocator *a) {
    a->free(uv->list);
    uv->list = NULL;
    uv->list_room = 0;
    tiles_free(uv->tiles, a);
    uv->tiles = NULL;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        fg_uv_tier *tier = &uv->tiers[k];
        for (uint32_t i = 0; i < tier->held; i++) a->free(tier->bucket[i]);
        a->free(tier->bucket);
        tier->bucket = NULL;
        tier->held = tier->room = 0;
    }
    uv->entries = 0;
    uv->buckets = 0;
}

void fg_uv_describe_grid(const fg_uv *uv, char *buf, size_t size) {
    static const char *const names[FG_UV_TIERS] = {"minutes", "hours", "days"};
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < FG_UV_TIERS && used < size; k++) {
        if (uv->tiers[k].count == 0) continue;
        int n = snprintf(buf + used, size - used, "%s%s for the last %u %s", used ? ", " : "",
                         names[k], uv->tiers[k].count, names[k]);
        if (n > 0) used += (size_t)n;
    }
    if (used == 0) snprintf(buf, size, "no buckets");
}

/* ------------------------------------------------ the commands' windows */

/* The oldest second a BETWEEN edge may name: the start of the oldest
 * bucket a tier keeps, or of the exact span (for windows that end after
 * the newest item), whichever is older. Only for a counter with entries. */
static int64_t oldest_edge(const fg_uv *uv) {
    int64_t oldest = oldest_kept(uv);
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        if (tier->count == 0) continue;
        int64_t start = bucket_start(tier, first_kept(tier, uv->newest));
        if (start < oldest) oldest = start;
    }
    return oldest;
}

bool fg_uv_window_registers(const fg_uv *uv, const fg_uv_window *w, int64_t now, const char *name,
                            size_t len, uint8_t regs[FG_UV_REGISTERS], char *msg, size_t msglen) {
    int shown = (int)(len < FG_UV_NAME_SHOWN ? len : FG_UV_NAME_SHOWN);
    if (w->last) {
        if (w->seconds <= uv->span) {
            fg_uv_registers_last(uv, w->seconds, now, regs);
            return true;
        }
        snprintf(msg, msglen, FG_ERR_UV_LAST_TOO_LONG, (long long)w->seconds, shown, name,
                 (long long)uv->span);
        return false;
    }
    int64_t edge = w->start;
    if (fg_uv_registers_between(uv, w->start, w->end, regs, &edge) == FG_UV_WINDOW_OK) return true;
    char grid[GRID_TEXT_MAX];
    fg_uv_describe_grid(uv, grid, sizeof(grid));
    int64_t oldest = oldest_edge(uv);
    if (edge < oldest)
        snprintf(msg, msglen, ERR_UV_RETENTION, (long long)(edge * US_PER_SEC), shown, name,
                 (long long)(oldest * US_PER_SEC), grid);
    else
        snprintf(msg, msglen, FG_ERR_UV_OFF_GRID, (long long)(edge * US_PER_SEC), shown, name,
                 grid);
    return false;
}
