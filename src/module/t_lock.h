/*
 * t_lock.h - the lock, semaphore and fencing commands.
 */
#ifndef FG_T_LOCK_H
#define FG_T_LOCK_H

#include "families.h"
#include "redismodule_api.h"

extern const command_spec lock_commands[];
int lock_commands_created(RedisModuleCtx *ctx);

/* A keyspace event (DEL, expiry, eviction...) on a key, which may free a
 * lock without a lock command: its waiters are served soon. */
void lock_key_event(RedisModuleCtx *ctx, RedisModuleString *key);

/* FLUSHDB or SWAPDB replaced keys: every queue is served soon. */
void lock_keys_replaced(RedisModuleCtx *ctx);
void lock_info(RedisModuleInfoCtx *ctx);

#endif
