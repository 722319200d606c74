/*
 * limiter_types.c - the module data types that hold rate-limit state.
 *
 * One type per family, so a key of one family used with a command of another
 * answers WRONGTYPE instead of being misread:
 *
 *   fg-bucket  the arrival time of a token/leaky bucket or GCRA, in ns. Eight
 *              bytes that live in the value slot itself: no allocation, so a
 *              bucket key costs what the keyspace costs and nothing more.
 *              A valid arrival time is never 0, which the server reads as
 *              "no value" when loading.
 *   fg-fixwin  a fixed window (start, count).
 *   fg-sliwin  a sliding window counter (start, count, previous count).
 *   fg-slilog  a sliding log (a ring of timestamps, see core/sliding_log.c).
 *
 * Persistence: RDB stores the fields as signed integers under encoding
 * version 1; loaders refuse other versions and any state that breaks the
 * rules FG.SETSTATE enforces, so a crafted RESTORE payload is an error, never
 * a crash. AOF rewrite emits FG.SETSTATE (the server appends PEXPIREAT).
 * The digest covers every field, so DEBUG DIGEST compares replicas exactly.
 */
#include "limiter_types.h"

#include <string.h>

#include "../core/gcra.h"

#define ENCODING_VERSION 1

static RedisModuleType *types[FG_LIMITER_FAMILIES];
static const char *const family_names[FG_LIMITER_FAMILIES] = {"bucket", "fixed", "sliding", "slidelog"};

const char *family_name(fg_limiter_family family) {
    return family_names[family];
}

int family_from_name(RedisModuleString *name, fg_limiter_family *out) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(name, &len);
    for (int f = 0; f < FG_LIMITER_FAMILIES; f++) {
        if (strlen(family_names[f]) == len && memcmp(family_names[f], s, len) == 0) {
            *out = (fg_limiter_family)f;
            return 1;
        }
    }
    return 0;
}

static void *module_realloc(void *ptr, size_t size) {
    return RedisModule_Realloc(ptr, size);
}
static void module_free(void *ptr) {
    RedisModule_Free(ptr);
}
const fg_allocator module_allocator = {module_realloc, module_free};

lookup_result limiter_lookup(RedisModuleKey *key, fg_limiter_family family, void **value) {
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return LOOKUP_EMPTY;
    if (type != REDISMODULE_KEYTYPE_MODULE || RedisModule_ModuleTypeGetType(key) != types[family])
        return LOOKUP_WRONGTYPE;
    *value = RedisModule_ModuleTypeGetValue(key);
    return LOOKUP_FOUND;
}

/* ---------------------------------------------------------------- storing */

static void set_or_replace(RedisModuleKey *key, fg_limiter_family family, void *value) {
    RedisModule_ModuleTypeSetValue(key, types[family], value);
}

void store_bucket(RedisModuleKey *key, const void *held, int64_t tat_ns, int64_t expire_ms) {
    void *value = (void *)(uintptr_t)tat_ns;
    if (held)
        RedisModule_ModuleTypeReplaceValue(key, types[FG_LIMITER_BUCKET], value, NULL);
    else
        set_or_replace(key, FG_LIMITER_BUCKET, value);
    RedisModule_SetAbsExpire(key, expire_ms);
}

/* Fixed-size states are updated in place when the key already holds one. */
static void store_struct(RedisModuleKey *key, fg_limiter_family family, void *held,
                         const void *state, size_t size, int64_t expire_ms) {
    if (held) {
        memcpy(held, state, size);
    } else {
        void *value = RedisModule_Alloc(size);
        memcpy(value, state, size);
        set_or_replace(key, family, value);
    }
    RedisModule_SetAbsExpire(key, expire_ms);
}

void store_fixed(RedisModuleKey *key, fg_fixed_state *held, const fg_fixed_state *s,
                 int64_t expire_ms) {
    store_struct(key, FG_LIMITER_FIXED, held, s, sizeof(*s), expire_ms);
}

void store_sliding(RedisModuleKey *key, fg_sliding_state *held, const fg_sliding_state *s,
                   int64_t expire_ms) {
    store_struct(key, FG_LIMITER_SLIDING, held, s, sizeof(*s), expire_ms);
}

fg_slog *slidelog_create(void) {
    fg_slog *log = RedisModule_Alloc(sizeof(*log));
    memset(log, 0, sizeof(*log));
    return log;
}

void slidelog_destroy(void *value) {
    fg_slog_free(value, &module_allocator);
    RedisModule_Free(value);
}

void store_slidelog(RedisModuleKey *key, fg_slog *log, int64_t expire_ms) {
    set_or_replace(key, FG_LIMITER_SLIDELOG, log);
    RedisModule_SetAbsExpire(key, expire_ms);
}

fg_status store_slidelog_effect(RedisModuleKey *key, const fg_slog_effect *e, int64_t expire_ms) {
    void *value;
    if (limiter_lookup(key, FG_LIMITER_SLIDELOG, &value) == LOOKUP_FOUND) {
        fg_status st = fg_slog_apply(value, e, &module_allocator);
        if (st != FG_OK) return st;
    } else {
        fg_slog *log = slidelog_create();
        fg_status st = fg_slog_apply(log, e, &module_allocator);
        if (st != FG_OK || log->len == 0) {
            slidelog_destroy(log);
            return st != FG_OK ? st : FG_EINVAL;
        }
        set_or_replace(key, FG_LIMITER_SLIDELOG, log);
    }
    RedisModule_SetAbsExpire(key, expire_ms);
    return FG_OK;
}

void slidelog_for_each_run(const fg_slog *log, void (*fn)(int64_t ts, int64_t count, void *arg),
                           void *arg) {
    uint32_t i = 0;
    while (i < log->len) {
        int64_t ts = fg_slog_at(log, i);
        uint32_t j = i + 1;
        while (j < log->len && fg_slog_at(log, j) == ts)
            j++;
        fn(ts, (int64_t)(j - i), arg);
        i = j;
    }
}

static void count_run(int64_t ts, int64_t count, void *arg) {
    (void)ts, (void)count;
    (*(uint32_t *)arg)++;
}

uint32_t slidelog_run_count(const fg_slog *log) {
    uint32_t runs = 0;
    slidelog_for_each_run(log, count_run, &runs);
    return runs;
}

/* ----------------------------------------------------------------- bucket */

static void *bucket_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    int64_t tat = RedisModule_LoadSigned(io);
    if (RedisModule_IsIOError(io) || !fg_gcra_state_storable(tat)) return NULL;
    return (void *)(uintptr_t)tat;
}

static void bucket_rdb_save(RedisModuleIO *io, void *value) {
    RedisModule_SaveSigned(io, bucket_tat(value));
}

static void bucket_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    RedisModule_EmitAOF(io, "FG.SETSTATE", "scl", key, "bucket", (long long)bucket_tat(value));
}

static size_t bucket_mem_usage(const void *value) {
    (void)value;
    return 0;
}

static void bucket_digest(RedisModuleDigest *md, void *value) {
    RedisModule_DigestAddLongLong(md, bucket_tat(value));
    RedisModule_DigestEndSequence(md);
}

static void bucket_free(void *value) {
    (void)value;
}

static void *bucket_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    return (void *)value;
}

/* ------------------------------------------------------------ fixed window */

static void *fixed_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    fg_fixed_state s;
    s.window_start_us = RedisModule_LoadSigned(io);
    s.count = RedisModule_LoadSigned(io);
    if (RedisModule_IsIOError(io) || !fg_fixed_state_storable(&s)) return NULL;
    fg_fixed_state *value = RedisModule_Alloc(sizeof(s));
    *value = s;
    return value;
}

static void fixed_rdb_save(RedisModuleIO *io, void *value) {
    const fg_fixed_state *s = value;
    RedisModule_SaveSigned(io, s->window_start_us);
    RedisModule_SaveSigned(io, s->count);
}

static void fixed_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    const fg_fixed_state *s = value;
    RedisModule_EmitAOF(io, "FG.SETSTATE", "scll", key, "fixed", (long long)s->window_start_us,
                        (long long)s->count);
}

static size_t fixed_mem_usage(const void *value) {
    (void)value;
    return sizeof(fg_fixed_state);
}

static void fixed_digest(RedisModuleDigest *md, void *value) {
    const fg_fixed_state *s = value;
    RedisModule_DigestAddLongLong(md, s->window_start_us);
    RedisModule_DigestAddLongLong(md, s->count);
    RedisModule_DigestEndSequence(md);
}

static void *struct_copy(const void *value, size_t size) {
    void *dup = RedisModule_Alloc(size);
    memcpy(dup, value, size);
    return dup;
}

static void *fixed_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    return struct_copy(value, sizeof(fg_fixed_state));
}

/* ---------------------------------------------------------- sliding window */

static void *sliding_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    fg_sliding_state s;
    s.window_start_us = RedisModule_LoadSigned(io);
    s.count = RedisModule_LoadSigned(io);
    s.prev_count = RedisModule_LoadSigned(io);
    if (RedisModule_IsIOError(io) || !fg_sliding_state_storable(&s)) return NULL;
    fg_sliding_state *value = RedisModule_Alloc(sizeof(s));
    *value = s;
    return value;
}

static void sliding_rdb_save(RedisModuleIO *io, void *value) {
    const fg_sliding_state *s = value;
    RedisModule_SaveSigned(io, s->window_start_us);
    RedisModule_SaveSigned(io, s->count);
    RedisModule_SaveSigned(io, s->prev_count);
}

static void sliding_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    const fg_sliding_state *s = value;
    RedisModule_EmitAOF(io, "FG.SETSTATE", "sclll", key, "sliding", (long long)s->window_start_us,
                        (long long)s->count, (long long)s->prev_count);
}

static size_t sliding_mem_usage(const void *value) {
    (void)value;
    return sizeof(fg_sliding_state);
}

static void sliding_digest(RedisModuleDigest *md, void *value) {
    const fg_sliding_state *s = value;
    RedisModule_DigestAddLongLong(md, s->window_start_us);
    RedisModule_DigestAddLongLong(md, s->count);
    RedisModule_DigestAddLongLong(md, s->prev_count);
    RedisModule_DigestEndSequence(md);
}

static void *sliding_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    return struct_copy(value, sizeof(fg_sliding_state));
}

/* ------------------------------------------------------------- sliding log */

/* RDB layout: the number of runs, then (timestamp, count) per run. */
static void *slidelog_rdb_load(RedisModuleIO *io, int encver) {
    if (encver != ENCODING_VERSION) return NULL;
    uint64_t runs = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io) || runs == 0 || runs > FG_SLOG_MAX_LIMIT) return NULL;
    fg_slog *log = slidelog_create();
    for (uint64_t i = 0; i < runs; i++) {
        fg_slog_effect e = {.drop_through_us = -1};
        e.at_us = RedisModule_LoadSigned(io);
        e.count = RedisModule_LoadSigned(io);
        if (RedisModule_IsIOError(io) || e.at_us < 0 || e.count < 1 ||
            fg_slog_apply(log, &e, &module_allocator) != FG_OK) {
            slidelog_destroy(log);
            return NULL;
        }
    }
    return log;
}

static void save_run(int64_t ts, int64_t count, void *io) {
    RedisModule_SaveSigned(io, ts);
    RedisModule_SaveSigned(io, count);
}

static void slidelog_rdb_save(RedisModuleIO *io, void *value) {
    RedisModule_SaveUnsigned(io, slidelog_run_count(value));
    slidelog_for_each_run(value, save_run, io);
}

typedef struct run_args {
    RedisModuleString **argv;
    size_t argc;
} run_args;

static void collect_run(int64_t ts, int64_t count, void *arg) {
    run_args *a = arg;
    a->argv[a->argc++] = RedisModule_CreateStringFromLongLong(NULL, ts);
    a->argv[a->argc++] = RedisModule_CreateStringFromLongLong(NULL, count);
}

static void slidelog_aof_rewrite(RedisModuleIO *io, RedisModuleString *key, void *value) {
    const fg_slog *log = value;
    run_args a = {RedisModule_Alloc(sizeof(RedisModuleString *) * 2 * slidelog_run_count(log)), 0};
    slidelog_for_each_run(log, collect_run, &a);
    RedisModule_EmitAOF(io, "FG.SETSTATE", "scv", key, "slidelog", a.argv, a.argc);
    for (size_t i = 0; i < a.argc; i++)
        RedisModule_FreeString(NULL, a.argv[i]);
    RedisModule_Free(a.argv);
}

static size_t slidelog_mem_usage(const void *value) {
    const fg_slog *log = value;
    return sizeof(*log) + (size_t)log->cap * sizeof(int64_t);
}

static void digest_run(int64_t ts, int64_t count, void *md) {
    RedisModule_DigestAddLongLong(md, ts);
    RedisModule_DigestAddLongLong(md, count);
}

static void slidelog_digest(RedisModuleDigest *md, void *value) {
    slidelog_for_each_run(value, digest_run, md);
    RedisModule_DigestEndSequence(md);
}

static void append_run(int64_t ts, int64_t count, void *log) {
    fg_slog_effect e = {.drop_through_us = -1, .at_us = ts, .count = count};
    fg_slog_apply(log, &e, &module_allocator); /* same entries: cannot fail */
}

static void *slidelog_copy(RedisModuleString *from, RedisModuleString *to, const void *value) {
    (void)from, (void)to;
    fg_slog *dup = slidelog_create();
    slidelog_for_each_run(value, append_run, dup);
    return dup;
}

/* -------------------------------------------------------------- registry */

int limiter_types_create(RedisModuleCtx *ctx) {
    static const char *const type_names[FG_LIMITER_FAMILIES] = {"fg-bucket", "fg-fixwin", "fg-sliwin",
                                                         "fg-slilog"};
    RedisModuleTypeMethods methods[FG_LIMITER_FAMILIES] = {
        [FG_LIMITER_BUCKET] = {.rdb_load = bucket_rdb_load,
                           .rdb_save = bucket_rdb_save,
                           .aof_rewrite = bucket_aof_rewrite,
                           .mem_usage = bucket_mem_usage,
                           .digest = bucket_digest,
                           .free = bucket_free,
                           .copy = bucket_copy},
        [FG_LIMITER_FIXED] = {.rdb_load = fixed_rdb_load,
                          .rdb_save = fixed_rdb_save,
                          .aof_rewrite = fixed_aof_rewrite,
                          .mem_usage = fixed_mem_usage,
                          .digest = fixed_digest,
                          .free = module_free,
                          .copy = fixed_copy},
        [FG_LIMITER_SLIDING] = {.rdb_load = sliding_rdb_load,
                            .rdb_save = sliding_rdb_save,
                            .aof_rewrite = sliding_aof_rewrite,
                            .mem_usage = sliding_mem_usage,
                            .digest = sliding_digest,
                            .free = module_free,
                            .copy = sliding_copy},
        [FG_LIMITER_SLIDELOG] = {.rdb_load = slidelog_rdb_load,
                             .rdb_save = slidelog_rdb_save,
                             .aof_rewrite = slidelog_aof_rewrite,
                             .mem_usage = slidelog_mem_usage,
                             .digest = slidelog_digest,
                             .free = slidelog_destroy,
                             .copy = slidelog_copy},
    };
    for (int f = 0; f < FG_LIMITER_FAMILIES; f++) {
        methods[f].version = REDISMODULE_TYPE_METHOD_VERSION;
        types[f] = RedisModule_CreateDataType(ctx, type_names[f], ENCODING_VERSION, &methods[f]);
        if (types[f] == NULL) return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
