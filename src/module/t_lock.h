/*
 * t_lock.h - the lock, semaphore and fencing commands.
 */
#ifndef FG_T_LOCK_H
#define FG_T_LOCK_H

#include "redismodule_api.h"

int lock_register_commands(RedisModuleCtx *ctx);
extern const char *const lock_command_names[];

/* A keyspace event (DEL, expiry, eviction...) on a key, which may free a
 * lock without a lock command: its waiters are served soon. */
void lock_key_event(RedisModuleCtx *ctx, RedisModuleString *key);

/* FLUSHDB or SWAPDB replaced keys: every queue is served soon. */
void lock_keys_replaced(RedisModuleCtx *ctx);
void lock_info(RedisModuleInfoCtx *ctx);

#endif
