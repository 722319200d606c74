/*
 * fuzz_uv.c - a coverage-guided property test of core/uv.c.
 *
 * The input is read as a script: a counter's parameters (small spans, small
 * tiers, a time zone offset, a starting second), then operations on it --
 * adds of crafted hashes (a few registers, so that staircases collide and
 * grow, ranks mostly small), ladders that build long staircases, clock moves
 * (small steps, backwards, days, jumps that force a rebase, the end of the
 * u32 seconds), queries, allocations that fail, round trips and damaged
 * serialized forms. Times are picked near the edges that matter: newest,
 * newest - span and the bucket edges of each tier, give or take a second.
 *
 * The model is the list of every add the counter accepted (not BADTIME, not
 * NOMEM). After every step the fuzzer checks what must hold whatever the
 * input:
 *
 *   - fg_uv_registers_since(t1) is the maximum rank per register of the
 *     model's items at seconds >= max(t1, newest - span), later than now or
 *     not, with every scan kernel the host has; fg_uv_registers_last(n, now)
 *     is since(now - n + 1), and EINVAL outside n in [1, span], now in
 *     [0, FG_UV_MAX_SECOND];
 *   - fg_uv_registers_between(t1, t2) answers OK exactly when the cut of
 *     uv.h reaches t2 (whole retained buckets from t1, any tier, then the
 *     staircase once at or after newest - span if t2 > newest), and then
 *     its registers are those of every model item in [t1, t2); OFF_GRID
 *     names t1 when the cut cannot leave it, else t2; BAD for t1 >= t2 or
 *     an edge out of range;
 *   - every retained bucket holds the maxima of exactly its model items;
 *   - an add answers CHANGED iff what the serialized form holds changed,
 *     and the counter stays storable; UNCHANGED, BADTIME and NOMEM leave it
 *     bit for bit (addresses too); NOMEM iff an allocation that grows
 *     failed (a failed shrink is harmless);
 *   - fg_uv_bytes is the struct plus exactly the bytes held from the
 *     allocator; serialize -> deserialize -> serialize is byte-identical,
 *     the copy takes as many bytes (but for tiles shrunk to a list's
 *     size), and it answers and evolves as the original does;
 *   - a damaged serialized form never breaks the loader (ASan, UBSan); a
 *     refused one leaves the destination untouched and frees everything; an
 *     accepted one is storable, re-serializes to the same bytes, answers
 *     since() from its own entries and survives adds; a loader whose
 *     allocations fail answers FG_EOVERFLOW and holds nothing;
 *   - the dense string decodes back to the registers, merging is the
 *     maximum, and the estimate is Redis's, to the bit.
 *
 * Checking costs more than the calls checked (a window is 16 KB of
 * registers), so the scripts are short: at most 96 steps.
 *
 * Build: make fuzz-uv (long run) or make fuzz-uv-smoke (inside make test).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "uv.h"

#define MAX_ITEMS 8192
#define MAX_STEPS 96
#define REBASE_AT (1LL << 25) /* uv.c re-encodes before an offset reaches this */
#define HEADER_BYTES 25       /* version, span, newest, base, count */
#define ENTRY_BYTES 7         /* u16 register, u32 second, u8 rank */

static const int64_t widths[FG_UV_TIERS] = {60, 3600, 86400};

/* Registers in one tile, its neighbours and the far end. */
static const uint32_t hot_registers[8] = {0, 1, 2, 63, 64, 65, 8191, 16383};

/* ------------------------------------------------------------- memory */

/* Every block carries its size, so the fuzzer knows the bytes held, and the
 * allocator fails from the `fail_at`th call on when the script says so. */
typedef struct heap {
    uint64_t live;    /* bytes held */
    int64_t calls;    /* since armed */
    int64_t fail_at;  /* -1: never */
    bool grow_failed; /* a failure that was not a shrink */
    bool shrink_failed; /* since the input began: a block kept more room */
} heap;

static heap mem = {0, 0, -1, false, false};

static void arm(int64_t fail_at) {
    mem.calls = 0;
    mem.fail_at = fail_at;
    mem.grow_failed = false;
}

static void *fuzz_realloc(void *ptr, size_t size) {
    size_t *block = ptr ? (size_t *)ptr - 2 : NULL;
    size_t old = block ? block[0] : 0;
    if (mem.fail_at >= 0 && mem.calls++ >= mem.fail_at) {
        mem.grow_failed |= size > old || ptr == NULL;
        mem.shrink_failed |= size < old && ptr != NULL;
        return NULL;
    }
    block = realloc(block, size + 2 * sizeof(size_t));
    if (block == NULL) abort();
    mem.live += size - old;
    block[0] = size;
    return block + 2;
}

static void fuzz_free(void *ptr) {
    if (ptr == NULL) return;
    size_t *block = (size_t *)ptr - 2;
    mem.live -= block[0];
    free(block);
}

static const fg_allocator alloc = {fuzz_realloc, fuzz_free};

/* ------------------------------------------------------------ digests */

typedef struct digest {
    uint64_t x;
} digest;

/* The shift carries high bits down: a multiply alone only moves them up,
 * so two changes in the high bytes of words could cancel. */
static void mix(digest *d, uint64_t v) {
    d->x = (d->x ^ v) * 0x9e3779b97f4a7c15ULL;
    d->x ^= d->x >> 31;
}

static void mix_bytes(digest *d, const void *p, size_t n) {
    const uint8_t *b = p;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        mix(d, w);
    }
    while (n-- > 0) mix(d, *b++);
}

/* Everything a counter is, addresses included: the struct and every
 * block's words in use. */
static uint64_t digest_of(const fg_uv *uv) {
    digest d = {0xcbf29ce484222325ULL};
    mix_bytes(&d, uv, sizeof(*uv));
    if (uv->tiles == NULL && uv->entries > 0) mix_bytes(&d, uv->list, uv->entries * sizeof(uint64_t));
    for (int t = 0; uv->tiles != NULL && t < FG_UV_TILES; t++) {
        mix(&d, uv->tiles->nrows[t]);
        if (uv->tiles->tile[t] != NULL)
            mix_bytes(&d, uv->tiles->tile[t], (16 + (size_t)uv->tiles->nrows[t] * 64) * 4);
    }
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        for (uint32_t i = 0; i < tier->held; i++) {
            const fg_uv_bucket *bucket = tier->bucket[i];
            mix(&d, (uint64_t)(uintptr_t)bucket);
            mix_bytes(&d, bucket, sizeof(*bucket));
            mix_bytes(&d, bucket->data, bucket->pairs == FG_UV_DENSE ? FG_UV_REGISTERS
                                                                     : bucket->pairs * sizeof(uint32_t));
        }
    }
    return d.x;
}

typedef struct blob {
    uint8_t *bytes;
    size_t len;
} blob;

static blob serialized(const fg_uv *uv) {
    blob b = {NULL, fg_uv_serialized_size(uv)};
    b.bytes = malloc(b.len);
    CHECK(b.bytes != NULL);
    fg_uv_serialize(uv, b.bytes);
    return b;
}

static bool same_blob(blob a, blob b) { return a.len == b.len && memcmp(a.bytes, b.bytes, a.len) == 0; }

/* What the serialized form holds (so equal exactly when the forms are). */
static uint64_t content_of(const fg_uv *uv) {
    blob b = serialized(uv);
    digest d = {0xcbf29ce484222325ULL};
    mix_bytes(&d, b.bytes, b.len);
    free(b.bytes);
    return d.x;
}

/* Little-endian fields of a serialized form. */
static void put_u64(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ------------------------------------------------------------- the model */

typedef struct item {
    uint32_t reg;
    uint8_t rank;
    int64_t sec;
} item;

typedef struct run {
    reader in;
    fg_uv uv;
    int64_t now;  /* the script's clock */
    uint64_t salt; /* upper hash bits, for variety */
    item items[MAX_ITEMS];
    size_t nitems;
    int64_t newest; /* of the model: the newest accepted second */
    uint8_t want[FG_UV_REGISTERS], got[FG_UV_REGISTERS];
} run;

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }

static int64_t tier_offset(const fg_uv *uv, int k) { return k == 0 ? 0 : uv->tzoffset; }
static int64_t bucket_number(const fg_uv *uv, int k, int64_t sec) {
    return floor_div(sec + tier_offset(uv, k), widths[k]);
}
static int64_t bucket_begin(const fg_uv *uv, int k, int64_t b) { return b * widths[k] - tier_offset(uv, k); }

/* Bucket b of tier k is kept: one of the last `count` up to newest's. */
static bool kept(const fg_uv *uv, int k, int64_t b) {
    int64_t count = uv->tiers[k].count;
    return count > 0 && b > bucket_number(uv, k, uv->newest) - count;
}

/* The register maxima of the items at seconds [from, to). */
static void model_window(run *u, int64_t from, int64_t to) {
    memset(u->want, 0, sizeof(u->want));
    for (size_t i = 0; i < u->nitems; i++) {
        const item *it = &u->items[i];
        if (it->sec >= from && it->sec < to && it->rank > u->want[it->reg]) u->want[it->reg] = it->rank;
    }
}

/* What since(t1) must answer: nothing before newest - span is seen. */
static void model_since(run *u, int64_t t1) {
    if (u->nitems == 0) {
        memset(u->want, 0, sizeof(u->want));
        return;
    }
    int64_t oldest = u->newest - u->uv.span;
    model_window(u, t1 > oldest ? t1 : oldest, INT64_MAX);
}

/* --------------------------------------------------------------- checks */

/* uv.c's hook for its unit tests: the scan by one kernel (0 portable,
 * 1 SSE2, 2 AVX2; false when this host has no such kernel). Weak: without
 * it, fg_uv_registers_since alone (the fastest kernel) is checked. */
extern bool fg_uv_registers_since_kernel(const fg_uv *uv, int64_t t1, uint8_t regs[FG_UV_REGISTERS],
                                         int kernel) __attribute__((weak));

static void check_since(run *u, int64_t t1) {
    model_since(u, t1);
    fg_uv_registers_since(&u->uv, t1, u->got);
    CHECK(memcmp(u->got, u->want, FG_UV_REGISTERS) == 0);
    for (int kernel = 0; fg_uv_registers_since_kernel != NULL && kernel < 3; kernel++) {
        memset(u->got, 0xff, FG_UV_REGISTERS);
        if (fg_uv_registers_since_kernel(&u->uv, t1, u->got, kernel))
            CHECK(memcmp(u->got, u->want, FG_UV_REGISTERS) == 0);
    }
}

static void check_last(run *u, int64_t n, int64_t now) {
    fg_status st = fg_uv_registers_last(&u->uv, n, now, u->got);
    bool valid = n >= 1 && n <= u->uv.span && now >= 0 && now <= FG_UV_MAX_SECOND;
    CHECK(st == (valid ? FG_OK : FG_EINVAL));
    if (!valid) return;
    model_since(u, now - n + 1);
    CHECK(memcmp(u->got, u->want, FG_UV_REGISTERS) == 0);
}

/* The edges one whole kept bucket takes the cut to from p, within t2. */
static int next_edges(const fg_uv *uv, int64_t p, int64_t t2, int64_t next[FG_UV_TIERS]) {
    int n = 0;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        int64_t b = bucket_number(uv, k, p);
        if (bucket_begin(uv, k, b) == p && p + widths[k] <= t2 && kept(uv, k, b)) next[n++] = p + widths[k];
    }
    return n;
}

/* Whether the staircase answers the rest from p on. */
static bool stair_from(const fg_uv *uv, int64_t p, int64_t t2) {
    return t2 > uv->newest && p >= uv->newest - uv->span;
}

/* Whether uv.h's cut reaches t2 from t1: whole kept buckets of any tier,
 * then the staircase. The edges reached are few (a handful of kept buckets
 * per tier). */
static bool cut_reaches(const fg_uv *uv, int64_t t1, int64_t t2) {
    int64_t todo[64], seen[64];
    int ntodo = 0, nseen = 0;
    todo[ntodo++] = t1;
    while (ntodo > 0) {
        int64_t p = todo[--ntodo];
        if (p == t2 || stair_from(uv, p, t2)) return true;
        bool done = false;
        for (int i = 0; i < nseen; i++) done |= seen[i] == p;
        if (done) continue;
        CHECK(nseen < 64 && ntodo + FG_UV_TIERS <= 64);
        seen[nseen++] = p;
        ntodo += next_edges(uv, p, t2, todo + ntodo);
    }
    return false;
}

/* Whether a kept bucket of some tier starts at p. */
static bool on_kept_grid(const fg_uv *uv, int64_t p) {
    for (int k = 0; k < FG_UV_TIERS; k++) {
        int64_t b = bucket_number(uv, k, p);
        if (bucket_begin(uv, k, b) == p && kept(uv, k, b)) return true;
    }
    return false;
}

/* OK exactly when the cut reaches t2, and then exact; refused, the edge
 * named is t1 when no kept grid has it (and the staircase does not answer
 * from it), else t2: a t1 on the grid whose buckets overshoot t2 is t2's
 * fault. */
static void check_between(run *u, int64_t t1, int64_t t2) {
    int64_t edge = -42;
    fg_uv_window_result r = fg_uv_registers_between(&u->uv, t1, t2, u->got, &edge);
    if (t1 < 0 || t2 > FG_UV_MAX_SECOND + 1 || t1 >= t2) {
        CHECK(r == FG_UV_WINDOW_BAD);
        return;
    }
    bool answerable = u->nitems == 0 || cut_reaches(&u->uv, t1, t2);
    CHECK(r == (answerable ? FG_UV_WINDOW_OK : FG_UV_WINDOW_OFF_GRID));
    if (r == FG_UV_WINDOW_OFF_GRID) {
        bool t1_at_fault = !stair_from(&u->uv, t1, t2) && !on_kept_grid(&u->uv, t1);
        CHECK(edge == (t1_at_fault ? t1 : t2));
        return;
    }
    model_window(u, t1, t2);
    CHECK(memcmp(u->got, u->want, FG_UV_REGISTERS) == 0);
}

/* Every kept bucket holds exactly its items' maxima. */
static void check_buckets(run *u) {
    const fg_uv *uv = &u->uv;
    for (int k = 0; k < FG_UV_TIERS; k++) {
        const fg_uv_tier *tier = &uv->tiers[k];
        if (tier->count == 0 || u->nitems == 0) continue;
        int64_t last = bucket_number(uv, k, uv->newest);
        for (int64_t b = last - tier->count + 1; b <= last; b++) {
            model_window(u, bucket_begin(uv, k, b), bucket_begin(uv, k, b + 1));
            bool empty = true;
            for (int i = 0; i < FG_UV_REGISTERS && empty; i++) empty = u->want[i] == 0;
            const fg_uv_bucket *bucket = NULL;
            for (uint32_t i = 0; i < tier->held; i++)
                if (tier->bucket[i]->number == b) bucket = tier->bucket[i];
            CHECK((bucket != NULL) == !empty);
            if (bucket == NULL) continue;
            static uint8_t held[FG_UV_REGISTERS];
            if (bucket->pairs == FG_UV_DENSE) {
                memcpy(held, bucket->data, FG_UV_REGISTERS);
            } else {
                memset(held, 0, sizeof(held));
                for (uint32_t i = 0; i < bucket->pairs; i++) held[bucket->data[i] >> 8] = (uint8_t)bucket->data[i];
            }
            CHECK(memcmp(held, u->want, FG_UV_REGISTERS) == 0);
        }
    }
}

/* The bytes held by the counters alive: each struct plus its blocks. */
static void check_bytes(const fg_uv *a, const fg_uv *b) {
    uint64_t held = fg_uv_bytes(a) - sizeof(*a);
    if (b != NULL) held += fg_uv_bytes(b) - sizeof(*b);
    CHECK(held == mem.live);
}

/* The entries of a serialized form answer since(t1) by themselves. */
static void check_since_from_entries(const fg_uv *uv, const blob *b, int64_t t1, uint8_t *want,
                                     uint8_t *got) {
    memset(want, 0, FG_UV_REGISTERS);
    CHECK(b->len >= HEADER_BYTES);
    uint64_t count = get_u64(b->bytes + 21, 4);
    int64_t oldest = uv->newest - uv->span, from = t1 > oldest ? t1 : oldest;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *e = b->bytes + HEADER_BYTES + i * ENTRY_BYTES;
        uint64_t reg = get_u64(e, 2);
        if ((int64_t)get_u64(e + 2, 4) >= from && e[6] > want[reg]) want[reg] = e[6];
    }
    fg_uv_registers_since(uv, t1, got);
    CHECK(memcmp(got, want, FG_UV_REGISTERS) == 0);
}

/* ----------------------------------------------------------------- times */

/* A second near one that matters: now, newest, newest - span, or an edge
 * of a tier's buckets around newest's; give or take a second or a span. */
static int64_t pick_time(run *u) {
    uint64_t v = take(&u->in, 1);
    static const int64_t jitters[8] = {0, 0, 0, -1, 1, -2, 2, 0};
    const fg_uv *uv = &u->uv;
    int64_t jitter = (v & 7) == 7 ? -uv->span : jitters[v & 7];
    unsigned anchor = (unsigned)(v >> 3);
    int64_t at;
    switch (anchor) {
    case 0: at = u->now; break;
    case 1: at = uv->newest; break;
    case 2: at = uv->newest - uv->span; break;
    case 3: at = uv->newest - uv->span / 2; break;
    case 4: at = uv->newest + 1; break;
    case 5: at = u->now - (int64_t)take(&u->in, 1); break;
    case 6: at = u->now - (int64_t)take(&u->in, 2) * 60; break;
    case 7: at = (int64_t)take(&u->in, 4); break;
    default: {
        int k = (int)((anchor - 8) / 8) % FG_UV_TIERS;
        int64_t back = (int64_t)((anchor - 8) % 8);
        at = bucket_begin(uv, k, bucket_number(uv, k, uv->newest) + 1 - back);
    }
    }
    return at + jitter;
}

/* A second for an add: mostly recent, sometimes an interesting edge. */
static int64_t add_time(run *u) {
    uint64_t v = take(&u->in, 1);
    int64_t at = v < 128 ? u->now - (int64_t)(v % 64) * (v < 64 ? 1 : 3) : pick_time(u);
    if (at < 0) at = 0;
    return at > FG_UV_MAX_SECOND ? FG_UV_MAX_SECOND : at;
}

static void move_clock(run *u) {
    uint64_t v = take(&u->in, 1), w = take(&u->in, 1);
    switch (v % 14) {
    case 0: case 1: case 2: case 3: u->now += 1 + (int64_t)(w % 100); break;
    case 4: u->now += 60 * (1 + (int64_t)(w % 10)); break;
    case 5: u->now += 3600 * (1 + (int64_t)(w % 6)); break;
    case 6: u->now += 86400 * (1 + (int64_t)(w % 6)); break;
    case 7: u->now -= 1 + (int64_t)(w % 100); break; /* a clock that went back */
    case 8: /* newest - base + 1 just around the rebase limit */
        u->now = u->uv.base + REBASE_AT - 1 + (int64_t)(w % 7) - 3;
        break;
    case 9: u->now = FG_UV_MAX_SECOND - (int64_t)(w % 100); break;
    case 10: u->now += (int64_t)take(&u->in, 3); break;
    case 11: u->now = u->uv.newest + (int64_t)(w % 5); break;
    case 12: u->now = pick_time(u); break;
    case 13: u->now += REBASE_AT - u->uv.span - 2 + (int64_t)(w % 5); break;
    }
    if (u->now < 0) u->now = 0;
    if (u->now > FG_UV_MAX_SECOND) u->now = FG_UV_MAX_SECOND;
}

/* ------------------------------------------------------------------ adds */

static uint64_t make_hash(run *u, uint32_t reg, unsigned rank) {
    u->salt = u->salt * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t hash = reg;
    if (rank <= 50) hash |= 1ULL << (13 + rank);
    if (rank < 50) hash |= u->salt << (14 + rank);
    CHECK(fg_uv_register(hash) == reg && fg_uv_rank(hash) == rank);
    return hash;
}

static uint32_t pick_register(run *u) {
    uint64_t v = take(&u->in, 1);
    if (v < 224) return hot_registers[v % 8];
    return (uint32_t)(take(&u->in, 2) % FG_UV_REGISTERS);
}

static unsigned pick_rank(run *u) {
    uint64_t v = take(&u->in, 1);
    if (v < 160) return 1 + (unsigned)(v % 6);
    if (v < 240) return 1 + (unsigned)(v % FG_UV_MAX_RANK);
    return v & 1 ? FG_UV_MAX_RANK : FG_UV_MAX_RANK - 1;
}

/* Adds (reg, rank) at sec, the allocator failing from call fail_at on
 * (-1: never), and checks the answer against what happened. */
static fg_uv_add_result add(run *u, uint32_t reg, unsigned rank, int64_t sec, int64_t fail_at) {
    if (u->nitems == MAX_ITEMS) return FG_UV_UNCHANGED; /* the model is full: stop adding */
    uint64_t hash = make_hash(u, reg, rank);
    uint64_t before = digest_of(&u->uv), held = content_of(&u->uv), live = mem.live;
    arm(fail_at);
    fg_uv_add_result r = fg_uv_add(&u->uv, hash, sec, &alloc);
    bool grow_failed = mem.grow_failed;
    arm(-1);
    bool bad_time = sec < 0 || sec > FG_UV_MAX_SECOND;
    CHECK((r == FG_UV_BADTIME) == bad_time);
    CHECK((r == FG_UV_NOMEM) == grow_failed);
    if (r == FG_UV_CHANGED) {
        CHECK(content_of(&u->uv) != held && fg_uv_storable(&u->uv));
    } else {
        CHECK(digest_of(&u->uv) == before && mem.live == live);
    }
    if (r == FG_UV_CHANGED || r == FG_UV_UNCHANGED) {
        u->items[u->nitems++] = (item){reg, (uint8_t)rank, sec};
        if (u->nitems == 1 || sec > u->newest) u->newest = sec;
    }
    CHECK(u->nitems == 0 || u->uv.newest == u->newest);
    return r;
}

/* A staircase of n steps in one register: ranks going down (or up) while
 * seconds go up (or stay, or go down). */
static void ladder(run *u) {
    uint32_t reg = pick_register(u);
    uint64_t v = take(&u->in, 1);
    unsigned top = 1 + (unsigned)(take(&u->in, 1) % FG_UV_MAX_RANK);
    static const int64_t steps[4] = {1, 1, 0, -1};
    int64_t sec = add_time(u), step = steps[v & 3];
    for (unsigned i = 0; i < top; i++, sec += step) {
        unsigned rank = v & 4 ? 1 + i : top - i;
        if (sec < 0 || sec > FG_UV_MAX_SECOND || u->nitems == MAX_ITEMS) break;
        add(u, reg, rank, sec, -1);
    }
}

/* Items at newest - span give or take a second, as the add that makes
 * newest - base + 1 reach the rebase limit moves base there: the seconds
 * from the new base on must stay, the older ones go. */
static void rebase_edge(run *u) {
    int64_t t = u->uv.base + REBASE_AT - 1;
    if (u->uv.entries == 0 || t > FG_UV_MAX_SECOND) return;
    for (int64_t j = -1; j <= 1; j++) {
        uint32_t reg = pick_register(u);
        add(u, reg, pick_rank(u), t - u->uv.span + j, -1);
    }
    uint32_t reg = pick_register(u);
    add(u, reg, pick_rank(u), t, -1);
    u->now = t;
}

/* ---------------------------------------------------- serialized forms */

/* A copy through the serialized form: the same bytes again, and the
 * same answers. */
static void round_trip(run *u, fg_uv *copy) {
    blob b = serialized(&u->uv);
    CHECK(fg_uv_deserialize(copy, b.bytes, b.len, &alloc) == FG_OK);
    CHECK(fg_uv_storable(copy));
    blob again = serialized(copy);
    CHECK(same_blob(b, again));
    check_bytes(&u->uv, copy);
    /* Rooms depend on what is held, not on history: the copy takes the
     * original's memory, unless a shrink of the original failed or it has
     * turned to tiles and since shrunk to what a list holds (it stays
     * tiles); never more. */
    if (!mem.shrink_failed && (u->uv.tiles == NULL || copy->tiles != NULL))
        CHECK(fg_uv_bytes(copy) == fg_uv_bytes(&u->uv));
    else if (u->uv.tiles == NULL || copy->tiles != NULL)
        CHECK(fg_uv_bytes(copy) <= fg_uv_bytes(&u->uv));
    int64_t t1 = pick_time(u);
    check_since_from_entries(&u->uv, &b, t1, u->want, u->got);
    check_since_from_entries(copy, &b, t1, u->want, u->got);
    free(again.bytes);
    free(b.bytes);
}

/* The copy evolves as the original does under the same adds. */
static void twin(run *u) {
    fg_uv copy;
    round_trip(u, &copy);
    for (uint64_t n = take(&u->in, 1) % 4; n > 0 && u->nitems < MAX_ITEMS; n--) {
        uint32_t reg = pick_register(u);
        unsigned rank = pick_rank(u);
        int64_t sec = add_time(u);
        uint64_t salt = u->salt;
        fg_uv_add_result r = add(u, reg, rank, sec, -1);
        u->salt = salt;
        CHECK(fg_uv_add(&copy, make_hash(u, reg, rank), sec, &alloc) == r);
        CHECK(content_of(&copy) == content_of(&u->uv));
    }
    check_bytes(&u->uv, &copy);
    fg_uv_free(&copy, &alloc);
}

/* The fields of the buckets of a serialized form (held counts, numbers,
 * register counts, the first and last pair of each), as (offset, size);
 * at most 64, some past the end of a damaged form. */
static int bucket_fields(const blob *b, uint64_t entries, size_t field[64][2]) {
    size_t p = HEADER_BYTES + entries * ENTRY_BYTES + 10;
    int n = 0;
    for (int k = 0; k < FG_UV_TIERS && p + 2 <= b->len && n + 1 <= 64; k++) {
        uint64_t held = get_u64(b->bytes + p, 2);
        field[n][0] = p, field[n++][1] = 2;
        p += 2;
        for (uint64_t i = 0; i < held && p + 10 <= b->len && n + 6 <= 64; i++) {
            uint64_t nonzero = get_u64(b->bytes + p + 8, 2);
            size_t last = p + 10 + 3 * (nonzero ? nonzero - 1 : 0);
            field[n][0] = p, field[n++][1] = 8;
            field[n][0] = p + 8, field[n++][1] = 2;
            field[n][0] = p + 10, field[n++][1] = 2;
            field[n][0] = p + 12, field[n++][1] = 1;
            field[n][0] = last, field[n++][1] = 2;
            field[n][0] = last + 2, field[n++][1] = 1;
            p += 10 + 3 * nonzero;
        }
    }
    return n;
}

/* One damage to a serialized form: bytes flipped or set, the length
 * changed, or a field moved by a little (so that the form stays close to
 * one the loader accepts). */
static void damage(run *u, blob *b) {
    uint64_t v = take(&u->in, 1), w = take(&u->in, 2);
    size_t at = b->len ? w % b->len : 0;
    int64_t delta = (int64_t)(v >> 4 & 7) - 3;
    static const uint8_t values[8] = {0, 1, 0xff, 51, 52, 63, 64, 0x80};
    uint64_t entries = b->len >= HEADER_BYTES ? get_u64(b->bytes + 21, 4) : 0;
    size_t entry = HEADER_BYTES + (entries ? (w % entries) * ENTRY_BYTES : 0);
    size_t fields[64][2];
    int nfields;
    switch (v % 13) {
    case 0: if (b->len) b->bytes[at] ^= (uint8_t)(1 << (w >> 13)); break;
    case 1: if (b->len) b->bytes[at] = values[w >> 13]; break;
    case 2: if (b->len) b->bytes[at] = (uint8_t)(b->bytes[at] + delta); break;
    case 3: b->len -= b->len ? 1 + w % (b->len < 8 ? b->len : 8) : 0; break;
    case 4: /* longer by a few bytes */
        b->bytes = realloc(b->bytes, b->len + 8);
        CHECK(b->bytes != NULL);
        for (uint64_t n = 1 + w % 8; n > 0; n--) b->bytes[b->len++] = (uint8_t)take(&u->in, 1);
        break;
    case 5: /* a field of the header: span, newest, base or count */
    {
        static const int offsets[4] = {1, 5, 13, 21}, sizes[4] = {4, 8, 8, 4};
        int f = (int)(w % 4);
        if (b->len < HEADER_BYTES) break;
        uint8_t *field = b->bytes + offsets[f];
        put_u64(field, get_u64(field, sizes[f]) + (uint64_t)delta, sizes[f]);
        break;
    }
    case 6: /* an entry's second, register or rank */
        if (entries && entry + ENTRY_BYTES <= b->len) {
            static const int offsets[4] = {0, 2, 6, 6}, sizes[4] = {2, 4, 1, 1};
            int f = (int)(w >> 14);
            uint8_t *field = b->bytes + entry + offsets[f];
            put_u64(field, get_u64(field, sizes[f]) + (uint64_t)delta, sizes[f]);
        }
        break;
    case 7: /* an entry dropped or doubled, the count kept right */
        if (entries && entry + ENTRY_BYTES <= b->len) {
            bool drop = w & 1;
            size_t tail = b->len - entry - ENTRY_BYTES;
            b->bytes = realloc(b->bytes, b->len + ENTRY_BYTES);
            CHECK(b->bytes != NULL);
            if (drop) {
                memmove(b->bytes + entry, b->bytes + entry + ENTRY_BYTES, tail);
                b->len -= ENTRY_BYTES;
            } else {
                memmove(b->bytes + entry + ENTRY_BYTES, b->bytes + entry, tail + ENTRY_BYTES);
                b->len += ENTRY_BYTES;
            }
            put_u64(b->bytes + 21, entries + (drop ? (uint64_t)-1 : 1), 4);
        }
        break;
    case 8: /* the tier parameters: counts and tzoffset */
    {
        size_t tiers = HEADER_BYTES + entries * ENTRY_BYTES;
        if (tiers + 10 <= b->len) {
            int f = (int)(w % 4);
            size_t off = tiers + (size_t)(f * 2);
            if (f < 3) put_u64(b->bytes + off, get_u64(b->bytes + off, 2) + (uint64_t)delta, 2);
            else put_u64(b->bytes + off, get_u64(b->bytes + off, 4) + (uint64_t)(delta * 60), 4);
        }
        break;
    }
    case 9: /* a byte of the tail (the buckets), moved by a little */
    {
        size_t tiers = HEADER_BYTES + entries * ENTRY_BYTES;
        if (tiers < b->len) {
            size_t off = tiers + w % (b->len - tiers);
            b->bytes[off] = (uint8_t)(b->bytes[off] + delta);
        }
        break;
    }
    case 10: /* the newest second moved, entries and all */
        if (b->len >= HEADER_BYTES)
            for (int f = 0; f < 2; f++) {
                int off = f == 0 ? 5 : 13;
                put_u64(b->bytes + off, get_u64(b->bytes + off, 8) + (uint64_t)(delta * 60), 8);
            }
        break;
    case 11: /* the top byte of newest or base */
        if (b->len >= HEADER_BYTES) b->bytes[w & 1 ? 12 : 20] = values[w >> 13];
        break;
    case 12: /* a field of a bucket: moved by a little, or a rank set */
        if ((nfields = bucket_fields(b, entries, fields)) > 0) {
            size_t *f = fields[w % nfields];
            if (f[0] + f[1] > b->len) break;
            uint64_t value = get_u64(b->bytes + f[0], (int)f[1]) + (uint64_t)delta;
            put_u64(b->bytes + f[0], f[1] == 1 && v & 128 ? values[w >> 13] : value, (int)f[1]);
        }
        break;
    }
}

/* Loads `b`, the allocator failing from call fail_at on (-1: never):
 * refused, the destination is untouched and nothing is held; accepted, the
 * counter is storable, re-serializes to b and survives adds. */
static void load(run *u, const blob *b, int64_t fail_at, bool valid) {
    fg_uv copy;
    memset(&copy, 0xa5, sizeof(copy));
    uint64_t live = mem.live;
    arm(fail_at);
    fg_status st = fg_uv_deserialize(&copy, b->bytes, b->len, &alloc);
    bool failed = mem.grow_failed;
    arm(-1);
    if (st != FG_OK) {
        /* A valid form is refused only for memory; any form, for memory only
         * when some failed. */
        CHECK(valid ? failed && st == FG_EOVERFLOW : st == FG_EINVAL || (failed && st == FG_EOVERFLOW));
        uint8_t poison[sizeof(copy)];
        memset(poison, 0xa5, sizeof(poison));
        CHECK(memcmp(&copy, poison, sizeof(copy)) == 0 && mem.live == live);
        return;
    }
    CHECK(!failed);
    CHECK(fg_uv_storable(&copy));
    CHECK(fg_uv_bytes(&copy) - sizeof(copy) == mem.live - live);
    blob again = serialized(&copy);
    CHECK(same_blob(*b, again));
    free(again.bytes);
    check_since_from_entries(&copy, b, pick_time(u), u->want, u->got);
    for (uint64_t n = take(&u->in, 1) % 4; n > 0; n--) {
        uint32_t reg = pick_register(u);
        fg_uv_add(&copy, make_hash(u, reg, pick_rank(u)), add_time(u), &alloc);
        CHECK(fg_uv_storable(&copy));
        int64_t edge;
        fg_uv_registers_between(&copy, pick_time(u), pick_time(u), u->got, &edge);
        fg_uv_registers_since(&copy, pick_time(u), u->got);
    }
    CHECK(fg_uv_bytes(&copy) - sizeof(copy) == mem.live - live);
    fg_uv_free(&copy, &alloc);
    CHECK(mem.live == live);
}

static void load_damaged(run *u) {
    blob b = serialized(&u->uv);
    for (uint64_t n = 1 + take(&u->in, 1) % 3; n > 0; n--) damage(u, &b);
    load(u, &b, -1, false);
    free(b.bytes);
}

static void load_failing(run *u) {
    blob b = serialized(&u->uv);
    load(u, &b, (int64_t)(take(&u->in, 1) % 8), true);
    free(b.bytes);
}

/* A window on a tier's grid: whole buckets back from newest's, to another
 * edge of that tier or the next, or past newest. */
static void check_grid_window(run *u, uint64_t op) {
    const fg_uv *uv = &u->uv;
    uint64_t v = take(&u->in, 1);
    int k = (int)(v % FG_UV_TIERS), next = (k + 1) % FG_UV_TIERS;
    int64_t from = (int64_t)(v >> 2 & 7), to = (int64_t)(v >> 5);
    int64_t t1 = bucket_begin(uv, k, bucket_number(uv, k, uv->newest) - from), t2;
    switch (op >> 4 & 3) {
    case 0: t2 = bucket_begin(uv, k, bucket_number(uv, k, uv->newest) + 1 - to); break;
    case 1: t2 = uv->newest + 1 + to; break;
    case 2: t2 = bucket_begin(uv, next, bucket_number(uv, next, uv->newest) + 1 - to); break;
    default: t2 = t1 + widths[k] * (1 + to); break;
    }
    check_between(u, t1, t2);
}

/* ------------------------------------------------------------- exports */

/* Redis's hllCount, written plainly: sigma for the empty registers, tau
 * for the saturated ones, the histogram halved from rank 50 down, in that
 * order, so that the rounding, and so the count, is the same to the bit. */
static double sigma(double x) {
    if (x == 1.0) return INFINITY;
    double power = x, weight = 1, sum = x, before;
    do {
        power *= power;
        before = sum;
        sum += power * weight;
        weight *= 2;
    } while (sum != before);
    return sum;
}

static double tau(double x) {
    if (x == 0.0 || x == 1.0) return 0.0;
    double root = x, weight = 1, sum = 1 - x, before;
    do {
        root = sqrt(root);
        before = sum;
        weight /= 2;
        sum -= (1 - root) * (1 - root) * weight;
    } while (sum != before);
    return sum / 3;
}

static uint64_t reference_estimate(const uint8_t *regs) {
    uint32_t counts[FG_UV_MAX_RANK + 1] = {0};
    for (int i = 0; i < FG_UV_REGISTERS; i++) counts[regs[i]]++;
    const double m = FG_UV_REGISTERS;
    double z = m * tau((m - counts[FG_UV_MAX_RANK]) / m);
    for (int k = FG_UV_MAX_RANK - 1; k >= 1; k--) z = (z + counts[k]) * 0.5;
    z += m * sigma(counts[0] / m);
    return (uint64_t)llround(0.721347520444481703680 * m * m / z);
}

/* The dense string holds the registers, 6 bits each, LSB first; the
 * estimate is Redis's. */
static void check_export(run *u) {
    static uint8_t hll[FG_UV_HLL_BYTES];
    fg_uv_registers_since(&u->uv, pick_time(u), u->got);
    fg_uv_to_redis_hll(u->got, hll);
    CHECK(memcmp(hll, "HYLL", 4) == 0 && hll[15] == 0x80);
    for (int i = 4; i < 15; i++) CHECK(hll[i] == 0);
    for (int i = 0; i < FG_UV_REGISTERS; i++) {
        size_t bit = (size_t)i * 6, at = 16 + bit / 8;
        unsigned v = hll[at] | (at + 1 < FG_UV_HLL_BYTES ? (unsigned)hll[at + 1] << 8 : 0);
        CHECK(((v >> (bit % 8)) & 63) == u->got[i]);
    }
    uint8_t acc[FG_UV_REGISTERS];
    memcpy(acc, u->got, sizeof(acc));
    fg_uv_registers_since(&u->uv, pick_time(u), u->want);
    fg_uv_merge_registers(acc, u->want);
    for (int i = 0; i < FG_UV_REGISTERS; i++)
        CHECK(acc[i] == (u->got[i] > u->want[i] ? u->got[i] : u->want[i]));
    CHECK(fg_uv_estimate(acc) == reference_estimate(acc));
    /* Two values over all the registers: full, saturated, empty shapes. */
    memset(acc, (int)(take(&u->in, 1) % 52), sizeof(acc));
    memset(acc, (int)(take(&u->in, 1) % 52), take(&u->in, 2) % (FG_UV_REGISTERS + 1));
    CHECK(fg_uv_estimate(acc) == reference_estimate(acc));
    memset(acc, 0, sizeof(acc));
    CHECK(fg_uv_estimate(acc) == 0);
}

/* ------------------------------------------------------------- the script */

/* After every step (adds check fg_uv_storable when they change it). */
static void check_counter(run *u) {
    check_bytes(&u->uv, NULL);
    CHECK(u->nitems > 0 || (u->uv.entries == 0 && u->uv.buckets == 0));
    check_since(u, pick_time(u));
}

static void step(run *u) {
    uint64_t op = take(&u->in, 1);
    switch (op % 16) {
    case 0: case 1: case 2: case 3: {
        uint32_t reg = pick_register(u);
        unsigned rank = pick_rank(u);
        add(u, reg, rank, add_time(u), -1);
        break;
    }
    case 4: ladder(u); break;
    case 5: move_clock(u); break;
    case 6: op & 16 ? rebase_edge(u) : move_clock(u); break;
    case 7: { /* the allocator fails from its nth call on */
        uint32_t reg = pick_register(u);
        unsigned rank = pick_rank(u);
        int64_t sec = add_time(u);
        add(u, reg, rank, sec, (int64_t)(take(&u->in, 1) % 4));
        break;
    }
    case 8: { /* a second out of range */
        int64_t off = (int64_t)take(&u->in, 1), sec = op & 16 ? -1 - off : FG_UV_MAX_SECOND + 1 + off;
        add(u, pick_register(u), pick_rank(u), sec, -1);
        break;
    }
    case 9: check_since(u, pick_time(u)); break;
    case 10: {
        int64_t n = (int64_t)take(&u->in, 1) % (u->uv.span + 2);
        if (op & 16) n = u->uv.span + (int64_t)(op >> 5 & 1);
        check_last(u, n, op & 64 ? pick_time(u) : u->now);
        break;
    }
    case 11: {
        int64_t t1 = pick_time(u), t2 = op & 16 ? t1 + 1 + (int64_t)take(&u->in, 1) : pick_time(u);
        if (op & 32) t2 = FG_UV_MAX_SECOND + 1 + (int64_t)(op >> 6 & 1);
        check_between(u, t1, t2);
        break;
    }
    case 12: check_grid_window(u, op); break;
    case 13: op & 16 ? twin(u) : check_buckets(u); break;
    case 14: op & 16 ? load_failing(u) : load_damaged(u); break;
    case 15: check_export(u); break;
    }
    check_counter(u);
}

/* A counter's parameters: spans mostly short, tiers of up to 5 buckets. */
static void create(run *u) {
    static const int64_t spans[8] = {3600, 86400, 600, FG_UV_MAX_SPAN, 59, 61, 7200, 1};
    static const int64_t zones[8] = {0, 60, -60, 3600, -18000, 19800, 86400, -86400};
    static const int64_t starts[8] = {0, 1, 59, 1700000000, 1700006399, FG_UV_MAX_SECOND - 1000,
                                      REBASE_AT - 50, 86400 * 3 + 17};
    uint64_t v = take(&u->in, 1);
    int64_t span = v < 200 ? 1 + (int64_t)(v % 100) : spans[v % 8];
    uint64_t counts = take(&u->in, 2);
    uint64_t z = take(&u->in, 1), s = take(&u->in, 1);
    int64_t tz = z < 200 ? zones[z % 8] : ((int64_t)(z % 48) - 24) * 3600 + 60 * (int64_t)(z % 3);
    fg_uv scratch;
    CHECK(fg_uv_init_tiers(&scratch, span, 0, 0, 0, tz + 30) == FG_EINVAL);
    CHECK(fg_uv_init_tiers(&scratch, span + FG_UV_MAX_SPAN, 0, 0, 0, 0) == FG_EINVAL);
    CHECK(fg_uv_init_tiers(&scratch, span, FG_UV_MAX_MINUTES + 1, 0, 0, 0) == FG_EINVAL);
    CHECK(fg_uv_init_tiers(&u->uv, span, (int64_t)(counts % 6), (int64_t)(counts / 6 % 6),
                           (int64_t)(counts / 36 % 6), tz) == FG_OK);
    u->now = s < 200 ? starts[s % 8] : (int64_t)take(&u->in, 4);
    u->salt = s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run *u = calloc(1, sizeof(*u));
    CHECK(u != NULL);
    u->in = (reader){data, size};
    mem.shrink_failed = false;
    create(u);
    CHECK(fg_uv_storable(&u->uv));
    check_counter(u);
    for (int steps = 0; u->in.left > 0 && steps < MAX_STEPS; steps++) step(u);
    check_buckets(u);
    fg_uv copy;
    round_trip(u, &copy);
    fg_uv_free(&copy, &alloc);
    fg_uv_free(&u->uv, &alloc);
    CHECK(mem.live == 0);
    free(u);
    return 0;
}
