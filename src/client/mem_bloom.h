/*
 * mem_bloom.h - the Bloom filters of a client (internal): the in-process
 * table of a mem: client, the checks of fg_bloom_options that every backend
 * shares, and what bloom.c asks of client.c. See mem_bloom.c and bloom.c.
 *
 * The table maps a key to a core filter (src/core/bloom.h) and answers as
 * the module's BF.* commands do (docs/bloom.md): the same defaults, the
 * same replies, the same error messages. Every function may be called from
 * any number of threads at once, except fg_mem_blooms_free.
 */
#ifndef FG_MEM_BLOOM_H
#define FG_MEM_BLOOM_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bloom.h"
#include "conn.h"
#include "floodgate.h"
#include "messages.h"

/* The filter BF.ADD, BF.MADD and BF.INSERT create on a missing key. */
#define FG_BF_DEFAULT_ERROR     0.01
#define FG_BF_DEFAULT_CAPACITY  100
#define FG_BF_DEFAULT_EXPANSION 2

typedef struct fg_mem_blooms fg_mem_blooms;

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

/* NULL when out of memory. */
fg_mem_blooms *fg_mem_blooms_new(void);
void fg_mem_blooms_free(fg_mem_blooms *m);

/* BF.RESERVE with valid options. */
fg_code fg_mem_bf_reserve(fg_mem_blooms *m, const char *key, const fg_bloom_options *o,
                          fg_error *err);

/* BF.MADD (n >= 1; added may be NULL): stops at the first item that does
 * not fit, having set added[] for the items before it only. */
fg_code fg_mem_bf_add(fg_mem_blooms *m, const char *key, const void *const *items,
                      const size_t *lens, size_t n, bool *added, fg_error *err);

/* BF.MEXISTS: all false for a missing key. */
void fg_mem_bf_exists(fg_mem_blooms *m, const char *key, const void *const *items,
                      const size_t *lens, size_t n, bool *exists);

/* BF.CARD: 0 for a missing key. */
int64_t fg_mem_bf_card(fg_mem_blooms *m, const char *key);

#endif
