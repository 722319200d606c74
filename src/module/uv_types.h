/*
 * uv_types.h - the module data type of unique counters (fg-uvcntr): a
 * core/uv.h counter per key, with RDB, AOF rewrite, digest, copy and
 * memory accounting.
 */
#ifndef FG_UV_TYPES_H
#define FG_UV_TYPES_H

#include "../core/uv.h"
#include "redismodule_api.h"

extern RedisModuleType *UvType;

/* Memory for a counter's rows, rings and buckets (RedisModule_Alloc). */
extern const fg_allocator uv_allocator;

int uv_types_create(RedisModuleCtx *ctx);

typedef enum uv_lookup { UV_EMPTY, UV_FOUND, UV_WRONGTYPE } uv_lookup;
uv_lookup uv_lookup_key(RedisModuleKey *key, fg_uv **out);

/* A new empty counter with validated parameters (fg_uv_init_tiers's). */
fg_uv *uv_create(int64_t span, int64_t minutes, int64_t hours, int64_t days, int64_t tzoffset);
void uv_destroy(void *value);

/* A counter from its serialized form (FG.UVLOAD, RDB); NULL when the bytes
 * are not a counter this code could have written. */
fg_uv *uv_decode(const void *buf, size_t len);

/* The serialized form, to be freed with RedisModule_Free. */
uint8_t *uv_encode(const fg_uv *uv, size_t *len);

#endif
