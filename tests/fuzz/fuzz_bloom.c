/*
 * fuzz_bloom.c - a coverage-guided property test of core/bloom.c.
 *
 * The input is read as a script: a filter's parameters (small capacities,
 * so that chains grow long) and hash (XXH3, or the legacy one of stored
 * filters), then operations on it -- adds and lookups of items from a small
 * universe, allocations that fail, a copy made as a loader makes it, and
 * copies with one field (the hash id too) or bit damaged. After every
 * step the fuzzer checks what must hold whatever the input:
 *
 *   - no false negatives: an item once added (or answered present) is
 *     always found;
 *   - the filter is storable: geometry as planned, counters exact;
 *     items counts the ADDED answers, cardinality is at least that;
 *   - PRESENT, FULL and NOMEM change nothing; FULL only for a non-scaling
 *     filter at capacity, NOMEM only when the allocator failed or the chain
 *     is at FG_BLOOM_MAX_LEVELS levels;
 *   - a copy made through fg_bloom_push_level is storable and answers the
 *     same;
 *   - a damaged copy the check accepts is still a filter the code can use
 *     (ASan watches every access) and stays storable under adds.
 *
 * Build: make fuzz-bloom (long run) or make fuzz-bloom-smoke.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "bloom.h"

#define UNIVERSE 512

/* ------------------------------------------------------------- memory */

static bool fail_allocations;

static void *fuzz_realloc(void *ptr, size_t size) {
    return fail_allocations ? NULL : realloc(ptr, size);
}

static void fuzz_free(void *ptr) { free(ptr); }

static void *fuzz_calloc(size_t nmemb, size_t size) {
    return fail_allocations ? NULL : calloc(nmemb, size);
}

static const fg_bloom_allocator alloc = {{fuzz_realloc, fuzz_free}, fuzz_calloc};

/* --------------------------------------------------------- invariants */

/* Everything a filter is, addresses and bits included. */
static uint64_t digest(const fg_bloom *f) {
    uint64_t x = 0xcbf29ce484222325ULL;
#define MIX(v) (x = (x ^ (uint64_t)(v)) * 0x100000001b3ULL)
    MIX(f->capacity0);
    MIX(f->expansion);
    MIX(f->nlevels);
    MIX(f->hash);
    MIX((uintptr_t)f->levels);
    for (uint32_t i = 0; i < f->nlevels; i++) {
        const fg_bloom_level *l = &f->levels[i];
        MIX((uintptr_t)l->bits);
        MIX(l->nblocks);
        MIX(l->items);
        MIX(l->bits_set);
        for (uint64_t w = 0; w < l->nblocks * 8; w++) MIX(l->bits[w]);
    }
#undef MIX
    return x;
}

/* An item of the universe as filter f hashes it. */
static uint64_t item_hash(const fg_bloom *f, uint64_t item) {
    uint8_t key[3] = {(uint8_t)item, (uint8_t)(item >> 8), (uint8_t)(item * 31)};
    return fg_bloom_hash(f->hash, key, 1 + item % 3);
}

/* A copy made as a loader makes it: geometries pushed, bits and counters
 * copied in. */
static void restore(const fg_bloom *f, fg_bloom *copy) {
    *copy = (fg_bloom){f->error, f->capacity0, f->expansion, 0, f->hash, NULL};
    for (uint32_t i = 0; i < f->nlevels; i++) {
        CHECK(fg_bloom_push_level(copy, &f->levels[i], &alloc) == FG_OK);
        fg_bloom_level *l = &copy->levels[i];
        memcpy(l->bits, f->levels[i].bits, f->levels[i].nblocks * 64);
        l->items = f->levels[i].items;
        l->bits_set = f->levels[i].bits_set;
    }
}

/* --------------------------------------------------------- the script */

typedef struct run {
    reader in;
    fg_bloom f;
    bool added[UNIVERSE]; /* answered ADDED or PRESENT once */
    uint64_t adds;        /* ADDED answers */
} run;

static void check_filter(const run *u) {
    CHECK(fg_bloom_storable(&u->f));
    CHECK(fg_bloom_items(&u->f) == u->adds);
    CHECK(fg_bloom_cardinality(&u->f) >= u->adds);
    for (uint64_t i = 0; i < UNIVERSE; i++)
        if (u->added[i]) CHECK(fg_bloom_contains(&u->f, item_hash(&u->f, i)));
}

static void add(run *u, uint64_t item, bool fail) {
    uint64_t before = digest(&u->f);
    fg_bloom_level newest = u->f.levels[u->f.nlevels - 1];
    fail_allocations = fail;
    fg_bloom_add_result r = fg_bloom_add(&u->f, item_hash(&u->f, item), &alloc);
    fail_allocations = false;
    switch (r) {
    case FG_BLOOM_ADDED:
        u->adds++;
        u->added[item] = true;
        break;
    case FG_BLOOM_PRESENT:
        u->added[item] = true;
        CHECK(digest(&u->f) == before);
        break;
    case FG_BLOOM_FULL:
        CHECK(u->f.expansion == 0 && newest.items == newest.capacity);
        CHECK(digest(&u->f) == before);
        break;
    case FG_BLOOM_NOMEM:
        CHECK(fail || u->f.nlevels == FG_BLOOM_MAX_LEVELS);
        CHECK(newest.items == newest.capacity);
        CHECK(digest(&u->f) == before);
        break;
    }
}

/* A restored copy answers as the filter does. */
static void check_copy(const run *u) {
    fg_bloom copy;
    restore(&u->f, &copy);
    CHECK(fg_bloom_storable(&copy));
    for (uint64_t i = 0; i < UNIVERSE; i++)
        CHECK(fg_bloom_contains(&copy, item_hash(&copy, i)) ==
              fg_bloom_contains(&u->f, item_hash(&u->f, i)));
    CHECK(fg_bloom_cardinality(&copy) == fg_bloom_cardinality(&u->f));
    CHECK(fg_bloom_bytes(&copy) == fg_bloom_bytes(&u->f));
    fg_bloom_free(&copy, &alloc);
}

/* A copy with one thing changed: accepted or not, nothing may break. The
 * counts and geometry fields keep the allocation's size; nblocks is put
 * back before freeing. */
static void damage_copy(run *u) {
    fg_bloom copy;
    restore(&u->f, &copy);
    uint32_t level = (uint32_t)(take(&u->in, 1) % copy.nlevels);
    fg_bloom_level *l = &copy.levels[level];
    uint64_t nblocks = l->nblocks, value = take(&u->in, 2);
    switch (take(&u->in, 1) % 10) {
    case 0: l->bits[value % (nblocks * 8)] ^= (uint64_t)1 << (value % 64); break;
    case 1: l->items += value % 5 - 2; break;
    case 2: l->bits_set += value % 5 - 2; break;
    case 3: l->k = (uint8_t)value; break;
    case 4: l->blocks = (uint8_t)value; break;
    case 5: l->nblocks = value % (nblocks + 2); break;
    case 6: l->capacity += value % 5 - 2; break;
    case 7: copy.capacity0 += value % 3 - 1; break;
    case 8: copy.expansion = (uint32_t)(value % 6); break;
    case 9: copy.hash = (uint8_t)value; break;
    }
    if (fg_bloom_storable(&copy)) {
        CHECK(copy.levels[level].nblocks == nblocks);
        for (uint64_t i = 0; i < 64; i++) {
            fg_bloom_add(&copy, item_hash(&copy, i), &alloc);
            CHECK(fg_bloom_contains(&copy, item_hash(&copy, i)) || copy.expansion == 0 ||
                  copy.nlevels == FG_BLOOM_MAX_LEVELS);
        }
        CHECK(fg_bloom_storable(&copy));
    }
    /* Levels pushed by the adds were sized by the code; this one is put
     * back to what was allocated. */
    copy.levels[level].nblocks = nblocks;
    fg_bloom_free(&copy, &alloc);
}

static void step(run *u) {
    uint64_t op = take(&u->in, 1);
    switch (op % 8) {
    case 0:
    case 1:
    case 2: /* a run of adds */
        for (uint64_t n = take(&u->in, 1) % 32 + 1, item = take(&u->in, 2); n > 0; n--, item += 7)
            add(u, item % UNIVERSE, false);
        break;
    case 3:
        add(u, take(&u->in, 2) % UNIVERSE, true);
        break;
    case 4: /* lookups change nothing */
    {
        uint64_t before = digest(&u->f);
        for (uint64_t i = 0; i < UNIVERSE; i++) fg_bloom_contains(&u->f, item_hash(&u->f, i));
        CHECK(digest(&u->f) == before);
        break;
    }
    case 5:
        check_copy(u);
        break;
    case 6:
    case 7:
        damage_copy(u);
        break;
    }
    check_filter(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const double errors[] = {0.5, 0.1, 0.01, 0.002, 1e-5, 0.3};
    run *u = calloc(1, sizeof(*u));
    u->in = (reader){data, size};
    double error = errors[take(&u->in, 1) % 6];
    uint64_t capacity = take(&u->in, 1) % 40 + 1;
    uint32_t expansion = (uint32_t)(take(&u->in, 1) % 5);
    CHECK(fg_bloom_init(&u->f, error, capacity, expansion, &alloc) == FG_OK);
    /* Either hash, as a filter loaded with the legacy one would have. */
    if (take(&u->in, 1) % 2) u->f.hash = FG_BLOOM_HASH_LEGACY;
    for (int steps = 0; u->in.left > 0 && steps < 200; steps++) step(u);
    fg_bloom_free(&u->f, &alloc);
    free(u);
    return 0;
}
