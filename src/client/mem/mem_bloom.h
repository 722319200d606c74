/*
 * mem_bloom.h - the Bloom filters of a mem: client (internal): a table of
 * in-process filters (filter.h) by key. See mem_bloom.c.
 *
 * The table maps a key to a core filter (src/core/bloom.h) and answers as
 * the module's BF.* commands do (docs/bloom.md): the same defaults, the
 * same replies, the same error messages. Every function may be called from
 * any number of threads at once, except fg_mem_blooms_free.
 */
#ifndef FG_MEM_BLOOM_H
#define FG_MEM_BLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "filter.h"

typedef struct fg_mem_blooms fg_mem_blooms;

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
