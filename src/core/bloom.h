/*
 * bloom.h - Bloom filters: cache-line blocked, sized for their real false
 * positive rate, and scalable (a chain of filters that grows when full).
 *
 * One filter ("level") is an array of 512-bit blocks. An item's 64-bit hash
 * picks `nblocks_per_item` blocks (1 or 2) and k bit positions inside each,
 * so a lookup touches one or two cache lines instead of k. Blocking raises
 * the false-positive rate at equal memory (block loads vary), so a level is
 * sized from the exact blocked formula -- the Poisson mixture over block
 * loads -- not from the classic (1 - e^(-kn/m))^k: the smallest array whose
 * expected rate at `capacity` items is at most the level's target, with the
 * best k. One block per item above a target of 0.5%, two below (one block
 * costs too much memory at small rates). The result stays within 1.1 x the
 * classic optimum -ln p / ln^2 2 bits per item for targets from 0.25 down
 * to 1e-6.
 *
 * A scalable filter is a chain of levels. Level 0 has the reserved capacity
 * and 0.8 of the target rate; when it is full a new level is added with
 * `expansion` times the capacity of the previous one, and level i >= 1 gets
 * 0.2 x 6 / (pi^2 i^2) of the target, so that the whole chain never exceeds
 * the target however far it grows, while the levels' rates shrink only
 * polynomially (RedisBloom halves them, which costs 1.44 bits per item per
 * level). A non-scaling filter is one level with the whole target, and
 * refuses adds beyond its capacity.
 *
 * Items are hashed once (fg_bloom_hash); every level derives its probes from
 * that hash and its own index, so a lookup in a chain of L levels hashes once.
 * A filter records the hash it was made with: new filters use XXH3; filters
 * stored before floodgate took XXH3 keep the hash their bits were set with.
 *
 * Pure C: memory through the fg_bloom_allocator passed in, no I/O, no clock.
 */
#ifndef FG_BLOOM_H
#define FG_BLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "allocator.h"

#define FG_BLOOM_MAX_CAPACITY (1LL << 40) /* items in one level */
#define FG_BLOOM_MAX_LEVELS 64
#define FG_BLOOM_MAX_EXPANSION 32768
#define FG_BLOOM_MAX_BYTES (1LL << 40) /* of one level's bit array */
#define FG_BLOOM_BLOCK_BYTES 64
/* The smallest error rate a filter may ask for. An item probes at most two
 * blocks, so below this the array would have to grow far beyond the optimum
 * (1.2 x at 1e-9, 4.5 x at 1e-30, and sizing alone takes seconds): a single
 * command could take the server's memory. */
#define FG_BLOOM_MIN_ERROR 1e-9

/* How a filter hashes its items; stored with it, so never renumbered. */
typedef enum fg_bloom_hash_id {
    /* floodgate's first hash: collides on short items (the decimal strings
     * "0".."9999999" share 98,692 values). Only filters stored with it use
     * it; nothing new is made with it. */
    FG_BLOOM_HASH_LEGACY = 1,
    /* XXH3, 64 bits, seed 0: every filter made by fg_bloom_init. */
    FG_BLOOM_HASH_XXH3 = 2,
} fg_bloom_hash_id;

/* The hash of an item under `id`: 64 bits, the same on every platform and
 * forever (it is in every stored filter). item may be NULL when len is 0. */
uint64_t fg_bloom_hash(fg_bloom_hash_id id, const void *item, size_t len);

/* Memory of a filter: the allocator for its tables, and zeroed memory for
 * its bit arrays (calloc's contract, NULL on failure), which an allocator
 * can hand out from fresh pages without writing zeros over gigabytes. */
typedef struct fg_bloom_allocator {
    fg_allocator heap;
    void *(*calloc)(size_t nmemb, size_t size);
} fg_bloom_allocator;

typedef struct fg_bloom_level {
    uint64_t *bits;    /* nblocks * 8 words (aligned to 64 bytes from 4 KiB on) */
    uint64_t nblocks;  /* >= 1 */
    uint64_t capacity; /* items this level is sized for */
    uint64_t items;    /* adds that set at least one bit here */
    uint64_t bits_set; /* bits at 1, kept exactly (for the cardinality estimate) */
    double error;      /* this level's target rate */
    uint8_t k;         /* bits set per block probed, 1..32 */
    uint8_t blocks;    /* blocks probed per item: 1 or 2 */
} fg_bloom_level;

typedef struct fg_bloom {
    double error;        /* the whole filter's target rate, in (0, 1) */
    uint64_t capacity0;  /* level 0's capacity */
    uint32_t expansion;  /* 0: non-scaling; else growth factor >= 1 */
    uint16_t nlevels;    /* at most FG_BLOOM_MAX_LEVELS */
    uint8_t hash;        /* fg_bloom_hash_id */
    fg_bloom_level *levels; /* level 0 first */
} fg_bloom;

typedef enum fg_bloom_add_result {
    FG_BLOOM_ADDED = 1,  /* new: at least one bit set */
    FG_BLOOM_PRESENT = 0, /* maybe already there: nothing changed */
    FG_BLOOM_FULL = -1,  /* a non-scaling filter at capacity (nothing changed) */
    FG_BLOOM_NOMEM = -2, /* a new level could not be had (nothing changed) */
} fg_bloom_add_result;

/* The geometry of a level for `capacity` items at `error` (no memory is
 * allocated): *nblocks, *k, *blocks. FG_EINVAL when out of range. */
fg_status fg_bloom_level_geometry(uint64_t capacity, double error, uint64_t *nblocks, uint8_t *k,
                                  uint8_t *blocks);

/* A filter with level 0 allocated, hashing with XXH3. error in (0, 1);
 * capacity in [1, FG_BLOOM_MAX_CAPACITY]; expansion 0 (non-scaling) or
 * [1, FG_BLOOM_MAX_EXPANSION]. FG_EINVAL, FG_EOVERFLOW (no memory or too
 * big); *f untouched on error. */
fg_status fg_bloom_init(fg_bloom *f, double error, uint64_t capacity, uint32_t expansion,
                        const fg_bloom_allocator *a);

/* Adds an item by its hash: PRESENT when any level may hold it (nothing is
 * written), else sets its bits in the newest level, adding a level first
 * when that one is full. */
fg_bloom_add_result fg_bloom_add(fg_bloom *f, uint64_t hash, const fg_bloom_allocator *a);

/* Whether the item may be in the filter (false: certainly not). */
bool fg_bloom_contains(const fg_bloom *f, uint64_t hash);

/* The bytes fg_bloom_add would allocate for an item that is not present:
 * the next level's when the newest is full and the filter may grow, else 0
 * (also when no next level can be had: the add then answers NOMEM). */
uint64_t fg_bloom_growth_bytes(const fg_bloom *f);

/* The bytes a level's bit array takes (with its alignment). */
uint64_t fg_bloom_level_bytes(uint64_t nblocks);

/* Adds that returned ADDED, over all levels (BF.INFO "Number of items
 * inserted"). */
uint64_t fg_bloom_items(const fg_bloom *f);

/* The number of distinct items added, estimated: the adds that answered
 * ADDED, plus the new items that a false positive made look present,
 * expected from each level's rate as it filled. Never below
 * fg_bloom_items. */
uint64_t fg_bloom_cardinality(const fg_bloom *f);

/* Sum of the levels' capacities; bytes of the bit arrays plus the headers
 * (BF.INFO "Capacity" and "Size"). */
uint64_t fg_bloom_capacity(const fg_bloom *f);
uint64_t fg_bloom_bytes(const fg_bloom *f);

/* The geometry of level i of a scaling filter (its capacity and target
 * rate), as fg_bloom_add creates it; for restoring and checking. */
fg_status fg_bloom_level_plan(double error, uint64_t capacity0, uint32_t expansion, uint32_t i,
                              uint64_t *capacity, double *level_error);

/* The bytes of a new filter's first level; FG_EINVAL when its geometry
 * cannot be had (the filter would be too big: FG_ERR_BF_TOO_BIG), which
 * tells that refusal apart from a lack of memory (FG_ERR_BF_NO_FILTER). */
fg_status fg_bloom_first_level_bytes(double error, uint64_t capacity0, uint32_t expansion,
                                     uint64_t *bytes);

/* Appends a level with the given geometry and zeroed bits (for loaders,
 * which then fill the bits and counters). */
fg_status fg_bloom_push_level(fg_bloom *f, const fg_bloom_level *geometry,
                              const fg_bloom_allocator *a);

/* Whether a loaded filter is one this code could have made: parameters and
 * hash in range, every level's geometry equal to fg_bloom_level_plan's and
 * fg_bloom_level_geometry's, bits_set equal to the popcount of its bits,
 * items <= capacity, and every level but the newest exactly full. */
bool fg_bloom_storable(const fg_bloom *f);

/* Frees the levels; the struct itself is the caller's. */
void fg_bloom_free(fg_bloom *f, const fg_bloom_allocator *a);

#endif
