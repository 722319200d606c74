/*
 * filter.h - Bloom filters in this process (internal): the standalone
 * fg_filter, a mem: client's filters (mem/mem_bloom.c) and its policies'
 * Bloom lists (mem/mem_policy.c) are core filters (src/core/bloom.h) made
 * and grown the same way, with the module's defaults and messages. The
 * functions are in bloom.c.
 */
#ifndef FG_FILTER_H
#define FG_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "bloom.h"
#include "floodgate.h"

/* The filter BF.ADD, BF.MADD and BF.INSERT create on a missing key. */
#define FG_BF_DEFAULT_ERROR     0.01
#define FG_BF_DEFAULT_CAPACITY  100
#define FG_BF_DEFAULT_EXPANSION 2

/* The hash of an item in an in-process filter (an empty item may be given
 * as NULL). Those filters are made by fg_bloom_init and never loaded from
 * storage, so they all hash with XXH3. */
static inline uint64_t fg_bf_item_hash(const void *item, size_t len) {
    return fg_bloom_hash(FG_BLOOM_HASH_XXH3, item, len);
}

/* Memory of in-process filters: malloc's, zeroed bits from calloc. */
extern const fg_bloom_allocator fg_bf_heap;

/* A filter for checked options `o`, with memory from `a`: FG_CODE_INVALID
 * when its bits would exceed the core's bound, FG_CODE_NOMEM when the
 * memory cannot be had, with the module's messages. */
fg_code fg_bloom_create(fg_bloom *f, const fg_bloom_options *o, const fg_bloom_allocator *a,
                        fg_error *err);

/* Why fg_bloom_add answered FG_BLOOM_FULL or FG_BLOOM_NOMEM, with the
 * module's message; both are FG_CODE_INVALID, as on a server. */
fg_code fg_bloom_add_error(fg_bloom_add_result r, fg_error *err);

#endif
