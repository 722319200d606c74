/*
 * limiter_types.h - the module data types that hold rate-limit state.
 */
#ifndef FG_LIMITER_TYPES_H
#define FG_LIMITER_TYPES_H

#include "../core/limiter.h"
#include "redismodule_api.h"


/* Name used by FG.SETSTATE and FG.INSPECT ("bucket", "fixed", ...). */
const char *family_name(fg_limiter_family family);
int family_from_name(RedisModuleString *name, fg_limiter_family *out);

int limiter_types_create(RedisModuleCtx *ctx);

/* What an opened key holds, seen from one family. */
typedef enum lookup_result { LOOKUP_EMPTY, LOOKUP_FOUND, LOOKUP_WRONGTYPE } lookup_result;
lookup_result limiter_lookup(RedisModuleKey *key, fg_limiter_family family, void **value);

/* The bucket state is the arrival time itself, kept in the value slot. */
static inline int64_t bucket_tat(void *value) {
    return (int64_t)(uintptr_t)value;
}

/* Store a state in a key opened for writing (creating or replacing it) and
 * give the key its absolute expiry. The previous TTL is not kept. `held`
 * is the key's value of this family as the caller looked it up (NULL when
 * the key is empty or holds something else): it is updated in place, and
 * the key is not looked up again. */
void store_bucket(RedisModuleKey *key, const void *held, int64_t tat_ns, int64_t expire_ms);
void store_fixed(RedisModuleKey *key, fg_fixed_state *held, const fg_fixed_state *s,
                 int64_t expire_ms);
void store_sliding(RedisModuleKey *key, fg_sliding_state *held, const fg_sliding_state *s,
                   int64_t expire_ms);

/* A new empty log, its destructor, and storing a built log (taking it). */
fg_slog *slidelog_create(void);
void slidelog_destroy(void *log);
void store_slidelog(RedisModuleKey *key, fg_slog *log, int64_t expire_ms);

/* Apply a sliding-log effect, creating the log if the key is empty. On error
 * the key is unchanged. */
fg_status store_slidelog_effect(RedisModuleKey *key, const fg_slog_effect *e, int64_t expire_ms);

/* The sliding log as runs of equal timestamps: calls fn(ts, count, arg) in
 * order, oldest first. */
void slidelog_for_each_run(const fg_slog *log, void (*fn)(int64_t ts, int64_t count, void *arg),
                           void *arg);
uint32_t slidelog_run_count(const fg_slog *log);

extern const fg_allocator module_allocator;

#endif
