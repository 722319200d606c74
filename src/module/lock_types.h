/*
 * lock_types.h - the module data types of locks and fenced values, and the
 * server's fencing counter.
 *
 *   fg-lockst  a lock or semaphore: an fg_lock_state (core/lock.h)
 *   fg-fenced  a value kept under a fencing token: the highest token seen
 *              and the value (possibly none)
 *
 * The fencing counter (the last token granted) is one per server. It is
 * saved in the RDB file as the module's aux data, raised by every FG.HOLD a
 * replica or an AOF replay applies, and never lowered (not even by FLUSHALL).
 */
#ifndef FG_LOCK_TYPES_H
#define FG_LOCK_TYPES_H

#include "../core/lock.h"
#include "redismodule_api.h"

typedef struct fenced_value {
    uint64_t token; /* highest token seen, >= 1 */
    char *value;    /* NULL when never set */
    size_t value_len;
} fenced_value;

int lock_types_create(RedisModuleCtx *ctx);

extern RedisModuleType *LockStateType;
extern RedisModuleType *FencedType;

/* A new empty state (kind 0, no holders) and its destructor. */
fg_lock_state *lockstate_create(void);
void lockstate_destroy(void *state);

/* What an opened key holds, as a lock state or a fenced value. */
typedef enum lock_lookup { LOCK_EMPTY, LOCK_FOUND, LOCK_WRONGTYPE } lock_lookup;
lock_lookup lockstate_lookup(RedisModuleKey *key, fg_lock_state **out);
lock_lookup fenced_lookup(RedisModuleKey *key, fenced_value **out);

/* After a change to the state of a key opened for writing: deletes the key
 * when the state has no holder left, else sets its absolute expiry to the
 * latest lease end (ms, rounded up). */
void lockstate_settle(RedisModuleKey *key, fg_lock_state *s);

/* Holds whose lease had ended when the server removed their key (by its
 * expiry, mostly), for INFO. */
long long lockstate_leases_ended_with_key(void);

/* Stores a fenced value in a key opened for writing (creating it when
 * empty): token, and value when value != NULL. */
void fenced_store(RedisModuleKey *key, uint64_t token, const char *value, size_t value_len);

/* The server's fencing counter. */
uint64_t fence_last(void);
void fence_raise(uint64_t token);

/* Name of a kind or mode ("lock", "semaphore", "exclusive", "shared") and
 * back; the parsers answer -1 for an unknown name. */
const char *lock_kind_name(uint8_t kind);
const char *lock_mode_name(uint8_t mode);
int lock_kind_from_name(RedisModuleString *name);
int lock_mode_from_name(RedisModuleString *name);

extern const fg_allocator module_allocator;

#endif
