/*
 * uv_types.c - the module data type of unique counters (fg-uvcntr).
 *
 * One format everywhere: the core's serialized form (core/uv.h), which is
 * exactly the stored state and carries its own version. RDB saves it as one
 * string buffer, AOF rewrite as FG.UVLOAD's payload, COPY round-trips
 * through it, and DEBUG DIGEST hashes it, so master, replica and a reloaded
 * server agree byte for byte whenever their states do. Loading goes through
 * fg_uv_deserialize, which refuses anything fg_uv_add could not have built:
 * a corrupted RESTORE payload or FG.UVLOAD argument is an error, never a
 * counter that misbehaves later.
 *
 * A counter is at most a few MB (docs/uv.md, "Memory"), so the blocks are
 * plain RedisModule_Alloc: no counter is big enough to need TryAlloc's
 * refusal path, and a large one is freed in the background (free_effort).
 */
#include "uv_types.h"

#include <string.h>

#define ENCODING_VERSION 1
#define FREE_EFFORT_UNIT (64 * 1024)

RedisModuleType *UvType;

static void *uv_realloc(void *ptr, size_t size) {
    return RedisModule_Realloc(ptr, size);
}

static void uv_release(void *ptr) {
    RedisModule_Free(ptr);
}

const fg_allocator uv_allocator = {uv_realloc, uv_release};

uv_lookup uv_lookup_key(RedisModuleKey *key, fg_uv **out) {
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return UV_EMPTY;
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(key) != UvType)
        return UV_WRONGTYPE;
    *out = RedisModule_ModuleTypeGetValue(key);
    return UV_FOUND;
}

fg_uv *uv_create(int64_t span, int64_t minutes, int64_t hours, int64_t days, int64_t tzoffset) {
    fg_uv *uv = RedisModule_Alloc(sizeof(*uv));
    if (fg_uv_init_tiers(uv, span, minutes, hours, days, tzoffset) != FG_OK) {
        RedisModule_Free(uv);
        return NULL;
    }
    return uv;
}

void uv_destroy(void *value) {
    fg_uv *uv = value;
    fg_uv_free(uv, &uv_allocator);
    RedisModule_Free(uv);
}

fg_uv *uv_decode(const void *buf, size_t len) {
    fg_uv *uv = RedisModule_Alloc(sizeof(*uv));
    if (fg_uv_deserialize(uv, buf, len, &uv_allocator) != FG_OK) {
        RedisModule_Free(uv);
        return NULL;
    }
    return uv;
}

uint8_t *uv_encode(const fg_uv *uv, size_t *len) {
    *len = fg_uv_serialized_size(uv);
    uint8_t *buf = RedisModule_Alloc(*len);
    fg_uv_serialize(uv, buf);
    return buf;
}

static void uv_rdb_save(RedisModuleIO *io, void *value) {
    size_t len;
    uint8_t *buf = uv_encode(value, &len);
    RedisModule_SaveStringBuffer(io, (const char *)buf, len);
    RedisModule_Free(buf);
}

static void *uv_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    size_t len = 0;
    char *buf = RedisModule_LoadStringBuffer(io, &len);
    if (RedisModule_IsIOError(io)) return NULL; /* buf is NULL */
    fg_uv *uv = uv_decode(buf, len);
    RedisModule_Free(buf);
    return uv;
}

static void uv_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    size_t len;
    uint8_t *buf = uv_encode(value, &len);
    RedisModule_EmitAOF(io, "FG.UVLOAD", "sb", key, (const char *)buf, len);
    RedisModule_Free(buf);
}

static void uv_digest(RedisModuleDigest *md, void *value) {
    size_t len;
    uint8_t *buf = uv_encode(value, &len);
    RedisModule_DigestAddStringBuffer(md, (const char *)buf, len);
    RedisModule_DigestEndSequence(md);
    RedisModule_Free(buf);
}

static void *uv_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    size_t len;
    uint8_t *buf = uv_encode(value, &len);
    fg_uv *dup = uv_decode(buf, len);
    RedisModule_Free(buf);
    return dup; /* NULL only if the original was not storable: COPY answers an error */
}

static size_t uv_mem_usage(const void *value) {
    return (size_t)fg_uv_bytes(value);
}

static size_t uv_free_effort(RedisModuleString *key, const void *value) {
    (void)key;
    return 1 + (size_t)(fg_uv_bytes(value) / FREE_EFFORT_UNIT);
}

int uv_types_create(RedisModuleCtx *ctx) {
    RedisModuleTypeMethods methods = {.version = REDISMODULE_TYPE_METHOD_VERSION,
                                      .rdb_load = uv_rdb_load,
                                      .rdb_save = uv_rdb_save,
                                      .aof_rewrite = uv_aof_rewrite,
                                      .mem_usage = uv_mem_usage,
                                      .digest = uv_digest,
                                      .free = uv_destroy,
                                      .free_effort = uv_free_effort,
                                      .copy = uv_copy};
    UvType = RedisModule_CreateDataType(ctx, "fg-uvcntr", ENCODING_VERSION, &methods);
    return UvType ? REDISMODULE_OK : REDISMODULE_ERR;
}
