/*
 * bloom_types.c - the module data type of Bloom filters (fg-bloomf) and its
 * dump format.
 *
 * One format in three encodings. A filter is dumped as a header -- its
 * parameters, then each level's geometry and counters -- followed by its
 * bit arrays laid end to end, in chunks of at most 16 MiB that never span
 * two levels. BF.SCANDUMP and BF.LOADCHUNK carry the header as a byte
 * string (iterator 0 and 1) and each chunk under the iterator 1 + the byte
 * offset where the chunk ends, which is what RedisBloom's clients expect:
 * they feed every [iterator, data] pair that BF.SCANDUMP answered back to
 * BF.LOADCHUNK. AOF rewrite emits those same BF.LOADCHUNK commands. RDB
 * stores the header as fields, then the number of bytes present, then the
 * chunks as string buffers: loading never holds a 1 GiB string next to the
 * 1 GiB filter it fills.
 *
 * Versions. RDB encoding version 2 and dump header version 2 record the
 * hash the filter's bits were set with (core/bloom.h: XXH3 for every filter
 * made now). Version 1, written before floodgate hashed with XXH3, records
 * none and means the legacy hash. A filter keeps its hash for good, so one
 * loaded from version 1 is written back as version 2 naming the legacy
 * hash, and answers exactly as it did.
 *
 * Loading is one path for all three. A header is checked against what this
 * code would have made -- every level's geometry equal to the core's plan
 * for the filter's parameters, counters that adds could have produced --
 * and becomes a filter "being loaded": nothing allocated but the header.
 * Chunks must then arrive in order. A level is allocated when its first
 * byte arrives, so memory follows the bytes actually received (a header
 * that claims 64 levels and is followed by nothing costs a header). Each
 * chunk is checked before it is copied: it must be the next bytes, inside
 * one level, and its bits at 1 must keep the level's count within the
 * header's bits_set, equal to it when the level is complete. When the last
 * byte arrives the whole filter must pass fg_bloom_storable, or that chunk
 * is refused.
 *
 * A filter being loaded is a state like any other: RDB, AOF rewrite, COPY,
 * DEBUG DIGEST and BF.SCANDUMP carry the header and the bytes received so
 * far, so a BGSAVE, a restart or a replica's full sync in the middle of a
 * sequence of BF.LOADCHUNK commands leaves a key that the rest of the
 * sequence completes. Every such view depends only on the header and the
 * received bytes (never on which levels happen to be allocated), so master
 * and replica agree byte for byte.
 *
 * Memory. Every bit array passes memory_refusal (memory_limits.h) before
 * it is allocated: a new filter's first level, the level an add opens, a
 * level whose first byte arrives, a copy's levels; a header announcing a
 * filter larger than the bounds is refused at once. The arrays come zeroed
 * from the allocator's fresh pages, never zeroed by hand. Loading a file or
 * a master's data is not bounded, so a dataset always loads (a filter above
 * the ceiling is noted in the log); RESTORE is, and answers "Bad data
 * format" with the reason in the log.
 *
 * Free: a large filter is freed in a background thread (free_effort); the
 * free path only calls RedisModule_Free.
 */
#include "bloom_types.h"

#include <stdbool.h>
#include <string.h>

#include "../core/messages.h"
#include "memory_limits.h"

/* RDB encoding versions: 1 stored no hash (the legacy one), 2 stores it. */
#define ENCODING_VERSION        2
#define ENCODING_VERSION_LEGACY 1

/* Dump header: "FGBF", version, the hash id (version 2; version 1 has a
 * zero byte there and means the legacy hash), 2 zero bytes, error
 * (IEEE-754 double), capacity0 (u64), expansion (u32), nlevels (u32); then
 * per level: capacity, error, nblocks, items, bits_set (8 bytes each), k,
 * blocks, and 6 zero bytes. Little-endian throughout. */
#define HEADER_MAGIC          "FGBF"
#define HEADER_VERSION        2
#define HEADER_VERSION_LEGACY 1
#define HEADER_FIXED_BYTES    32
#define HEADER_LEVEL_BYTES    48

/* Free in the background above this many bytes of bits. */
#define FREE_EFFORT_UNIT (64 * 1024)

RedisModuleType *BloomType;

struct bloom_loading {
    fg_bloom_level *levels; /* every level's geometry and final counters; bits unused */
    uint32_t nlevels;
    uint64_t total;     /* bytes of all the levels' bits */
    uint64_t received;  /* bytes arrived, in order */
    uint64_t level_set; /* bits at 1 among the arrived bytes of the level being filled */
};

/* RedisBloom's words; one object, so that a loader can tell it apart. */
const char ERR_BAD_DATA[] = "ERR received bad data";

/* The level tables are small: TryAlloc, and Realloc as they grow by one.
 * Bit arrays are zeroed by memory_zeroed, and every caller of the core
 * that may allocate one has had it allowed by memory_refusal first. */
static void *bloom_realloc(void *ptr, size_t size) {
    return ptr ? RedisModule_Realloc(ptr, size) : RedisModule_TryAlloc(size);
}

static void bloom_release(void *ptr) {
    RedisModule_Free(ptr);
}

const fg_bloom_allocator bloom_allocator = {{bloom_realloc, bloom_release}, memory_zeroed};

static uint64_t level_bytes(const fg_bloom_level *l) {
    return l->nblocks * FG_BLOOM_BLOCK_BYTES;
}

/* ---------------------------------------------------------------- values */

bloom_lookup bloom_lookup_key(RedisModuleKey *key, bloom_value **out) {
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return BLOOM_EMPTY;
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(key) != BloomType)
        return BLOOM_WRONGTYPE;
    *out = RedisModule_ModuleTypeGetValue(key);
    return BLOOM_FOUND;
}

static bloom_value *value_new(double error, uint64_t capacity0, uint32_t expansion, uint8_t hash) {
    bloom_value *v = RedisModule_Alloc(sizeof(*v));
    memset(v, 0, sizeof(*v));
    v->f.error = error;
    v->f.capacity0 = capacity0;
    v->f.expansion = expansion;
    v->f.hash = hash;
    return v;
}

bloom_value *bloom_create(double error, uint64_t capacity, uint32_t expansion,
                          const char **refusal) {
    uint64_t bytes;
    if (fg_bloom_first_level_bytes(error, capacity, expansion, &bytes) != FG_OK) {
        *refusal = FG_ERR_BF_TOO_BIG;
        return NULL;
    }
    if ((*refusal = memory_refusal(0, bytes)) != NULL) return NULL;
    bloom_value *v = value_new(error, capacity, expansion, FG_BLOOM_HASH_XXH3);
    if (fg_bloom_init(&v->f, error, capacity, expansion, &bloom_allocator) != FG_OK) {
        RedisModule_Free(v);
        *refusal = FG_ERR_BF_NO_FILTER;
        return NULL;
    }
    return v;
}

fg_bloom_add_result bloom_add(bloom_value *v, const char *item, size_t len, const char **refusal) {
    uint64_t hash = fg_bloom_hash(v->f.hash, item, len);
    /* An item that is present changes nothing, so only a new one asks for
     * the next level's memory. */
    uint64_t growth = fg_bloom_growth_bytes(&v->f);
    if (growth > 0 && !fg_bloom_contains(&v->f, hash) &&
        (*refusal = memory_refusal(fg_bloom_bytes(&v->f), growth)) != NULL)
        return FG_BLOOM_NOMEM;
    fg_bloom_add_result r = fg_bloom_add(&v->f, hash, &bloom_allocator);
    *refusal = r == FG_BLOOM_FULL    ? FG_ERR_BF_FULL
               : r == FG_BLOOM_NOMEM ? FG_ERR_BF_NO_LEVEL
                                     : NULL;
    return r;
}

bool bloom_contains(const bloom_value *v, const char *item, size_t len) {
    return fg_bloom_contains(&v->f, fg_bloom_hash(v->f.hash, item, len));
}

static void loading_free(bloom_loading *l) {
    if (!l) return;
    RedisModule_Free(l->levels);
    RedisModule_Free(l);
}

/* Runs in a background thread for a large filter: RedisModule_Free only. */
void bloom_destroy(void *value) {
    bloom_value *v = value;
    fg_bloom_free(&v->f, &bloom_allocator);
    loading_free(v->loading);
    RedisModule_Free(v);
}

fg_bloom bloom_announced(const bloom_value *v) {
    fg_bloom view = v->f;
    if (v->loading) {
        view.nlevels = v->loading->nlevels;
        view.levels = v->loading->levels;
    }
    return view;
}

uint64_t bloom_total_bytes(const bloom_value *v) {
    if (v->loading) return v->loading->total;
    uint64_t total = 0;
    for (uint32_t i = 0; i < v->f.nlevels; i++)
        total += level_bytes(&v->f.levels[i]);
    return total;
}

uint64_t bloom_received_bytes(const bloom_value *v) {
    return v->loading ? v->loading->received : bloom_total_bytes(v);
}

/* Appends level `l` (its geometry and counters) with zeroed bits; NULL, or
 * the reply that refuses it. */
static const char *push_level(bloom_value *v, const fg_bloom_level *l) {
    const char *refusal = memory_refusal(fg_bloom_bytes(&v->f), fg_bloom_level_bytes(l->nblocks));
    if (refusal) return refusal;
    if (fg_bloom_push_level(&v->f, l, &bloom_allocator) != FG_OK) return FG_ERR_BF_NO_FILTER;
    fg_bloom_level *pushed = &v->f.levels[v->f.nlevels - 1];
    pushed->items = l->items;
    pushed->bits_set = l->bits_set;
    return NULL;
}

/* -------------------------------------------------------------- checking */

/* Counters that adds could have produced: every add that answered 1 set
 * between 1 and k x blocks bits, and only the newest level takes adds, the
 * older ones having been filled to their capacity. */
static bool counters_possible(const fg_bloom_level *l, bool newest) {
    uint64_t probes = (uint64_t)l->k * l->blocks;
    return l->bits_set <= l->nblocks * FG_BLOOM_BLOCK_BYTES * 8 && l->items <= l->bits_set &&
           l->bits_set <= l->items * probes && l->items <= l->capacity &&
           (newest || l->items == l->capacity);
}

/* Whether a header (parameters, geometry and counters of every level) is
 * one this code could have written. Bounds everything that sizes memory. */
static bool header_possible(const fg_bloom *h) {
    if ((h->hash != FG_BLOOM_HASH_LEGACY && h->hash != FG_BLOOM_HASH_XXH3) ||
        !(h->error > 0 && h->error < 1) || h->capacity0 < 1 ||
        h->capacity0 > (uint64_t)FG_BLOOM_MAX_CAPACITY || h->expansion > FG_BLOOM_MAX_EXPANSION ||
        h->nlevels < 1 || h->nlevels > FG_BLOOM_MAX_LEVELS)
        return false;
    for (uint32_t i = 0; i < h->nlevels; i++) {
        const fg_bloom_level *l = &h->levels[i];
        uint64_t capacity, nblocks;
        double error;
        uint8_t k, blocks;
        if (fg_bloom_level_plan(h->error, h->capacity0, h->expansion, i, &capacity, &error) !=
                FG_OK ||
            fg_bloom_level_geometry(capacity, error, &nblocks, &k, &blocks) != FG_OK)
            return false;
        if (l->capacity != capacity || l->error != error || l->nblocks != nblocks || l->k != k ||
            l->blocks != blocks || !counters_possible(l, i + 1 == h->nlevels))
            return false;
    }
    return true;
}

/* A filter to be loaded, announced with `nlevels` levels (at most
 * FG_BLOOM_MAX_LEVELS) for the caller to describe and check. */
static bloom_value *loading_new(double error, uint64_t capacity0, uint32_t expansion, uint8_t hash,
                                uint32_t nlevels) {
    bloom_value *v = value_new(error, capacity0, expansion, hash);
    bloom_loading *l = RedisModule_Alloc(sizeof(*l));
    memset(l, 0, sizeof(*l));
    l->nlevels = nlevels;
    l->levels = RedisModule_Alloc(sizeof(*l->levels) * nlevels);
    memset(l->levels, 0, sizeof(*l->levels) * nlevels);
    v->loading = l;
    return v;
}

/* Checks the announced levels and sums their bytes: NULL, or the reply
 * that refuses them (bad data, or the memory bound the whole filter would
 * pass: refused at once rather than at the level that passes it). */
static const char *loading_refusal(bloom_value *v) {
    fg_bloom h = bloom_announced(v);
    if (!header_possible(&h)) return ERR_BAD_DATA;
    v->loading->total = 0;
    for (uint32_t i = 0; i < h.nlevels; i++)
        v->loading->total += level_bytes(&h.levels[i]);
    return memory_refusal(0, fg_bloom_bytes(&h));
}

/* ---------------------------------------------------------------- chunks */

/* The level (index into h->levels) that holds byte `offset` of the bit
 * arrays laid end to end, and where that level begins; -1 past the end. */
static int64_t level_at(const fg_bloom *h, uint64_t offset, uint64_t *begin) {
    uint64_t start = 0;
    for (uint32_t i = 0; i < h->nlevels; i++) {
        uint64_t bytes = level_bytes(&h->levels[i]);
        if (offset - start < bytes) {
            *begin = start;
            return i;
        }
        start += bytes;
    }
    *begin = start;
    return -1;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
    return a < b ? a : b;
}

const char *bloom_chunk_at(const bloom_value *v, uint64_t offset, size_t *len) {
    uint64_t received = bloom_received_bytes(v), begin;
    *len = 0;
    if (offset >= received) return NULL;
    /* Every received byte lies in an allocated level. */
    int64_t i = level_at(&v->f, offset, &begin);
    const fg_bloom_level *l = &v->f.levels[i];
    uint64_t pos = offset - begin;
    *len = (size_t)min_u64(min_u64(level_bytes(l) - pos, received - offset), BLOOM_CHUNK_MAX);
    return (const char *)l->bits + pos;
}

static uint64_t popcount(const char *buf, size_t len) {
    uint64_t n = 0;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t word;
        memcpy(&word, buf + i, 8);
        n += (uint64_t)__builtin_popcountll(word);
    }
    for (; i < len; i++)
        n += (uint64_t)__builtin_popcount((unsigned char)buf[i]);
    return n;
}

const char *bloom_load_chunk(bloom_value *v, uint64_t offset, const char *buf, size_t len) {
    bloom_loading *l = v->loading;
    if (!l || len == 0 || offset != l->received) return ERR_BAD_DATA;
    fg_bloom h = bloom_announced(v);
    uint64_t begin;
    int64_t i = level_at(&h, offset, &begin);
    const fg_bloom_level *want = &l->levels[i]; /* offset < total: i >= 0 */
    uint64_t pos = offset - begin;
    if (len > level_bytes(want) - pos) return ERR_BAD_DATA;
    bool level_done = pos + len == level_bytes(want);
    uint64_t set = l->level_set + popcount(buf, len);
    if (set > want->bits_set || (level_done && set != want->bits_set)) return ERR_BAD_DATA;
    /* A chunk refused after its level was allocated leaves that level
     * allocated and zeroed, which nothing can observe. */
    if ((int64_t)v->f.nlevels == i) {
        const char *refusal = push_level(v, want);
        if (refusal) return refusal;
    }
    char *dst = (char *)v->f.levels[i].bits + pos;
    memcpy(dst, buf, len);
    if (offset + len == l->total && !fg_bloom_storable(&v->f)) {
        memset(dst, 0, len);
        return ERR_BAD_DATA;
    }
    l->received += len;
    l->level_set = level_done ? 0 : set;
    if (l->received == l->total) {
        loading_free(l);
        v->loading = NULL;
    }
    return NULL;
}

/* ---------------------------------------------------------------- header */

static void put_u64(unsigned char *p, uint64_t x) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(x >> (8 * i));
}

static void put_u32(unsigned char *p, uint32_t x) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(x >> (8 * i));
}

static void put_double(unsigned char *p, double d) {
    uint64_t x;
    memcpy(&x, &d, sizeof(x));
    put_u64(p, x);
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static uint32_t get_u32(const unsigned char *p) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++)
        x |= (uint32_t)p[i] << (8 * i);
    return x;
}

static double get_double(const unsigned char *p) {
    uint64_t x = get_u64(p);
    double d;
    memcpy(&d, &x, sizeof(d));
    return d;
}

static bool all_zero(const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (p[i]) return false;
    return true;
}

char *bloom_header_encode(const bloom_value *v, size_t *len) {
    fg_bloom h = bloom_announced(v);
    *len = HEADER_FIXED_BYTES + (size_t)h.nlevels * HEADER_LEVEL_BYTES;
    unsigned char *p = RedisModule_Alloc(*len);
    memset(p, 0, *len);
    memcpy(p, HEADER_MAGIC, 4);
    p[4] = HEADER_VERSION;
    p[5] = h.hash;
    put_double(p + 8, h.error);
    put_u64(p + 16, h.capacity0);
    put_u32(p + 24, h.expansion);
    put_u32(p + 28, h.nlevels);
    for (uint32_t i = 0; i < h.nlevels; i++) {
        const fg_bloom_level *l = &h.levels[i];
        unsigned char *q = p + HEADER_FIXED_BYTES + (size_t)i * HEADER_LEVEL_BYTES;
        put_u64(q, l->capacity);
        put_double(q + 8, l->error);
        put_u64(q + 16, l->nblocks);
        put_u64(q + 24, l->items);
        put_u64(q + 32, l->bits_set);
        q[40] = l->k;
        q[41] = l->blocks;
    }
    return (char *)p;
}

bloom_value *bloom_header_decode(const char *buf, size_t len, const char **refusal) {
    const unsigned char *p = (const unsigned char *)buf;
    *refusal = ERR_BAD_DATA;
    if (len < HEADER_FIXED_BYTES || memcmp(p, HEADER_MAGIC, 4) != 0 ||
        (p[4] != HEADER_VERSION && p[4] != HEADER_VERSION_LEGACY) || !all_zero(p + 6, 2))
        return NULL;
    uint8_t hash = p[4] == HEADER_VERSION ? p[5] : FG_BLOOM_HASH_LEGACY;
    uint32_t nlevels = get_u32(p + 28);
    if ((p[4] == HEADER_VERSION_LEGACY && p[5] != 0) || nlevels < 1 ||
        nlevels > FG_BLOOM_MAX_LEVELS ||
        len != HEADER_FIXED_BYTES + (size_t)nlevels * HEADER_LEVEL_BYTES)
        return NULL;
    bloom_value *v =
        loading_new(get_double(p + 8), get_u64(p + 16), get_u32(p + 24), hash, nlevels);
    bool zero_padding = true;
    for (uint32_t i = 0; i < nlevels; i++) {
        const unsigned char *q = p + HEADER_FIXED_BYTES + (size_t)i * HEADER_LEVEL_BYTES;
        fg_bloom_level *l = &v->loading->levels[i];
        l->capacity = get_u64(q);
        l->error = get_double(q + 8);
        l->nblocks = get_u64(q + 16);
        l->items = get_u64(q + 24);
        l->bits_set = get_u64(q + 32);
        l->k = q[40];
        l->blocks = q[41];
        zero_padding = zero_padding && all_zero(q + 42, 6);
    }
    if (!zero_padding || (*refusal = loading_refusal(v)) != NULL) {
        bloom_destroy(v);
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------------- RDB */

/* RDB layout: the hash id (from encoding version 2; version 1 means the
 * legacy hash), error, capacity0, expansion, nlevels; per level capacity,
 * error, nblocks, k, blocks, items, bits_set; the number of bytes of bits
 * present (all of them unless the filter is being loaded); those bytes as
 * the dump's chunks. */
static void bloom_rdb_save(RedisModuleIO *io, void *value) {
    const bloom_value *v = value;
    fg_bloom h = bloom_announced(v);
    RedisModule_SaveUnsigned(io, h.hash);
    RedisModule_SaveDouble(io, h.error);
    RedisModule_SaveUnsigned(io, h.capacity0);
    RedisModule_SaveUnsigned(io, h.expansion);
    RedisModule_SaveUnsigned(io, h.nlevels);
    for (uint32_t i = 0; i < h.nlevels; i++) {
        const fg_bloom_level *l = &h.levels[i];
        RedisModule_SaveUnsigned(io, l->capacity);
        RedisModule_SaveDouble(io, l->error);
        RedisModule_SaveUnsigned(io, l->nblocks);
        RedisModule_SaveUnsigned(io, l->k);
        RedisModule_SaveUnsigned(io, l->blocks);
        RedisModule_SaveUnsigned(io, l->items);
        RedisModule_SaveUnsigned(io, l->bits_set);
    }
    uint64_t received = bloom_received_bytes(v);
    RedisModule_SaveUnsigned(io, received);
    size_t len;
    for (uint64_t offset = 0; offset < received; offset += len) {
        const char *chunk = bloom_chunk_at(v, offset, &len);
        RedisModule_SaveStringBuffer(io, chunk, len);
    }
}

/* Reads the announced levels into v; narrows k and blocks only once they
 * are known to fit. */
static bool load_levels(RedisModuleIO *io, bloom_value *v) {
    for (uint32_t i = 0; i < v->loading->nlevels; i++) {
        fg_bloom_level *l = &v->loading->levels[i];
        l->capacity = RedisModule_LoadUnsigned(io);
        l->error = RedisModule_LoadDouble(io);
        l->nblocks = RedisModule_LoadUnsigned(io);
        uint64_t k = RedisModule_LoadUnsigned(io);
        uint64_t blocks = RedisModule_LoadUnsigned(io);
        l->items = RedisModule_LoadUnsigned(io);
        l->bits_set = RedisModule_LoadUnsigned(io);
        if (RedisModule_IsIOError(io) || k > UINT8_MAX || blocks > UINT8_MAX) return false;
        l->k = (uint8_t)k;
        l->blocks = (uint8_t)blocks;
    }
    return true;
}

/* The length of the dump chunk at `offset` when `received` bytes exist. */
static uint64_t chunk_length(const bloom_value *v, uint64_t offset, uint64_t received) {
    fg_bloom h = bloom_announced(v);
    uint64_t begin;
    int64_t i = level_at(&h, offset, &begin);
    uint64_t pos = offset - begin;
    return min_u64(min_u64(level_bytes(&h.levels[i]) - pos, received - offset), BLOOM_CHUNK_MAX);
}

/* The chunks: NULL, or the reply that refuses them. */
static const char *load_bits(RedisModuleIO *io, bloom_value *v, uint64_t received) {
    for (uint64_t offset = 0; offset < received;) {
        uint64_t want = chunk_length(v, offset, received);
        size_t len = 0;
        char *chunk = RedisModule_LoadStringBuffer(io, &len);
        if (RedisModule_IsIOError(io)) return ERR_BAD_DATA; /* chunk is NULL */
        const char *refusal = len == want ? bloom_load_chunk(v, offset, chunk, len) : ERR_BAD_DATA;
        RedisModule_Free(chunk);
        if (refusal) return refusal;
        offset += len;
    }
    return NULL;
}

/* A filter loaded from a file or a master above the ceiling is kept (the
 * bounds do not apply to loading), and said. */
static void note_above_ceiling(RedisModuleIO *io, const bloom_value *v) {
    fg_bloom h = bloom_announced(v);
    uint64_t bytes = fg_bloom_bytes(&h), ceiling = memory_max_structure_size();
    if (ceiling > 0 && bytes > ceiling)
        RedisModule_LogIOError(io, "notice",
                               "floodgate: loaded a Bloom filter of %llu bytes, above "
                               "floodgate.max-structure-size (%llu)",
                               (unsigned long long)bytes, (unsigned long long)ceiling);
}

static void *bloom_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION && encver != ENCODING_VERSION_LEGACY) return NULL;
    uint64_t hash =
        encver == ENCODING_VERSION ? RedisModule_LoadUnsigned(io) : FG_BLOOM_HASH_LEGACY;
    double error = RedisModule_LoadDouble(io);
    uint64_t capacity0 = RedisModule_LoadUnsigned(io);
    uint64_t expansion = RedisModule_LoadUnsigned(io);
    uint64_t nlevels = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || hash > UINT8_MAX || expansion > FG_BLOOM_MAX_EXPANSION ||
        nlevels < 1 || nlevels > FG_BLOOM_MAX_LEVELS)
        return NULL;
    bloom_value *v =
        loading_new(error, capacity0, (uint32_t)expansion, (uint8_t)hash, (uint32_t)nlevels);
    const char *refusal = load_levels(io, v) ? loading_refusal(v) : ERR_BAD_DATA;
    if (!refusal) {
        uint64_t received = RedisModule_LoadUnsigned(io);
        refusal = RedisModule_IsIOError(io) || received > v->loading->total
                      ? ERR_BAD_DATA
                      : load_bits(io, v, received);
    }
    if (refusal) {
        /* RESTORE answers "Bad data format" whatever the reason: the log
         * tells a memory bound apart. */
        if (refusal != ERR_BAD_DATA)
            RedisModule_LogIOError(io, "warning", "floodgate: Bloom filter not loaded: %s",
                                   refusal);
        bloom_destroy(v);
        return NULL;
    }
    note_above_ceiling(io, v);
    return v;
}

/* ------------------------------------------------------- other callbacks */

static void bloom_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    const bloom_value *v = value;
    size_t len;
    char *header = bloom_header_encode(v, &len);
    RedisModule_EmitAOF(io, "BF.LOADCHUNK", "slb", key, 1LL, header, len);
    RedisModule_Free(header);
    uint64_t received = bloom_received_bytes(v);
    for (uint64_t offset = 0; offset < received; offset += len) {
        const char *chunk = bloom_chunk_at(v, offset, &len);
        RedisModule_EmitAOF(io, "BF.LOADCHUNK", "slb", key, (long long)(1 + offset + len), chunk,
                            len);
    }
}

static void digest_u64(RedisModuleDigest *md, uint64_t x) {
    RedisModule_DigestAddLongLong(md, (long long)x);
}

static void digest_double(RedisModuleDigest *md, double d) {
    uint64_t x;
    memcpy(&x, &d, sizeof(x));
    digest_u64(md, x);
}

/* Sequences are combined regardless of their order, so each level and
 * chunk carries its position. */
static void bloom_digest(RedisModuleDigest *md, void *value) {
    const bloom_value *v = value;
    fg_bloom h = bloom_announced(v);
    uint64_t received = bloom_received_bytes(v);
    digest_u64(md, h.hash);
    digest_double(md, h.error);
    digest_u64(md, h.capacity0);
    digest_u64(md, h.expansion);
    digest_u64(md, h.nlevels);
    digest_u64(md, received);
    RedisModule_DigestEndSequence(md);
    for (uint32_t i = 0; i < h.nlevels; i++) {
        const fg_bloom_level *l = &h.levels[i];
        digest_u64(md, i);
        digest_u64(md, l->capacity);
        digest_double(md, l->error);
        digest_u64(md, l->nblocks);
        digest_u64(md, l->k);
        digest_u64(md, l->blocks);
        digest_u64(md, l->items);
        digest_u64(md, l->bits_set);
        RedisModule_DigestEndSequence(md);
    }
    size_t len;
    for (uint64_t offset = 0; offset < received; offset += len) {
        const char *chunk = bloom_chunk_at(v, offset, &len);
        digest_u64(md, offset);
        RedisModule_DigestAddStringBuffer(md, chunk, len);
        RedisModule_DigestEndSequence(md);
    }
}

static void *bloom_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    const bloom_value *v = value;
    bloom_value *dup = value_new(v->f.error, v->f.capacity0, v->f.expansion, v->f.hash);
    for (uint32_t i = 0; i < v->f.nlevels; i++) {
        const fg_bloom_level *l = &v->f.levels[i];
        if (push_level(dup, l) != NULL) {
            bloom_destroy(dup);
            return NULL; /* COPY answers an error */
        }
        memcpy(dup->f.levels[i].bits, l->bits, level_bytes(l));
    }
    if (v->loading) {
        const bloom_loading *l = v->loading;
        dup->loading = RedisModule_Alloc(sizeof(*l));
        *dup->loading = *l;
        dup->loading->levels = RedisModule_Alloc(sizeof(*l->levels) * l->nlevels);
        memcpy(dup->loading->levels, l->levels, sizeof(*l->levels) * l->nlevels);
    }
    return dup;
}

static size_t bloom_mem_usage(const void *value) {
    const bloom_value *v = value;
    size_t size = sizeof(*v) + fg_bloom_bytes(&v->f);
    if (v->loading) size += sizeof(*v->loading) + sizeof(*v->loading->levels) * v->loading->nlevels;
    return size;
}

static size_t bloom_free_effort(RedisModuleString *key, const void *value) {
    (void)key;
    const bloom_value *v = value;
    return 1 + (size_t)(fg_bloom_bytes(&v->f) / FREE_EFFORT_UNIT);
}

int bloom_types_create(RedisModuleCtx *ctx) {
    RedisModuleTypeMethods methods = {.version = REDISMODULE_TYPE_METHOD_VERSION,
                                      .rdb_load = bloom_rdb_load,
                                      .rdb_save = bloom_rdb_save,
                                      .aof_rewrite = bloom_aof_rewrite,
                                      .mem_usage = bloom_mem_usage,
                                      .digest = bloom_digest,
                                      .free = bloom_destroy,
                                      .free_effort = bloom_free_effort,
                                      .copy = bloom_copy};
    BloomType = RedisModule_CreateDataType(ctx, "fg-bloomf", ENCODING_VERSION, &methods);
    return BloomType ? REDISMODULE_OK : REDISMODULE_ERR;
}
