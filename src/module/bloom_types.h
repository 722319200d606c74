/*
 * bloom_types.h - the module data type of Bloom filters (fg-bloomf) and its
 * dump format (BF.SCANDUMP, BF.LOADCHUNK, AOF rewrite, RDB).
 *
 * A key holds a bloom_value: a filter (core/bloom.h) and, while BF.LOADCHUNK
 * is filling it, what is still to come. A filter being loaded answers only
 * BF.LOADCHUNK (its next chunk), BF.SCANDUMP (what has arrived), BF.INFO and
 * BF.CARD (from its header, so the figures of the complete filter); the
 * other commands refuse it until its last byte has arrived.
 */
#ifndef FG_BLOOM_TYPES_H
#define FG_BLOOM_TYPES_H

#include "../core/bloom.h"
#include "redismodule_api.h"

/* Bit arrays are dumped in chunks of at most this many bytes, never across
 * two levels. */
#define BLOOM_CHUNK_MAX (16 * 1024 * 1024)

typedef struct bloom_loading bloom_loading;

typedef struct bloom_value {
    fg_bloom f;             /* the levels that have begun to arrive (all, once complete) */
    bloom_loading *loading; /* NULL once every byte has arrived */
} bloom_value;

extern RedisModuleType *BloomType;

/* Memory for the levels: tables from TryAlloc, bit arrays zeroed by the
 * allocator (memory_zeroed) once memory_refusal has allowed them. */
extern const fg_bloom_allocator bloom_allocator;

/* The refusal of bytes that no dump of this code could hold (RedisBloom's
 * words). */
extern const char ERR_BAD_DATA[];

int bloom_types_create(RedisModuleCtx *ctx);

typedef enum bloom_lookup { BLOOM_EMPTY, BLOOM_FOUND, BLOOM_WRONGTYPE } bloom_lookup;
bloom_lookup bloom_lookup_key(RedisModuleKey *key, bloom_value **out);

/* A new empty filter for fg_bloom_init's parameters (in range); NULL with
 * the reply that refuses it: its bits would exceed the core's bound, pass
 * a memory bound (memory_limits.h), or cannot be had. */
bloom_value *bloom_create(double error, uint64_t capacity, uint32_t expansion,
                          const char **refusal);
void bloom_destroy(void *value);

/* fg_bloom_add and fg_bloom_contains of an item, hashed as the filter
 * hashes (a complete filter only). A new level passes the memory bounds
 * first; FULL and NOMEM set *refusal to the reply. */
fg_bloom_add_result bloom_add(bloom_value *v, const char *item, size_t len, const char **refusal);
bool bloom_contains(const bloom_value *v, const char *item, size_t len);

/* The filter as its header describes it: every level's geometry and
 * counters, also those that have not arrived yet (bits may be NULL). For
 * the figures of BF.INFO and BF.CARD, never for lookups. */
fg_bloom bloom_announced(const bloom_value *v);

/* The dump header (BF.SCANDUMP iterator 0, BF.LOADCHUNK iterator 1), to be
 * freed with RedisModule_Free. */
char *bloom_header_encode(const bloom_value *v, size_t *len);

/* A filter to be loaded from a header: every byte of its bit arrays still
 * to come. NULL with the reply that refuses it: "ERR received bad data"
 * when the header is not one this code could have written for a filter it
 * could have made, or the memory bound the whole filter would pass. */
bloom_value *bloom_header_decode(const char *buf, size_t len, const char **refusal);

/* Bytes of all the bit arrays, and the bytes of them that have arrived
 * (all of them when the filter is complete). */
uint64_t bloom_total_bytes(const bloom_value *v);
uint64_t bloom_received_bytes(const bloom_value *v);

/* The dump chunk that begins at `offset` in the bit arrays laid end to end:
 * at most BLOOM_CHUNK_MAX bytes, within one level, among the bytes that
 * have arrived. *len is 0 (and NULL returned) past them. */
const char *bloom_chunk_at(const bloom_value *v, uint64_t offset, size_t *len);

/* Stores the bytes that arrive next in a filter being loaded: NULL, or the
 * reply that refuses them ("ERR received bad data": not the next bytes, or
 * not bytes this filter could hold; or the memory bound that a new level
 * passes, or its memory could not be had). */
const char *bloom_load_chunk(bloom_value *v, uint64_t offset, const char *buf, size_t len);

#endif
